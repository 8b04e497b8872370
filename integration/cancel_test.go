package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// streamingHandler streams chunks every 10 ms until its context ends, then
// reports the context's cause on stopped. It writes at most 1,000 chunks.
func streamingHandler(started chan<- struct{}, stopped chan<- error, late *atomic.Int64) client.Handler {
	return client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
		started <- struct{}{}
		for i := range 1000 {
			if err := w.Chunk([]byte(fmt.Sprintf(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%d"}}]}`, i))); err != nil {
				stopped <- context.Cause(ctx)
				return
			}
			select {
			case <-ctx.Done():
				stopped <- context.Cause(ctx)
				return
			case <-time.After(10 * time.Millisecond):
			}
			if late != nil {
				late.Add(1)
			}
		}
		stopped <- errors.New("handler ran to the end")
	})
}

// A caller's context ending cancels the request at the provider within a
// second, frees the daemon's outstanding slot at once, and leaves the
// requester's channel reusable; in every security mode, over both
// transports.
func TestCancelEndToEnd(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
			t.Run(tr+"/"+mode.String(), func(t *testing.T) {
				base := len(ourGoroutines())
				started, stopped := make(chan struct{}, 4), make(chan error, 4)
				model := "cancel-" + tr + "-" + mode.String()
				prov := dialClient(t, d.url(tr), client.Options{
					AgentID: "cprov-" + tr + mode.String(), Models: []string{model}, Security: mode,
					Handler: streamingHandler(started, stopped, nil), TLSConfig: d.clientTLS(t),
				})
				req := dialClient(t, d.url(tr), client.Options{AgentID: "creq-" + tr + mode.String(), Security: mode, TLSConfig: d.clientTLS(t)})
				for _, c := range []*client.Client{prov, req} {
					if !c.Session().Params.Has(negotiate.FeatureCancel) {
						t.Fatalf("%s: feature cancel not negotiated: %q", c.AgentID(), c.Session().Params.Features)
					}
				}
				body := []byte(`{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"count"}]}`)
				for round := range 3 { // the channel and the handler slot are reusable
					ctx, cancel := context.WithCancel(context.Background())
					st, err := req.Stream(ctx, body)
					if err != nil {
						t.Fatal(err)
					}
					<-started
					for range 2 {
						if _, err := st.Recv(); err != nil {
							t.Fatalf("round %d: %v", round, err)
						}
					}
					cancelled := time.Now()
					cancel()
					select {
					case cause := <-stopped:
						if !errors.Is(cause, client.ErrRequestCancelled) {
							t.Fatalf("handler stopped by %v, want ErrRequestCancelled", cause)
						}
						if dt := time.Since(cancelled); dt > time.Second {
							t.Fatalf("handler stopped %v after the cancel", dt)
						}
					case <-time.After(2 * time.Second):
						t.Fatal("handler not cancelled within 2 s")
					}
					if _, err := st.Recv(); !errors.Is(err, context.Canceled) {
						t.Fatalf("Recv after cancel: %v", err)
					}
					st.Close()
					waitOutstanding(t, d, 0)
				}
				if s := req.Stats(); s.CancelsSent != 3 {
					t.Fatalf("requester sent %d CANCELs, want 3", s.CancelsSent)
				}
				if s := prov.Stats(); s.CancelsReceived != 3 {
					t.Fatalf("provider received %d CANCELs, want 3", s.CancelsReceived)
				}
				req.Close()
				prov.Close()
				expectGoroutinesBack(t, base)
			})
		}
	}
}

