package negotiate

import "time"

// Action is what a timer or a received message asks the caller to do.
type Action uint8

const (
	// ActionNone: nothing to do.
	ActionNone Action = iota
	// ActionPing: send a PING.
	ActionPing
	// ActionPong: send a PONG (a PING arrived).
	ActionPong
	// ActionClose: send CLOSE with the Machine's CloseReason (TIMEOUT from
	// a timer); the machine is now Closing.
	ActionClose
	// ActionCloseAck: send CLOSE with the reason just received, then close
	// the connection; the machine is now Closed.
	ActionCloseAck
	// ActionDisconnect: close the connection without a message (HELLO or
	// ACCEPT not in time, CLOSE not acknowledged in time, or the ack just
	// arrived); the machine is now Closed.
	ActionDisconnect
)

func (a Action) String() string {
	switch a {
	case ActionNone:
		return "none"
	case ActionPing:
		return "ping"
	case ActionPong:
		return "pong"
	case ActionClose:
		return "close"
	case ActionCloseAck:
		return "close-ack"
	case ActionDisconnect:
		return "disconnect"
	}
	return "unknown"
}

// keepalive is the PING/PONG and idle logic of an established session
// (docs/protocol.md §3.4) as pure logic: the caller feeds it the time of
// every received message and calls Tick at Deadline. It starts no
// goroutines and reads no clock. It is not safe for concurrent use.
//
// Rules: after PingInterval without any received message, PING; if nothing
// arrives within PongTimeout, the PING is missed and repeated; the
// MaxMissedPongs-th miss in a row closes with TIMEOUT. Independently,
// SessionTimeout without any received message closes with TIMEOUT.
type keepalive struct {
	pingInterval, pongTimeout, sessionTimeout time.Duration

	lastReceive time.Time
	pingSent    time.Time // valid while outstanding
	outstanding bool
	missed      int
}

// newKeepalive starts the timers at now with the negotiated durations.
// Zero durations take the protocol defaults.
func newKeepalive(p Negotiated, now time.Time) *keepalive {
	k := &keepalive{}
	k.reset(p, now)
	return k
}

func (k *keepalive) reset(p Negotiated, now time.Time) {
	*k = keepalive{
		pingInterval:   orDefault(p.PingInterval, DefaultPingInterval),
		pongTimeout:    orDefault(p.PongTimeout, DefaultPongTimeout),
		sessionTimeout: orDefault(p.SessionTimeout, DefaultSessionTimeout),
		lastReceive:    now,
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// OnReceive records that a message (of any kind) arrived at now: it answers
// any outstanding PING and restarts the idle timers.
func (k *keepalive) OnReceive(now time.Time) {
	if now.After(k.lastReceive) {
		k.lastReceive = now
	}
	k.outstanding = false
	k.missed = 0
}

// Tick returns ActionNone, ActionPing or ActionClose (reason TIMEOUT) for
// time now. After ActionClose it keeps returning ActionClose.
func (k *keepalive) Tick(now time.Time) Action {
	if !now.Before(k.lastReceive.Add(k.sessionTimeout)) {
		return ActionClose
	}
	if k.outstanding {
		if now.Before(k.pingSent.Add(k.pongTimeout)) {
			return ActionNone
		}
		k.missed++
		if k.missed >= MaxMissedPongs {
			return ActionClose
		}
		k.pingSent = now
		return ActionPing
	}
	if !now.Before(k.lastReceive.Add(k.pingInterval)) {
		k.outstanding = true
		k.pingSent = now
		return ActionPing
	}
	return ActionNone
}

// Deadline is the next time Tick has something to do.
func (k *keepalive) Deadline() time.Time {
	d := k.lastReceive.Add(k.sessionTimeout)
	next := k.lastReceive.Add(k.pingInterval)
	if k.outstanding {
		next = k.pingSent.Add(k.pongTimeout)
	}
	if next.Before(d) {
		return next
	}
	return d
}

// Missed is the number of PINGs missed in a row.
func (k *keepalive) missedPongs() int { return k.missed }
