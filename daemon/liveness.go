package daemon

import (
	"fmt"
	"time"

	"github.com/m2md/m2md/negotiate"
)

// The liveness check of busy sessions (docs/protocol.md §3.4, "Sessions
// that hold requests").
//
// One knob cannot serve both needs a session has. An idle session should
// ride out a long outage (a NAT rebinding, a Wi-Fi hand-over, a 20 s
// partition) without reconnecting: that is the protocol keepalive (PINGs
// after 60 s of silence) and QUICIdleTimeout (30 s). A session that holds
// requests has requesters waiting on it, who should learn within seconds
// that its agent is gone (killed, or its machine vanished without a FIN),
// so that their requests fail over or end. Silence proves nothing either
// way: a model may think for a minute before its first token. So a busy
// session that has been silent for BusyPingAfter is sent a PING, which
// the agent's reader answers at once whatever its model is doing, and a
// session from which nothing at all arrives within BusyPongTimeout of that
// PING is closed. Idle sessions are never probed this way.
//
// One goroutine scans the sessions every quarter of the shorter setting,
// rather than a timer per session re-armed on every delivery: a scan is
// an atomic load or two per session, and the hot paths (every message
// received, every delivery) pay one atomic store.

// mono is t as nanoseconds on the daemon's monotonic clock: comparisons of
// these survive a wall-clock step.
func (s *Server) mono(t time.Time) int64 { return int64(t.Sub(s.epoch)) }

// checkLiveness runs until done, probing the sessions that hold
// deliveries.
func (s *Server) checkLiveness(done <-chan struct{}) {
	t := time.NewTicker(min(s.cfg.BusyPingAfter, s.cfg.BusyPongTimeout) / 4)
	defer t.Stop()
	var busy []*session
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		busy = busy[:0]
		s.mu.Lock()
		for se := range s.sessions {
			if se.rs.Outstanding() > 0 || se.probeSent.Load() != 0 {
				busy = append(busy, se)
			}
		}
		s.mu.Unlock()
		now := s.mono(time.Now())
		for _, se := range busy {
			se.checkBusy(now)
		}
		clear(busy)
	}
}

// checkBusy probes se if it holds deliveries and has been silent for
// BusyPingAfter, and closes it if its probe went unanswered for
// BusyPongTimeout. now is on the mono clock.
func (se *session) checkBusy(now int64) {
	probe := se.probeSent.Load()
	if probe != 0 && se.lastRecv.Load() >= probe {
		// Something arrived since the PING: the agent is alive.
		se.probeSent.CompareAndSwap(probe, 0)
		probe = 0
	}
	if se.rs.Outstanding() == 0 || se.closing.Load() {
		se.probeSent.Store(0)
		return
	}
	cfg := &se.srv.cfg
	switch {
	case probe == 0 && now-se.lastRecv.Load() >= int64(cfg.BusyPingAfter):
		se.probeMark.Store(se.bytesWritten())
		se.probeReadMark.Store(se.bytesRead())
		se.probeSent.Store(now)
		se.sendControl(negotiate.AppendPing(nil, se.neg.ID, time.Now()), false)
	case probe != 0 && now-probe >= int64(cfg.BusyPongTimeout):
		w, r := se.bytesWritten(), se.bytesRead()
		if w-se.probeMark.Load() > probeProgress || r-se.probeReadMark.Load() > probeProgress {
			// The agent is taking what the writer sends (a large delivery
			// over a slow link, which the PING waits behind), or sending
			// a large message over a slow link, which its PONG waits
			// behind: alive. Neither goes on once it is gone (flow
			// control gives no credit, nothing arrives).
			se.probeMark.Store(w)
			se.probeReadMark.Store(r)
			se.probeSent.Store(now)
			return
		}
		se.unresponsive()
	}
}

// unresponsive ends a session that holds deliveries and did not answer
// PING in time: its agent is taken for dead. The connection is aborted at
// once, not closed after the CLOSE handshake's 5 s and the transport's own
// (nothing will acknowledge either), so the read loop ends, the teardown
// fails over or ends the session's deliveries, and the session's memory is
// freed without waiting for a peer that is gone.
func (se *session) unresponsive() {
	if se.closing.Load() {
		return
	}
	se.lostReason.CompareAndSwap(nil, failoverUnresponsive)
	se.log.Warn().Int("outstanding", se.rs.Outstanding()).Dur("pong_timeout", se.srv.cfg.BusyPongTimeout).
		Msg("agent holding requests did not answer PING: closing its session")
	se.initiateClose(negotiate.ReasonTimeout, fmt.Sprintf("no answer to PING within %v while holding requests", se.srv.cfg.BusyPongTimeout))
	go se.conn.Abort()
}

// probeProgress is how many bytes the connection must have taken, or
// brought, since the probe for a silent agent to count as alive: more than
// the PING itself, which the kernel takes from a vanished peer's TCP
// connection too.
const probeProgress = 4 << 10
