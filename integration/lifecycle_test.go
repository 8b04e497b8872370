package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// fastKeepalive: PING after 1 s of silence, 1 s for each PONG (the
// protocol's minimums).
func fastKeepalive(c *daemon.Config) {
	c.PingInterval = time.Second
	c.PongTimeout = time.Second
}

// TestAgentPing: a PING from the agent is answered with a PONG of the
// session at once.
func TestAgentPing(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "pinger-" + tr})
			for range 3 {
				a.sendControl(negotiate.AppendPing(nil, a.sess.ID, time.Now()))
				a.expectControl(2*time.Second, negotiate.TypePong)
			}
		})
	}
}

// TestDaemonPingsIdleSession: the daemon PINGs a silent session every
// PingInterval; an agent that answers stays up, one that keeps the session
// busy itself is never PINGed, and one that never answers gets CLOSE
// TIMEOUT after the third missed PONG (≈ 1 s + 3 × 1 s).
func TestDaemonPingsIdleSession(t *testing.T) {
	t.Parallel() // mostly waiting on timers: overlap with the others
	for _, tr := range transports {
		t.Run(tr+"/answers", func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, fastKeepalive)
			a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "answers-" + tr})
			start := time.Now()
			pings := 0
			// Three PINGs, each answered: without the answers the third
			// would already be the end of the session.
			for pings < 3 {
				r, cm, err := a.recv(3 * time.Second)
				if !errors.Is(err, errControl) {
					t.Fatalf("got DATA %v / %v, want PINGs", r, err)
				}
				if cm.Type != negotiate.TypePing {
					t.Fatalf("got %s after %v, want only PINGs", cm.Type, time.Since(start))
				}
				if pings == 0 && time.Since(start) < 800*time.Millisecond {
					t.Fatalf("first PING after %v of silence, want ≥ 1 s", time.Since(start))
				}
				pings++
				a.sendControl(negotiate.AppendPong(nil, a.sess.ID, time.Now()))
			}
			if el := time.Since(start); el < 2500*time.Millisecond {
				t.Fatalf("3 PINGs within %v, want one per second of silence", el)
			}
			// Still up and working.
			a.sendControl(negotiate.AppendPing(nil, a.sess.ID, time.Now()))
			a.expectControl(2*time.Second, negotiate.TypePong)
		})
		t.Run(tr+"/busy", func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, fastKeepalive)
			a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "busy-" + tr})
			// The agent's own PING every 600 ms is traffic: the daemon's
			// silence timer never runs out, so it never PINGs.
			for range 6 {
				a.sendControl(negotiate.AppendPing(nil, a.sess.ID, time.Now()))
				a.expectControl(2*time.Second, negotiate.TypePong)
				a.expectSilenceNoPing(600 * time.Millisecond)
			}
		})
		t.Run(tr+"/silent", func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, fastKeepalive)
			a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "silent-" + tr})
			start := time.Now()
			var pingsAt []time.Duration
			for {
				r, cm, err := a.recv(10 * time.Second)
				if !errors.Is(err, errControl) {
					t.Fatalf("got DATA %v / %v after PINGs at %v", r, err, pingsAt)
				}
				if cm.Type == negotiate.TypePing {
					pingsAt = append(pingsAt, time.Since(start))
					continue
				}
				if cm.Type != negotiate.TypeClose || cm.Close.Reason != negotiate.ReasonTimeout {
					t.Fatalf("got %s %+v, want CLOSE TIMEOUT", cm.Type, cm.Close)
				}
				break
			}
			closedAt := time.Since(start)
			t.Logf("PINGs at %v, CLOSE TIMEOUT at %v", pingsAt, closedAt)
			if len(pingsAt) != 3 {
				t.Fatalf("%d PINGs before CLOSE, want 3", len(pingsAt))
			}
			if pingsAt[0] < 800*time.Millisecond || closedAt < 3500*time.Millisecond || closedAt > 8*time.Second {
				t.Fatalf("timing: PINGs at %v, CLOSE at %v; want ≈1 s … CLOSE ≈4 s", pingsAt, closedAt)
			}
			a.sendControl(negotiate.AppendClose(nil, a.sess.ID, time.Now(), negotiate.ReasonTimeout, "ack"))
			expectConnClosed(t, a.conn, 5*time.Second)
			waitMetric(t, d, 1, "m2md_sessions_closed_total", "reason=timeout")
		})
	}
}

