package integration

import (
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
)

// The fault suite: a provider reaches the daemon through a relay that
// fails as a network path does (one way black-holed, long, or lost in the
// middle of a message), on both transports. Each asserts that the
// requester gets one outcome, the answer or a clear error, before its
// deadline and nothing after it; the package's TestMain (leakcheck)
// fails the run if a goroutine of theirs outlives them.

// faultDeadline is the longest a requester may wait for the outcome.
const faultDeadline = 10 * time.Second

// TestFaultOneWay: a provider holding a request whose path loses one
// direction (what it sends, or what the daemon sends it) is taken for
// dead by the liveness check, as one that vanished, and its request is
// answered by another provider of the model.
func TestFaultOneWay(t *testing.T) {
	for _, way := range []struct {
		name string
		up   bool
	}{{"up", true}, {"down", false}} {
		for _, tr := range transports {
			t.Run(way.name+"/"+tr, func(t *testing.T) {
				t.Parallel()
				func() {
					d := startDaemon(t, fastLiveness)
					path := newFaultPath(t, d, tr)
					first := path.dialRaw(t, d, negotiate.ClientConfig{AgentID: "ow-first", Models: []string{"gpt-4o"}})
					req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "ow-req"})
					_, id := req.request("", corpus(t, "req-chat-tiny-07.json"))
					first.recvDataAnswering(faultDeadline)
					second := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "ow-second", Models: []string{"gpt-4o"}})
					path.darkWay(way.up, true)
					// The first provider goes on answering whatever PINGs reach it.
					go func() {
						for {
							if _, _, err := first.recvOrPong(faultDeadline); err != nil {
								return
							}
						}
					}()
					answerOnce(t, req, second, id, "ow-second")
					waitMetric(t, d, 1, "m2md_failovers_total", "reason=unresponsive")
					first.conn.Close()
					req.conn.Close()
					second.conn.Close()
				}()
			})
		}
	}
}

// answerOnce: prov (another provider of the model) gets the request id
// of req, answers it, and req gets that answer from it once, before the
// fault deadline, and nothing more.
func answerOnce(t *testing.T, req, prov *rawAgent, id uint64, from string) {
	t.Helper()
	start := time.Now()
	dl := prov.recvDataAnswering(faultDeadline)
	prov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
	r := req.recvDataAnswering(faultDeadline)
	if r.code != "" || r.hdr.RequestID != id || !r.hdr.IsEnd() || r.peer != from {
		t.Fatalf("requester got code %q for request %d from %q, want the answer to %d from %s", r.code, r.hdr.RequestID, r.peer, id, from)
	}
	if el := time.Since(start); el > faultDeadline {
		t.Fatalf("answered after %v, past the deadline %v", el, faultDeadline)
	}
	req.expectSilence(300 * time.Millisecond)
}

// TestFaultDelay: a provider 400 ms away each way (a long, slow path)
// that thinks for 2.5 s, longer than the liveness check waits for
// silence, is PINGed through the delay, answers, and keeps its session:
// its request is answered once, nothing fails over.
func TestFaultDelay(t *testing.T) {
	const delay = 400 * time.Millisecond
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			func() {
				d := startDaemon(t, nil)
				path := newFaultPath(t, d, tr)
				prov := path.dialRaw(t, d, negotiate.ClientConfig{AgentID: "delay-prov", Models: []string{"gpt-4o"}})
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "delay-req"})
				path.setDelay(delay)
				_, id := req.request("", corpus(t, "req-chat-tiny-07.json"))
				start := time.Now()
				dl := prov.recvDataAnswering(faultDeadline)
				if el := time.Since(start); el < delay {
					t.Fatalf("delivered after %v through a %v path", el, delay)
				}
				pings := 0
				for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); {
					if _, cm, err := prov.recvOrPong(time.Until(end)); err == nil && cm != nil && cm.Type == negotiate.TypePing {
						pings++
					}
				}
				if pings == 0 {
					t.Fatal("the daemon never PINGed the silent provider")
				}
				prov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
				r := req.recvDataAnswering(faultDeadline)
				if r.code != "" || r.hdr.RequestID != id || !r.hdr.IsEnd() || r.peer != "delay-prov" {
					t.Fatalf("requester got code %q for %d from %q", r.code, r.hdr.RequestID, r.peer)
				}
				req.expectSilence(300 * time.Millisecond)
				for _, m := range []string{"m2md_failovers_total", "m2md_sessions_closed_total"} {
					if n := metric(t, d, m); n != 0 {
						t.Fatalf("%s = %v over a slow path", m, n)
					}
				}
				prov.conn.Close()
				req.conn.Close()
			}()
		})
	}
}

// TestFaultCutMidMessage: the path of a provider is lost in the middle of
// a message: its reply (a 256 KiB answer, cut after 4 KiB), or the
// delivery of a 256 KiB request to it. WebSocket's TCP connection closes,
// QUIC's datagrams stop. A cut reply is never passed on in part: no reply
// reached the requester, so the request is answered by another provider
// of the model, once. A cut delivery, with no other provider, ends with
// agent_gone, once.
func TestFaultCutMidMessage(t *testing.T) {
	const size, cut = 256 << 10, 4 << 10
	for _, way := range []struct {
		name string
		up   bool
	}{{"reply", true}, {"delivery", false}} {
		for _, tr := range transports {
			t.Run(way.name+"/"+tr, func(t *testing.T) {
				t.Parallel()
				func() {
					d := startDaemon(t, fastLiveness)
					path := newFaultPath(t, d, tr)
					first := path.dialRaw(t, d, negotiate.ClientConfig{AgentID: "cut-first", Models: []string{"gpt-4o"}})
					req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "cut-req"})
					defer first.conn.Close()
					defer req.conn.Close()
					if !way.up {
						path.cutAfter(false, cut)
						id := req.newID()
						req.mustSend(req.channel(), 0, id, "", req.protect(req.channel(), paddedFrame(t, size)))
						start := time.Now()
						req.expectError(faultDeadline, id, "agent_gone", false)
						if el := time.Since(start); el > faultDeadline {
							t.Fatalf("agent_gone after %v, past the deadline", el)
						}
						req.expectSilence(300 * time.Millisecond)
						return
					}
					_, id := req.request("", corpus(t, "req-chat-tiny-07.json"))
					dl := first.recvDataAnswering(faultDeadline)
					second := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "cut-second", Models: []string{"gpt-4o"}})
					defer second.conn.Close()
					path.cutAfter(true, cut)
					// On QUIC the write waits on a path gone dark, until the
					// connection is closed.
					sent := make(chan struct{})
					fr := first.protect(dl.ch, paddedFrame(t, size))
					go func() {
						defer close(sent)
						_ = first.send(dl.ch, negotiate.FlagReply|negotiate.FlagEnd, dl.hdr.RequestID, "", fr)
					}()
					answerOnce(t, req, second, id, "cut-second")
					reason := map[string]string{"ws": "disconnected", "quic": "unresponsive"}[tr]
					waitMetric(t, d, 1, "m2md_failovers_total", "reason="+reason)
					first.conn.Close()
					<-sent
				}()
			})
		}
	}
}
