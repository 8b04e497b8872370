package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// Feature batch (docs/protocol.md §4.4): a provider's Chunks go out as one
// reply when requester, daemon and provider all negotiated it, one reply
// per chunk otherwise; the requester reads the same chunks, byte for byte,
// in order, either way.
func TestChunkBatch(t *testing.T) {
	var chunks [][]byte
	for _, name := range streamChunks {
		chunks = append(chunks, corpus(t, name))
	}
	final := corpus(t, "resp-chat-01.json")
	noBatch := []negotiate.Feature{negotiate.FeatureBatch}
	for _, tc := range []struct {
		name             string
		daemonOff        bool
		reqOff, provOff  bool
		wantFramesPerRun uint64 // the provider's replies for the request
	}{
		{"batched", false, false, false, 2},
		{"requester without batch", false, true, false, uint64(len(chunks)) + 1},
		{"provider without batch", false, false, true, uint64(len(chunks)) + 1},
		{"daemon without batch", true, false, false, uint64(len(chunks)) + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDaemon(t, func(c *daemon.Config) {
				if tc.daemonOff {
					c.DisableFeatures = noBatch
				}
			})
			for _, tr := range transports {
				t.Run(tr, func(t *testing.T) {
					model := "batch-" + tr
					po := client.Options{AgentID: "bprov-" + tr, Models: []string{model}, TLSConfig: d.clientTLS(t),
						Security: frame.SecurityAEAD,
						Handler: client.HandlerFunc(func(ctx context.Context, r *client.Request, w client.ResponseWriter) {
							if err := w.Chunks(chunks...); err != nil {
								w.Error("chunks_failed", err.Error())
								return
							}
							w.Respond(final)
						})}
					ro := client.Options{AgentID: "breq-" + tr, TLSConfig: d.clientTLS(t), Security: frame.SecurityAEAD}
					if tc.provOff {
						po.DisableFeatures = noBatch
					}
					if tc.reqOff {
						ro.DisableFeatures = noBatch
					}
					prov := dialClient(t, d.url(tr), po)
					req := dialClient(t, d.url(tr), ro)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					before := prov.Stats().FramesSent
					st, err := req.Stream(ctx, []byte(`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"x"}]}`))
					if err != nil {
						t.Fatal(err)
					}
					defer st.Close()
					for i := 0; ; i++ {
						body, last, err := st.Next()
						if err != nil {
							t.Fatalf("reply %d: %v", i, err)
						}
						if i == 0 && tc.wantFramesPerRun == 2 {
							// The rest of the batch is there already.
							if n := st.Buffered(); n < len(chunks)-1 {
								t.Fatalf("Buffered %d after the first chunk of a batch, want ≥ %d", n, len(chunks)-1)
							}
						}
						if i < len(chunks) {
							if last || !bytes.Equal(body, chunks[i]) {
								t.Fatalf("chunk %d (final %v):\n%s\nwant\n%s", i, last, body, chunks[i])
							}
							continue
						}
						if !last || !bytes.Equal(body, final) {
							t.Fatalf("reply %d (final %v): %s", i, last, body)
						}
						break
					}
					if _, _, err := st.Next(); !errors.Is(err, io.EOF) {
						t.Fatalf("after the final reply: %v", err)
					}
					if n := prov.Stats().FramesSent - before; n != tc.wantFramesPerRun {
						t.Fatalf("provider sent %d frames, want %d", n, tc.wantFramesPerRun)
					}

					// Do collects a batch's chunks like any others.
					resp, err := req.Do(ctx, []byte(`{"model":"`+model+`","messages":[{"role":"user","content":"x"}]}`))
					if err != nil || len(resp.Chunks) != len(chunks) || !bytes.Equal(resp.Body, final) {
						t.Fatalf("Do: %v, %d chunks", err, len(resp.Chunks))
					}
					for i := range chunks {
						if !bytes.Equal(resp.Chunks[i], chunks[i]) {
							t.Fatalf("Do chunk %d differs", i)
						}
					}
				})
			}
		})
	}
}