// TestTimeoutCloseNotAcknowledged: an agent that answers neither PINGs nor
// the CLOSE TIMEOUT that follows is disconnected CloseTimeout after that
// CLOSE, as the configuration says.
func TestTimeoutCloseNotAcknowledged(t *testing.T) {
	t.Parallel() // mostly waiting on timers: overlap with the others
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, func(c *daemon.Config) {
				fastKeepalive(c)
				c.CloseTimeout = time.Second
			})
			a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "deaf-" + tr})
			var closeAt time.Time
			for {
				_, cm, err := a.recv(10 * time.Second)
				if cm != nil {
					if cm.Type == negotiate.TypeClose {
						closeAt = time.Now()
					}
					continue
				}
				if err == nil {
					t.Fatal("unexpected DATA")
				}
				break
			}
			if closeAt.IsZero() {
				t.Fatal("connection ended without CLOSE TIMEOUT")
			}
			if wait := time.Since(closeAt); wait > 2500*time.Millisecond {
				t.Fatalf("disconnected %v after the unacknowledged CLOSE, want ≈ CloseTimeout (1 s)", wait)
			}
		})
	}
}

// expectSilenceNoPing fails on any message within d, PINGs included.
func (a *rawAgent) expectSilenceNoPing(d time.Duration) {
	a.t.Helper()
	r, cm, err := a.recv(d)
	switch {
	case err == nil:
		a.t.Fatalf("unexpected DATA: flags %v", r.hdr.Flags)
	case errors.Is(err, errControl):
		a.t.Fatalf("unexpected %s", cm.Type)
	}
}

// TestAgentClose: the daemon acknowledges an agent's CLOSE with the same
// reason (NORMAL when the payload names none) and closes the connection.
func TestAgentClose(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil)
	cases := []struct {
		name string
		msg  func(sid string) []byte
		want negotiate.CloseReason
	}{
		{"NORMAL", func(sid string) []byte {
			return negotiate.AppendClose(nil, sid, time.Now(), negotiate.ReasonNormal, "done")
		}, negotiate.ReasonNormal},
		{"CLIENT_SHUTDOWN", func(sid string) []byte {
			return negotiate.AppendClose(nil, sid, time.Now(), negotiate.ReasonClientShutdown, "bye")
		}, negotiate.ReasonClientShutdown},
		{"Rust empty payload", func(sid string) []byte {
			return []byte("\x01" + `{"type":"CLOSE","session_id":"` + sid + `","payload":{},"timestamp":1705520400000}`)
		}, negotiate.ReasonNormal},
	}
	for _, tr := range transports {
		for _, c := range cases {
			t.Run(tr+"/"+c.name, func(t *testing.T) {
				before := metric(t, d, "m2md_sessions_closed_total", "reason="+strings.ToLower(string(c.want)))
				a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "closer-" + tr})
				a.sendControl(c.msg(a.sess.ID))
				cm := a.expectControl(5*time.Second, negotiate.TypeClose)
				if cm.Close == nil || cm.Close.Reason != c.want {
					t.Fatalf("ack %+v, want reason %s", cm.Close, c.want)
				}
				expectConnClosed(t, a.conn, 5*time.Second)
				waitMetric(t, d, before+1, "m2md_sessions_closed_total", "reason="+strings.ToLower(string(c.want)))
			})
		}
	}
}