// A provider that did not negotiate cancel keeps working: the request is
// freed at the daemon at once, the provider's late replies are dropped and
// counted, and the next request still reaches it.
func TestCancelProviderWithoutFeature(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			started, stopped := make(chan struct{}, 4), make(chan error, 4)
			var chunks atomic.Int64
			model := "nocancel-" + tr
			prov := dialClient(t, d.url(tr), client.Options{
				AgentID: "ncprov-" + tr, Models: []string{model}, TLSConfig: d.clientTLS(t),
				DisableFeatures: []negotiate.Feature{negotiate.FeatureCancel},
				Handler: client.HandlerFunc(func(ctx context.Context, r *client.Request, w client.ResponseWriter) {
					started <- struct{}{}
					for i := range 20 {
						w.Chunk([]byte(fmt.Sprintf(`{"n":%d}`, i)))
						chunks.Add(1)
						time.Sleep(5 * time.Millisecond)
					}
					stopped <- w.Respond([]byte(`{"done":true}`))
				}),
			})
			if prov.Session().Params.Has(negotiate.FeatureCancel) {
				t.Fatal("DisableFeatures did not remove cancel")
			}
			req := dialClient(t, d.url(tr), client.Options{AgentID: "ncreq-" + tr, TLSConfig: d.clientTLS(t)})
			unknownBefore := metric(t, d, "m2md_routing_failures_total", "reason=unknown_request")
			body := []byte(`{"model":"` + model + `","stream":true,"messages":[{"role":"user","content":"x"}]}`)
			ctx, cancel := context.WithCancel(context.Background())
			st, err := req.Stream(ctx, body)
			if err != nil {
				t.Fatal(err)
			}
			<-started
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			cancel()
			waitOutstanding(t, d, 0)
			// The provider finishes on its own; its final reply is unknown.
			select {
			case err := <-stopped:
				if err != nil {
					t.Fatalf("provider's final reply: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("provider did not finish")
			}
			deadline := time.Now().Add(5 * time.Second)
			for metric(t, d, "m2md_routing_failures_total", "reason=unknown_request") == unknownBefore {
				if time.Now().After(deadline) {
					t.Fatal("late replies not counted")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got := metric(t, d, "m2md_cancels_total", "result=provider_without_cancel"); got < 1 {
				t.Fatalf("m2md_cancels_total{result=provider_without_cancel} = %v", got)
			}
			// The provider still serves.
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer rcancel()
			resp, err := req.Do(rctx, body)
			if err != nil || string(resp.Body) != `{"done":true}` {
				t.Fatalf("next request: %v %v", resp, err)
			}
			<-started
		})
	}
}

// The bytes and rules of §4.1, with agents that speak the protocol by hand.
func TestCancelWire(t *testing.T) {
	d := startDaemon(t, nil)
	cancelFeat := []negotiate.Feature{negotiate.FeatureCancel}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "wprov-" + tr, Models: []string{"wire-" + tr}, Features: cancelFeat})
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "wreq-" + tr, Features: cancelFeat})
			body := []byte(`{"model":"wire-` + tr + `","messages":[{"role":"user","content":"x"}]}`)
			ch, id := req.request("", body)
			got := prov.recvData(5 * time.Second)

			// A CANCEL on another channel, or for an unknown id, is ignored.
			if tr == "quic" {
				req.sendCancel(req.channel(), id)
			}
			req.sendCancel(ch, id+100)
			req.expectSilence(100 * time.Millisecond)
			prov.expectSilence(10 * time.Millisecond)

			req.sendCancel(ch, id)
			ack := req.recvData(5 * time.Second)
			if ack.ch != ch || ack.hdr.RequestID != id || ack.hdr.Flags != negotiate.FlagReply|negotiate.FlagEnd ||
				ack.code != string(negotiate.CodeCancelled) || ack.peer != prov.sess.AgentID {
				t.Fatalf("ack %+v", ack)
			}
			expectProviderCancel(t, prov, got)
			if n := d.Outstanding(); n != 0 {
				t.Fatalf("outstanding %d after CANCEL", n)
			}
			// The provider's late reply and its END are dropped.
			prov.reply(got.ch, got.hdr.RequestID, false, []byte(`{"late":1}`))
			prov.reply(got.ch, got.hdr.RequestID, true, []byte(`{"late":2}`))
			req.expectSilence(100 * time.Millisecond)

			// The id is free again, and a second request flows normally.
			expectRequestFlows(t, req, prov, body)
		})
	}
}

