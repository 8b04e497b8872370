package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// waitSessions polls /healthz until the daemon counts n sessions. A session
// leaves the count once its connection is closed, and closing a WebSocket
// whose peer does not read waits for the closing handshake (5 s).
func waitSessions(t testing.TB, d *testDaemon, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := adminGet(t, d, "/healthz")
		var h struct{ Sessions int }
		if code == http.StatusOK && json.Unmarshal([]byte(body), &h) == nil && h.Sessions == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz %d %s, want %d sessions", code, body, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProviderKilledMidStream: a provider that disconnects after two
// chunks leaves the requester with the two chunks, in order, then
// agent_gone (END, naming the provider) within a second.
func TestProviderKilledMidStream(t *testing.T) {
	d := startDaemon(t, nil)
	for _, mode := range modes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				suffix := mode.String() + "-" + tr
				prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "kprov-" + suffix, Security: mode, Models: []string{"gpt-4o"}})
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "kreq-" + suffix, Security: mode})
				_, id := req.request("", corpus(t, "req-stream-01.json"))
				_, other := req.request("", corpus(t, "req-chat-1k-01.json")) // never answered at all
				// On QUIC the two may arrive in either order: stream the one
				// whose body is the streaming request.
				dl := prov.recvData(5 * time.Second)
				if dl2 := prov.recvData(5 * time.Second); string(dl2.body) == string(corpus(t, "req-stream-01.json")) {
					dl = dl2
				}
				in := metric(t, d, "m2md_frames_in_total", "transport="+tr)
				prov.reply(dl.ch, dl.hdr.RequestID, false, chunk("k", 0))
				prov.reply(dl.ch, dl.hdr.RequestID, false, chunk("k", 1))
				// Kill it once the daemon has the chunks: what a QUIC peer
				// sends just before closing can still be lost in transit
				// (TestRepliesJustBeforeClose).
				waitMetric(t, d, in+2, "m2md_frames_in_total", "transport="+tr)
				start := time.Now()
				prov.conn.Close()

				got := map[uint64][]*received{}
				for range 4 {
					r := req.recvData(5 * time.Second)
					got[r.hdr.RequestID] = append(got[r.hdr.RequestID], r)
				}
				if el := time.Since(start); el > time.Second {
					t.Fatalf("agent_gone took %v", el)
				}
				s := got[id]
				if len(s) != 3 || string(s[0].body) != string(chunk("k", 0)) || string(s[1].body) != string(chunk("k", 1)) || s[0].hdr.IsEnd() || s[1].hdr.IsEnd() {
					t.Fatalf("stream: %d replies", len(s))
				}
				for _, last := range []*received{s[2], got[other][0]} {
					if last.code != "agent_gone" || !last.hdr.IsEnd() || last.peer != prov.sess.AgentID {
						t.Fatalf("last reply: code %q flags %v peer %q", last.code, last.hdr.Flags, last.peer)
					}
				}
				req.expectSilence(100 * time.Millisecond)
			})
		}
	}
}

// TestRequesterKilled: replies for a requester that has gone are dropped,
// counted (requester_gone), and answered to the provider with a NOTICE
// (REPLY|END|NOTICE, the delivery id) for each, so it can stop streaming.
func TestRequesterKilled(t *testing.T) {
	for _, mode := range modes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				d := startDaemon(t, nil)
				prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "gprov", Security: mode, Models: []string{"gpt-4o"}})
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "greq", Security: mode})
				var dls []*received
				for range 2 {
					req.request("", corpus(t, "req-chat-1k-01.json"))
					dls = append(dls, prov.recvData(5*time.Second))
				}
				req.conn.Close()
				waitSessions(t, d, 1)

				prov.reply(dls[0].ch, dls[0].hdr.RequestID, false, chunk("late", 0))
				prov.expectError(5*time.Second, dls[0].hdr.RequestID, "requester_gone", true)
				prov.reply(dls[0].ch, dls[0].hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
				prov.expectError(5*time.Second, dls[0].hdr.RequestID, "requester_gone", true)
				prov.reply(dls[1].ch, dls[1].hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
				prov.expectError(5*time.Second, dls[1].hdr.RequestID, "requester_gone", true)
				waitMetric(t, d, 3, "m2md_routing_failures_total", "reason=requester_gone")

				// The provider's session is fine and serves the next one.
				next := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: fmt.Sprintf("greq2-%s", tr), Security: mode})
				roundTrip(t, next, prov)
			})
		}
	}
}