// TestGracefulShutdown: cancelling Run stops new sessions (a new
// connection is refused at once) and answers new requests with `shutdown`,
// while a request in flight still gets its reply from the provider; then
// every session gets CLOSE SERVER_SHUTDOWN, and Run returns nil once the
// agents acknowledge, well before the grace ends, with its ports free.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel() // mostly waiting on timers: overlap with the others
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			const grace = 10 * time.Second
			d := startDaemon(t, func(c *daemon.Config) { c.ShutdownGrace = grace })
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "drain-prov", Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "drain-req"})
			_, first := req.request("", corpus(t, "req-chat-1k-01.json"))
			dl := prov.recvData(5 * time.Second)

			start := time.Now()
			d.Cancel()
			// Draining is visible on /healthz; poll it to know the daemon
			// has started refusing.
			deadline := time.Now().Add(5 * time.Second)
			for {
				code, body := adminGet(t, d, "/healthz")
				if code == http.StatusServiceUnavailable && strings.Contains(body, "draining") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/healthz still %d %s", code, body)
				}
				time.Sleep(10 * time.Millisecond)
			}
			// A new connection is refused at once, not left to the
			// client's handshake timeout (QUIC: CONNECTION_REFUSED;
			// WebSocket: the TCP listener is closed).
			dialStart := time.Now()
			conn, err := dialQuick(d, tr, 5*time.Second)
			if err == nil {
				conn.Close()
				t.Fatal("a new connection was accepted while draining")
			}
			if el := time.Since(dialStart); el > time.Second {
				t.Fatalf("a new connection while draining took %v to be refused (%v)", el, err)
			}
			var te *quic.TransportError
			if tr == "quic" && (!errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused) {
				t.Fatalf("QUIC connection while draining: %v, want CONNECTION_REFUSED", err)
			}
			_, second := req.request("", corpus(t, "req-chat-1k-01.json"))
			req.expectError(5*time.Second, second, "shutdown", false)
			// The request in flight completes; its END ends the drain, so
			// the requester's CLOSE follows its replies at once.
			prov.reply(dl.ch, dl.hdr.RequestID, false, chunk("drain", 0))
			prov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
			replies := req.recvDataThenClose(tr, 2, negotiate.ReasonServerShutdown)
			if r := replies[0]; r.hdr.RequestID != first || r.hdr.IsEnd() || r.code != "" {
				t.Fatalf("chunk during drain: id %d flags %v code %q", r.hdr.RequestID, r.hdr.Flags, r.code)
			}
			if r := replies[1]; r.hdr.RequestID != first || !r.hdr.IsEnd() || r.code != "" {
				t.Fatalf("final reply during drain: id %d flags %v code %q", r.hdr.RequestID, r.hdr.Flags, r.code)
			}
			prov.expectClose(5*time.Second, negotiate.ReasonServerShutdown)
			if err := waitRun(t, d, 10*time.Second); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if el := time.Since(start); el > grace/2 {
				t.Fatalf("shutdown took %v with nothing left in flight", el)
			}
			expectPortsFree(t, d)
		})
	}
}

// expectPortsFree checks that the daemon's listening ports can be bound
// again (Run has returned).
func expectPortsFree(t *testing.T, d *testDaemon) {
	t.Helper()
	u, err := net.ListenUDP("udp", d.QUICAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatalf("QUIC port still bound after Run returned: %v", err)
	}
	u.Close()
	l, err := net.Listen("tcp", d.WSAddr().String())
	if err != nil {
		t.Fatalf("WebSocket port still bound after Run returned: %v", err)
	}
	l.Close()
}

// TestShutdownWithSilentAgents: agents that neither finish their requests
// nor acknowledge CLOSE cannot hold the daemon: Run returns nil after the
// grace and the CLOSE timeout, and the requester learns `agent_gone`
// or sees its session end.
func TestShutdownWithSilentAgents(t *testing.T) {
	t.Parallel() // mostly waiting on timers: overlap with the others
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, func(c *daemon.Config) {
				c.ShutdownGrace = 500 * time.Millisecond
				c.CloseTimeout = 500 * time.Millisecond
			})
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "mute-prov", Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "mute-req"})
			req.request("", corpus(t, "req-chat-1k-01.json"))
			prov.recvData(5 * time.Second)
			start := time.Now()
			if err := stopAndWait(t, d, 15*time.Second); err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("Run returned after %v", time.Since(start))
			if el := time.Since(start); el > 8*time.Second {
				t.Fatalf("Run took %v", el)
			}
			// Both connections are over (CLOSE unacknowledged, then closed).
			for _, a := range []*rawAgent{prov, req} {
				for {
					_, cm, err := a.recv(5 * time.Second)
					if errors.Is(err, errControl) {
						if cm.Type != negotiate.TypeClose {
							t.Fatalf("got %s", cm.Type)
						}
						continue
					}
					if err == nil {
						continue // agent_gone for the requester is fine
					}
					break
				}
			}
		})
	}
}