// A CANCEL in a session that did not negotiate the feature is a protocol
// error: CLOSE ERROR.
func TestCancelWithoutFeatureIsProtocolError(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "nofeat-" + tr})
			ch := transport.ChannelID(0)
			if tr == "quic" {
				ch = a.channel()
			}
			a.sendCancel(ch, 1)
			a.expectCloseError()
		})
	}
}

// A CANCEL on the QUIC control stream is a protocol error even in a
// session that negotiated the feature, and even when it names a request
// that is outstanding (docs/protocol.md §4.1): a CANCEL travels on its
// request's stream, so that it cannot overtake the request.
func TestCancelOnQUICControlStreamIsProtocolError(t *testing.T) {
	d := startDaemon(t, nil)
	cancelFeat := []negotiate.Feature{negotiate.FeatureCancel}
	prov := mustDialRaw(t, d, "quic", negotiate.ClientConfig{AgentID: "ctlprov", Models: []string{"ctl"}, Features: cancelFeat})
	req := mustDialRaw(t, d, "quic", negotiate.ClientConfig{AgentID: "ctlreq", Features: cancelFeat})
	_, id := req.request("", []byte(`{"model":"ctl","messages":[{"role":"user","content":"x"}]}`))
	prov.recvData(5 * time.Second)
	req.sendCancel(transport.ControlChannel, id)
	req.expectCloseError()
}

// expectCloseError waits for the daemon's CLOSE ERROR (a protocol error).
func (a *rawAgent) expectCloseError() {
	a.t.Helper()
	for {
		_, cm, err := a.recv(5 * time.Second)
		if errors.Is(err, errControl) && cm.Type == negotiate.TypeClose {
			if cm.Close.Reason != negotiate.ReasonError {
				a.t.Fatalf("CLOSE %s", cm.Close.Reason)
			}
			return
		}
		if err != nil && !errors.Is(err, errControl) {
			a.t.Fatalf("waiting for CLOSE: %v", err)
		}
	}
}