// A batch only carries whole JSON values: "1,2" as one chunk would come
// out as two, so Chunks refuses it, as Chunk refuses what is not JSON.
func TestChunkBatchRefusesPartialValues(t *testing.T) {
	d := startDaemon(t, nil)
	errs := make(chan error, 1)
	prov := dialClient(t, d.url("quic"), client.Options{AgentID: "bpv-prov", Models: []string{"bpv"}, TLSConfig: d.clientTLS(t),
		Handler: client.HandlerFunc(func(ctx context.Context, r *client.Request, w client.ResponseWriter) {
			err := w.Chunks([]byte(`{"a":1}`), []byte(`1,2`))
			errs <- err
			w.Error("chunks_failed", "refused")
		})})
	_ = prov
	req := dialClient(t, d.url("quic"), client.Options{AgentID: "bpv-req", TLSConfig: d.clientTLS(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := req.Do(ctx, []byte(`{"model":"bpv","messages":[{"role":"user","content":"x"}]}`))
	var rerr *client.RemoteError
	if !errors.As(err, &rerr) || rerr.Code != "chunks_failed" {
		t.Fatalf("Do: %v", err)
	}
	if err := <-errs; err == nil {
		t.Fatal("Chunks accepted a chunk that is not one JSON value")
	}
}

// The wire rules of feature batch, with hand-written messages.
func TestChunkBatchWire(t *testing.T) {
	d := startDaemon(t, nil)
	batchFeat := []negotiate.Feature{negotiate.FeatureBatch}
	batchFrame := func(t *testing.T, chunks ...string) []byte {
		var cs [][]byte
		for _, c := range chunks {
			cs = append(cs, []byte(c))
		}
		fr, err := frame.AppendEncodeSchema(nil, negotiate.AppendBatch(nil, cs), frame.SchemaStream, frame.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return fr
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "bwprov-" + tr, Models: []string{"bw-" + tr}, Features: batchFeat})
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "bwreq-" + tr, Features: batchFeat})
			plain := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "bwplain-" + tr})
			body := []byte(`{"model":"bw-` + tr + `","stream":true,"messages":[{"role":"user","content":"x"}]}`)

			// A requester with batch: the delivery is marked BATCH, and a
			// batch reaches it as it was sent, flag and all.
			ch, id := req.request("", body)
			got := prov.recvData(5 * time.Second)
			if got.hdr.Flags != negotiate.FlagBatch || !bytes.Equal(got.body, body) {
				t.Fatalf("delivery flags %#02x body %s", got.hdr.Flags, got.body)
			}
			if err := prov.send(got.ch, negotiate.FlagReply|negotiate.FlagBatch, got.hdr.RequestID, "", prov.protect(got.ch, batchFrame(t, `{"n":1}`, `{"n":2}`))); err != nil {
				t.Fatal(err)
			}
			r := req.recvData(5 * time.Second)
			if r.ch != ch || r.hdr.RequestID != id || r.hdr.Flags != negotiate.FlagReply|negotiate.FlagBatch || string(r.body) != `[{"n":1},{"n":2}]` {
				t.Fatalf("batch arrived as %+v %s", r.hdr, r.body)
			}
			prov.reply(got.ch, got.hdr.RequestID, true, []byte(`{"done":true}`))
			if r := req.recvData(5 * time.Second); r.hdr.Flags != negotiate.FlagReply|negotiate.FlagEnd {
				t.Fatalf("final %+v", r.hdr)
			}

			// A requester without batch: the delivery is not marked, and a
			// batch sent anyway ends the request with bad_frame and earns
			// the provider a NOTICE.
			ch, id = plain.request("", body)
			got = prov.recvData(5 * time.Second)
			if got.hdr.Flags != 0 {
				t.Fatalf("delivery to a requester without batch has flags %#02x", got.hdr.Flags)
			}
			if err := prov.send(got.ch, negotiate.FlagReply|negotiate.FlagBatch, got.hdr.RequestID, "", prov.protect(got.ch, batchFrame(t, `{"n":1}`))); err != nil {
				t.Fatal(err)
			}
			r = plain.recvData(5 * time.Second)
			if r.ch != ch || r.hdr.RequestID != id || r.hdr.Flags != negotiate.FlagReply|negotiate.FlagEnd || r.code != string(negotiate.CodeBadFrame) {
				t.Fatalf("requester got %+v code %q", r.hdr, r.code)
			}
			n := prov.recvData(5 * time.Second)
			if n.hdr.Flags != negotiate.FlagReply|negotiate.FlagEnd|negotiate.FlagNotice || n.code != string(negotiate.CodeBadFrame) {
				t.Fatalf("provider got %+v code %q", n.hdr, n.code)
			}
			waitOutstanding(t, d, 0)

			// A requester with batch but a max_payload a batch might not
			// fit (below 128 KiB): the delivery is not marked.
			small := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "bwsmall-" + tr, Features: batchFeat, MaxPayload: negotiate.MinBatchPayload - 1})
			small.request("", body)
			got = prov.recvData(5 * time.Second)
			if got.hdr.Flags != 0 {
				t.Fatalf("delivery to a requester with max_payload %d has flags %#02x", negotiate.MinBatchPayload-1, got.hdr.Flags)
			}
			prov.reply(got.ch, got.hdr.RequestID, true, []byte(`{"done":true}`))
			small.recvData(5 * time.Second)
		})
	}
}

// BATCH from a session that did not negotiate it, or on a request, is a
// protocol error: CLOSE ERROR.
func TestChunkBatchProtocolErrors(t *testing.T) {
	d := startDaemon(t, nil)
	fr, err := frame.AppendEncodeSchema(nil, []byte(`[{"n":1}]`), frame.SchemaStream, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		features []negotiate.Feature
		flags    negotiate.DataFlags
	}{
		{"batch reply without the feature", nil, negotiate.FlagReply | negotiate.FlagBatch},
		{"request marked BATCH", []negotiate.Feature{negotiate.FeatureBatch}, negotiate.FlagBatch},
	} {
		for _, tr := range transports {
			t.Run(tc.name+"/"+tr, func(t *testing.T) {
				a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "bpe-" + tr, Features: tc.features})
				ch := transport.ChannelID(0)
				if tr == "quic" {
					ch = a.channel()
				}
				if err := a.send(ch, tc.flags, 1, "", a.protect(ch, fr)); err != nil {
					t.Fatal(err)
				}
				a.expectCloseError()
			})
		}
	}
}