// TestReplacedSession: a second session with the same agent id takes over:
// the first gets CLOSE REPLACED, requests go to the new one, and a request
// the old one held unanswered is failed over to the new one.
func TestReplacedSession(t *testing.T) {
	d := startDaemon(t, nil)
	failovers := 0
	for _, mode := range modes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				id := "dup-" + mode.String() + "-" + tr
				old := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: id, Security: mode, Models: []string{"gpt-4o"}})
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "dupreq-" + mode.String() + "-" + tr, Security: mode})
				_, held := req.request("", corpus(t, "req-chat-1k-01.json"))
				old.recvData(5 * time.Second)

				repl := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: id, Security: mode, Models: []string{"gpt-4o"}})
				cm := old.expectControl(5*time.Second, negotiate.TypeClose)
				if cm.Close == nil || cm.Close.Reason != negotiate.ReasonReplaced {
					t.Fatalf("old session got CLOSE %+v, want REPLACED", cm.Close)
				}
				// Route by model and by id: both reach the new session.
				_, byModel := req.request("", corpus(t, "req-chat-1k-01.json"))
				_, byID := req.request(id, corpus(t, "req-chat-tiny-01.json"))
				for range 2 {
					got := repl.recvData(5 * time.Second)
					repl.reply(got.ch, got.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
				}
				replies := map[uint64]string{}
				for range 2 {
					r := req.recvData(5 * time.Second)
					replies[r.hdr.RequestID] = r.code
				}
				if c, ok := replies[byModel]; !ok || c != "" {
					t.Fatalf("request by model: %v", replies)
				}
				if c, ok := replies[byID]; !ok || c != "" {
					t.Fatalf("request by id: %v", replies)
				}
				// The old session acknowledges. What it held and had not
				// begun to answer is failed over to the one provider of the
				// model left, the new session, and answered there.
				old.sendControl(negotiate.AppendClose(nil, old.sess.ID, time.Now(), negotiate.ReasonReplaced, "ack"))
				expectConnClosed(t, old.conn, 5*time.Second)
				again := repl.recvData(5 * time.Second)
				repl.reply(again.ch, again.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
				if r := req.recvData(5 * time.Second); r.hdr.RequestID != held || r.code != "" || !r.hdr.IsEnd() {
					t.Fatalf("the replaced session's request %d ended with %d %q, want its reply from the new session", held, r.hdr.RequestID, r.code)
				}
				failovers++
				waitMetric(t, d, float64(failovers), "m2md_failovers_total", "reason=closed")
			})
		}
	}
}

// TestShutdownAbortsHandshakes: connections that have not said HELLO yet
// do not hold a shutdown for HelloTimeout (or for the daemon's last-resort
// wait): they are closed at once, and Run returns promptly.
func TestShutdownAbortsHandshakes(t *testing.T) {
	d := startDaemon(t, nil) // HelloTimeout 30 s
	var idle []transport.Conn
	for _, tr := range transports {
		idle = append(idle, dialConn(t, d, tr))
	}
	a := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "bystander"})
	waitSessions(t, d, 1)
	start := time.Now()
	d.Cancel()
	a.expectClose(5*time.Second, negotiate.ReasonServerShutdown)
	if err := waitRun(t, d, 15*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("shutdown took %v with connections waiting for their HELLO", el)
	}
	for _, c := range idle {
		expectConnClosed(t, c, 5*time.Second)
	}
}