func (a *rawAgent) sendCancel(ch transport.ChannelID, id uint64) {
	a.t.Helper()
	msg, err := negotiate.AppendCancel(nil, id)
	if err != nil {
		a.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.conn.Send(ctx, ch, msg); err != nil {
		a.t.Fatalf("send CANCEL: %v", err)
	}
}

// waitOutstanding waits until the daemon's outstanding count (also on
// /metrics) is n.
func waitOutstanding(t testing.TB, d *testDaemon, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for d.Outstanding() != n {
		if time.Now().After(deadline) {
			t.Fatalf("outstanding %d, want %d", d.Outstanding(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := metric(t, d, "m2md_outstanding_requests"); got != float64(n) {
		t.Fatalf("m2md_outstanding_requests = %v, want %d", got, n)
	}
}

// A requester whose send queue overflows in the middle of a stream gets the
// request's final error queue_full once it reads again, never a stream that
// waits forever: the error is queued past the full queue.
func TestQueueFullEndsRequest(t *testing.T) {
	d := startDaemon(t, func(c *daemon.Config) { c.SendQueueLen = 2 })
	prov := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "qf-prov", Models: []string{"gpt-4o"}})
	req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "qf-req"})
	_, id := req.request("", corpus(t, "req-chat-1k-01.json"))
	dl := prov.recvData(5 * time.Second)
	big := paddedFrame(t, 64<<10)
	// The requester does not read: its socket buffers fill, then its
	// two-message queue; the provider keeps streaming until it is told.
	notified := false
	for i := 0; i < 400 && !notified; i++ {
		prov.mustSend(dl.ch, negotiate.FlagReply, dl.hdr.RequestID, "", prov.protect(dl.ch, big))
		if r, _, err := prov.recv(time.Millisecond); err == nil && r != nil && r.hdr.IsNotice() && r.code == string(negotiate.CodeQueueFull) {
			notified = true
		}
	}
	if !notified {
		t.Fatal("no queue_full notice after 400 chunks")
	}
	// Now the requester reads: chunks, then the END error.
	for i := 0; ; i++ {
		r := req.recvData(5 * time.Second)
		if r.hdr.RequestID != id {
			t.Fatalf("reply for request %d", r.hdr.RequestID)
		}
		if r.hdr.IsEnd() {
			if r.code != string(negotiate.CodeQueueFull) {
				t.Fatalf("END with code %q after %d chunks", r.code, i)
			}
			return
		}
		if i > 1000 {
			t.Fatal("no END")
		}
	}
}

// expectProviderCancel checks that the provider is sent CANCEL for the
// delivery got, on its channel.
func expectProviderCancel(t *testing.T, prov *rawAgent, got *received) {
	t.Helper()
	c := prov.recvData(5 * time.Second)
	if !c.cancel || c.ch != got.ch || c.hdr.RequestID != got.hdr.RequestID {
		t.Fatalf("provider got %+v, want CANCEL %d on channel %d", c, got.hdr.RequestID, got.ch)
	}
}

// expectRequestFlows sends one more request and checks that its answer
// comes back whole: what a CANCEL ended left nothing behind.
func expectRequestFlows(t *testing.T, req, prov *rawAgent, body []byte) {
	t.Helper()
	ch, id := req.request("", body)
	got := prov.recvData(5 * time.Second)
	prov.reply(got.ch, got.hdr.RequestID, true, []byte(`{"ok":true}`))
	back := req.recvData(5 * time.Second)
	if back.ch != ch || back.hdr.RequestID != id || string(back.body) != `{"ok":true}` {
		t.Fatalf("second request: %+v", back)
	}
}

// A NOTICE ends a delivery at the daemon, but the daemon's channel to the
// provider (its QUIC stream) goes back to the pool only with the provider's
// END: the Go client sends it at once (docs/protocol.md §4, notices), so a
// handler cut short by a notice does not hold a stream until the session
// ends.
func TestNoticeEndsDelivery(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			model := "notice-" + tr
			// Incompressible, so the chunk's frame exceeds the requester's
			// max_payload: refused with too_large, and the provider told.
			rnd := rand.New(rand.NewPCG(1, 2))
			big := make([]byte, 16<<10)
			for i := range big {
				big[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[rnd.IntN(36)]
			}
			chunk := []byte(`{"pad":"` + string(big) + `"}`)
			stopped := make(chan error, 1)
			prov := dialClient(t, d.url(tr), client.Options{AgentID: "nprov-" + tr, Models: []string{model}, TLSConfig: d.clientTLS(t),
				Handler: client.HandlerFunc(func(ctx context.Context, r *client.Request, w client.ResponseWriter) {
					if err := w.Chunk(chunk); err != nil {
						t.Errorf("chunk: %v", err)
					}
					<-ctx.Done() // the notice ends the delivery
					stopped <- context.Cause(ctx)
				})})
			_ = prov
			req := dialClient(t, d.url(tr), client.Options{AgentID: "nreq-" + tr, TLSConfig: d.clientTLS(t), MaxPayload: 8 << 10})
			unknown := metric(t, d, "m2md_routing_failures_total", "reason=unknown_request")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := req.Do(ctx, []byte(`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"x"}]}`))
			var rerr *client.RemoteError
			if !errors.As(err, &rerr) || rerr.Code != negotiate.CodeTooLarge {
				t.Fatalf("requester: %v", err)
			}
			select {
			case cause := <-stopped:
				if !errors.Is(cause, client.ErrDeliveryCancelled) {
					t.Fatalf("handler's context ended with %v", cause)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the notice did not end the handler")
			}
			// The provider's END reached the daemon (dropped there, as the
			// delivery had ended): the channel is free.
			waitMetric(t, d, unknown+1, "m2md_routing_failures_total", "reason=unknown_request")
			waitOutstanding(t, d, 0)
		})
	}
}