// TestRepliesJustBeforeClose: replies a provider sends and then closes its
// connection at once must all reach the requester, before agent_gone: Send
// returned for them, and Close promises to let the peer take them. On QUIC
// the control stream's end, which tells the daemon the agent is going, can
// overtake the replies on their data stream; the daemon must still read
// them first.
func TestRepliesJustBeforeClose(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			const runs, chunks = 10, 5
			for i := range runs {
				prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: fmt.Sprintf("last-prov-%s-%d", tr, i), Models: []string{"gpt-4o"}})
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: fmt.Sprintf("last-req-%s-%d", tr, i)})
				_, id := req.request("", corpus(t, "req-stream-01.json"))
				dl := prov.recvData(5 * time.Second)
				for k := range chunks {
					prov.reply(dl.ch, dl.hdr.RequestID, false, chunk("last", k))
				}
				prov.conn.Close()
				for k := range chunks {
					r := req.recvData(5 * time.Second)
					if r.hdr.RequestID != id || string(r.body) != string(chunk("last", k)) {
						t.Fatalf("run %d: reply %d is %q (flags %v), want chunk %d: chunks sent before Close were lost", i, k, r.code, r.hdr.Flags, k)
					}
				}
				req.expectError(5*time.Second, id, "agent_gone", false)
				req.conn.Close()
			}
		})
	}
}

// TestProviderOutOfChannels: a QUIC provider can have only as many
// deliveries in flight as it allows the daemon streams. A request beyond
// that is answered provider_busy at once; it must not stall the
// requester's session (whose other messages wait behind it) nor be
// mistaken for the provider having gone.
func TestProviderOutOfChannels(t *testing.T) {
	d := startDaemon(t, nil)
	prov := mustDialRaw(t, d, "quic", negotiate.ClientConfig{AgentID: "narrow", Models: []string{"gpt-4o"}}, transport.Config{MaxIncomingChannels: 2})
	req := mustDialRaw(t, d, "quic", negotiate.ClientConfig{AgentID: "narrow-req"})
	var held []*received
	for range 2 {
		req.request("", corpus(t, "req-chat-1k-01.json"))
		held = append(held, prov.recvData(5*time.Second))
	}
	start := time.Now()
	_, id := req.request("", corpus(t, "req-chat-1k-01.json"))
	// The session goes on meanwhile: a PING right after is answered too
	// (in either order: they travel on different streams).
	req.sendControl(negotiate.AppendPing(nil, req.sess.ID, time.Now()))
	var busy, pong bool
	for !busy || !pong {
		r, cm, err := req.recv(5 * time.Second)
		switch {
		case cm != nil && cm.Type == negotiate.TypePong:
			pong = true
		case err == nil && r.code == "provider_busy" && r.hdr.RequestID == id:
			busy = true
		case err == nil:
			t.Fatalf("got code %q for %d, want provider_busy for %d", r.code, r.hdr.RequestID, id)
		default:
			t.Fatalf("after %v: %v (pong %t, busy %t)", time.Since(start), err, pong, busy)
		}
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("answers took %v", el)
	}
	// The provider is fine: it finishes one, and the next request fits.
	prov.reply(held[0].ch, held[0].hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
	if r := req.recvData(5 * time.Second); r.code != "" {
		t.Fatalf("reply code %q", r.code)
	}
	_, id = req.request("", corpus(t, "req-chat-1k-01.json"))
	got := prov.recvData(5 * time.Second)
	prov.reply(got.ch, got.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
	if r := req.recvData(5 * time.Second); r.hdr.RequestID != id || r.code != "" {
		t.Fatalf("reply id %d code %q", r.hdr.RequestID, r.code)
	}
}
