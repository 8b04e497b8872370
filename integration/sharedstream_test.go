package integration

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// TestSharedStream: over QUIC, a session with feature shared_stream gets
// every delivery on one stream however many are outstanding, and may
// itself keep many requests outstanding on one stream; a session without
// the feature still gets one stream per delivery in flight
// (docs/protocol.md §1).
func TestSharedStream(t *testing.T) {
	d := startDaemon(t, nil)
	shared := []negotiate.Feature{negotiate.FeatureSharedStream}
	body := corpus(t, "req-chat-tiny-07.json")
	resp := corpus(t, "resp-chat-01.json")
	const n = 8
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityAEAD} {
		req := mustDialRaw(t, d, "quic", negotiate.ClientConfig{AgentID: "ss-req-" + mode.String(), Security: mode, Features: shared})
		if !req.sess.Params.Has(negotiate.FeatureSharedStream) {
			t.Fatalf("the daemon did not grant shared_stream: %v", req.sess.Params.Features)
		}
		for _, tc := range []struct {
			name     string
			features []negotiate.Feature
			channels int // distinct channels the deliveries arrive on
		}{
			{"shared", shared, 1},
			{"pool", nil, n},
		} {
			t.Run(mode.String()+"/"+tc.name, func(t *testing.T) {
				prov := mustDialRaw(t, d, "quic", negotiate.ClientConfig{AgentID: "ss-" + tc.name + "-" + mode.String(), Security: mode, Features: tc.features})
				reqCh := map[transport.ChannelID]bool{}
				sent := map[uint64]bool{}
				for range n {
					ch, id := req.request(prov.sess.AgentID, body)
					reqCh[ch], sent[id] = true, true
				}
				if len(reqCh) != 1 {
					t.Fatalf("the requester's %d requests went on %d channels, want 1", n, len(reqCh))
				}
				var held []*received
				provCh := map[transport.ChannelID]bool{}
				for range n {
					dl := prov.recvData(5 * time.Second)
					if dl.hdr.IsReply() || !bytes.Equal(dl.body, body) {
						t.Fatalf("delivery: flags %v, err %v", dl.hdr.Flags, dl.err)
					}
					held = append(held, dl)
					provCh[dl.ch] = true
				}
				if len(provCh) != tc.channels {
					t.Fatalf("%d deliveries in flight arrived on %d channels, want %d", n, len(provCh), tc.channels)
				}
				for i := len(held) - 1; i >= 0; i-- { // answered last first
					prov.reply(held[i].ch, held[i].hdr.RequestID, true, resp)
				}
				for range n {
					r := req.recvData(5 * time.Second)
					if !r.hdr.IsEnd() || r.code != "" || !sent[r.hdr.RequestID] || !reqCh[r.ch] || !bytes.Equal(r.body, resp) {
						t.Fatalf("reply to %d on %d: flags %v code %q", r.hdr.RequestID, r.ch, r.hdr.Flags, r.code)
					}
					delete(sent, r.hdr.RequestID)
				}
			})
		}
	}
}

// TestSharedStreamClients: Go clients negotiate shared_stream over QUIC,
// and many requests outstanding at once on each side's one stream, in
// mode aead (every frame numbered on that one channel, sealed by
// concurrent senders), all come back whole.
func TestSharedStreamClients(t *testing.T) {
	d := startDaemon(t, nil)
	const n = 32
	var arrived sync.WaitGroup
	arrived.Add(n)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	prov := dialClient(t, d.url("quic"), client.Options{
		AgentID: "ssc-prov", Security: frame.SecurityAEAD, TLSConfig: d.clientTLS(t),
		Handler: client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
			arrived.Done()
			select { // every request is outstanding before any is answered
			case <-all:
			case <-ctx.Done():
				return
			}
			_ = w.Respond(req.Body)
		}),
	})
	req := dialClient(t, d.url("quic"), client.Options{AgentID: "ssc-req", Security: frame.SecurityAEAD, TLSConfig: d.clientTLS(t)})
	for _, c := range []*client.Client{prov, req} {
		if !c.Session().Params.Has(negotiate.FeatureSharedStream) {
			t.Fatalf("%s: shared_stream not negotiated: %v", c.AgentID(), c.Session().Params.Features)
		}
	}
	body := corpus(t, "resp-chat-01.json")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, n)
	for i := range n {
		go func() {
			b := bytes.Replace(body, []byte(`"id"`), fmt.Appendf(nil, `"i%d":0,"id"`, i), 1)
			resp, err := req.Do(ctx, b, client.To(prov.AgentID()))
			if err == nil && !bytes.Equal(resp.Body, b) {
				err = fmt.Errorf("request %d: the reply is not its request", i)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