// TestShutdownFlushesReplies: replies that reach the daemon before the last
// in-flight request ends are all delivered before CLOSE SERVER_SHUTDOWN,
// and nothing is sent after it (a client discards what follows a CLOSE).
// On QUIC the requester starts reading only after CloseTimeout + 1 s, as a
// busy agent on a loaded machine may: writing the replies takes that long,
// and the daemon must not cut them off (as a backstop counted from when
// the CLOSE was queued rather than written would).
func TestShutdownFlushesReplies(t *testing.T) {
	t.Parallel()
	// The requester's side of the connection holds at most reqBudget read
	// and, on QUIC, as much again in flow-control windows; n replies of
	// size are half as much again, so when the last END ends the drain
	// replies still wait in the daemon's queue for the requester and the
	// CLOSE goes behind them. A small budget, not a large upload, keeps
	// them there: 12.8 MB sent under -race on a loaded machine outlasts
	// the shutdown grace.
	const (
		n         = 48
		size      = 128 << 10
		reqBudget = 2 << 20
	)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, func(c *daemon.Config) {
				// The provider uploads its 12.8 MB of replies after the
				// shutdown began; under -race on a loaded machine that
				// took more than 10 s, and replies still on their way when
				// the grace ends are rightly not awaited. The drain ends as
				// soon as the last END is in, so a long grace costs nothing.
				c.ShutdownGrace = 30 * time.Second
				c.CloseTimeout = 2 * time.Second
				c.SlowConsumerGrace = 10 * time.Second
			})
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "flush-prov", Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "flush-req"}, transport.Config{ReceiveBudget: reqBudget})
			var dls []*received
			for range n {
				req.request("", corpus(t, "req-chat-1k-01.json"))
			}
			for range n {
				dls = append(dls, prov.recvData(5*time.Second))
			}
			d.Cancel()
			for {
				if code, _ := adminGet(t, d, "/healthz"); code == http.StatusServiceUnavailable {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			big := paddedFrame(t, size)
			// readReplies reads the n replies and the CLOSE, in the order
			// the transport allows, and acknowledges the CLOSE.
			readReplies := func() error {
				got, afterClose := 0, 0
				closed := false
				for got+afterClose < n || !closed {
					wait := 10 * time.Second
					if closed {
						wait = 3 * time.Second
					}
					r, cm, err := req.recv(wait)
					if cm != nil {
						if closed || cm.Type != negotiate.TypeClose || cm.Close.Reason != negotiate.ReasonServerShutdown {
							return fmt.Errorf("got %s %+v", cm.Type, cm.Close)
						}
						closed = true
						continue
					}
					if err != nil {
						return fmt.Errorf("after %d replies (+%d after CLOSE): %w", got, afterClose, err)
					}
					if got+afterClose == n {
						return fmt.Errorf("DATA beyond the %d replies", n)
					}
					if r.code != "" || !r.hdr.IsEnd() || len(r.frame) != len(big) {
						return fmt.Errorf("reply code %q flags %v, %d bytes", r.code, r.hdr.Flags, len(r.frame))
					}
					if closed {
						afterClose++
					} else {
						got++
					}
				}
				// On WebSocket order is total: every reply precedes the
				// CLOSE. On QUIC the CLOSE travels on the control stream
				// and may overtake replies the daemon wrote before it on
				// data streams, so a client must go on reading those until
				// it acknowledges.
				t.Logf("%s: %d replies before CLOSE, %d after", tr, got, afterClose)
				if tr == "ws" && afterClose > 0 {
					return fmt.Errorf("%d replies after CLOSE on WebSocket", afterClose)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				return req.conn.Send(ctx, transport.ControlChannel,
					negotiate.AppendClose(nil, req.sess.ID, time.Now(), negotiate.ReasonServerShutdown, "ack"))
			}
			// Over WebSocket the requester reads as the replies come, as an
			// agent does: the CLOSE follows the last reply into the socket
			// buffers as soon as the drain ends, and its acknowledgement is
			// due CloseTimeout later, which a reader that starts only after
			// the whole upload missed on a loaded machine.
			wsRead, wsDone := make(chan error, 1), make(chan struct{})
			if tr == "ws" {
				go func() {
					defer close(wsDone)
					wsRead <- readReplies()
				}()
				t.Cleanup(func() { req.conn.Close(); <-wsDone })
			}
			// All the answers at once, large enough to take a while to
			// write: the last END ends the drain while earlier replies still
			// wait in the requester's queue.
			for _, dl := range dls {
				prov.mustSend(dl.ch, negotiate.FlagReply|negotiate.FlagEnd, dl.hdr.RequestID, "", prov.protect(dl.ch, big))
			}
			// The provider's CLOSE comes once its last reply is in: it
			// answers at once, not after the requester has read
			// everything (which can take longer than CloseTimeout, and the
			// daemon then rightly closes the provider's connection without
			// waiting for the acknowledgement).
			provClosed := prov.ackCloseAsync(20*time.Second, negotiate.ReasonServerShutdown)
			if tr == "quic" {
				// QUIC flow control and the requester's receive budget hold
				// a third of the replies in the daemon's queue meanwhile, so
				// its flush outlasts CloseTimeout + 1 s; the pause stays
				// below SlowConsumerGrace.
				time.Sleep(4 * time.Second)
				if err := readReplies(); err != nil {
					t.Fatal(err)
				}
			} else if err := <-wsRead; err != nil {
				t.Fatal(err)
			}
			expectConnClosed(t, req.conn, 5*time.Second) // and no DATA after the CLOSE
			if err := <-provClosed; err != nil {
				t.Fatalf("provider: %v", err)
			}
			if err := waitRun(t, d, 15*time.Second); err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}
