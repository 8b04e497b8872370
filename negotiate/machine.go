package negotiate

import (
	"fmt"
	"time"
)

// State is a session's lifecycle state (docs/protocol.md §7).
type State uint8

const (
	// StateInitial: the connection is open, no HELLO yet.
	StateInitial State = iota
	// StateHelloSent: the client sent HELLO and waits for ACCEPT or REJECT.
	StateHelloSent
	// StateEstablished: ACCEPT was sent (daemon) or received (client).
	StateEstablished
	// StateClosing: this side sent CLOSE and waits for the acknowledgement.
	StateClosing
	// StateClosed: over; close the connection.
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateInitial:
		return "Initial"
	case StateHelloSent:
		return "HelloSent"
	case StateEstablished:
		return "Established"
	case StateClosing:
		return "Closing"
	case StateClosed:
		return "Closed"
	}
	return "unknown"
}

// Machine is one connection's session state machine with its timers, as
// pure logic: the caller reports what it sends and receives, calls Tick at
// Deadline (one timer per connection is enough), and carries out the
// returned Action. It starts no goroutines and reads no clock, so tests
// drive it with any sequence of times. It is not safe for concurrent use:
// call it from the connection's control loop.
//
//	client: Initial --HelloSent--> HelloSent --Established--> Established
//	daemon: Initial --Established--> Established
//	both:   Established --CloseSent or timeout--> Closing --CLOSE received or 5 s--> Closed
//	        Established --CLOSE received (ack it)--> Closed
//	        any --Rejected or Disconnected--> Closed
type Machine struct {
	role     Role
	state    State
	deadline time.Time // of Initial (daemon), HelloSent and Closing
	reason   CloseReason
	ka       keepalive
}

// NewMachine starts a machine for a connection opened at now. The daemon's
// machine expects a HELLO within HelloTimeout.
func NewMachine(role Role, now time.Time) *Machine {
	m := &Machine{role: role}
	if role == RoleServer {
		m.deadline = now.Add(HelloTimeout)
	}
	return m
}

// State returns the current state.
func (m *Machine) State() State { return m.state }

// CloseReason is the reason of the CLOSE this side sent (Closing), for
// ActionClose.
func (m *Machine) CloseReason() CloseReason { return m.reason }

func (m *Machine) unexpected(what string) error {
	return fmt.Errorf("%w: %s in state %s (%s)", ErrUnexpectedMessage, what, m.state, m.role)
}

func describe(kind Kind, typ MessageType) string {
	if kind == KindControl {
		return string(typ)
	}
	return kind.String()
}

// HelloSent records that the client sent its HELLO at now; it waits at
// most HelloTimeout for the answer.
func (m *Machine) HelloSent(now time.Time) error {
	if m.role != RoleClient || m.state != StateInitial {
		return m.unexpected("sending HELLO")
	}
	m.state = StateHelloSent
	m.deadline = now.Add(HelloTimeout)
	return nil
}

// Established records the ACCEPT (sent by the daemon, received by the
// client) at now and starts the keepalive with the negotiated timers.
func (m *Machine) Established(p Negotiated, now time.Time) error {
	if (m.role == RoleServer && m.state != StateInitial) || (m.role == RoleClient && m.state != StateHelloSent) {
		return m.unexpected("establishing")
	}
	m.state = StateEstablished
	m.deadline = time.Time{}
	m.ka.reset(p, now)
	return nil
}

// Rejected records a REJECT (sent by the daemon, received by the client):
// the connection closes.
func (m *Machine) Rejected() { m.state = StateClosed }

// Disconnected records that the connection is gone.
func (m *Machine) Disconnected() { m.state = StateClosed }

// CloseSent records that this side sent CLOSE with reason at now; it waits
// at most CloseTimeout for the acknowledgement. Only an established session
// is closed with CLOSE (before that, a side just disconnects).
func (m *Machine) CloseSent(reason CloseReason, now time.Time) error {
	switch m.state {
	case StateEstablished:
		m.state = StateClosing
		m.reason = reason
		m.deadline = now.Add(CloseTimeout)
		return nil
	case StateClosing, StateClosed:
		return ErrClosed
	}
	return m.unexpected("sending CLOSE")
}

// CloseLeft restarts the wait for the acknowledgement at now, when the
// CLOSE recorded by CloseSent has actually been written: a sender that
// batches writes may hold it behind megabytes of replies a slow reader
// takes seconds to accept, and the peer cannot acknowledge what it has not
// received.
func (m *Machine) CloseLeft(now time.Time) {
	if m.state == StateClosing {
		m.deadline = now.Add(CloseTimeout)
	}
}

// CanSend reports whether a message may be sent now. The acknowledgement of
// a received CLOSE (ActionCloseAck) is sent regardless.
func (m *Machine) CanSend(kind Kind, typ MessageType) error {
	ok := false
	switch m.state {
	case StateInitial:
		ok = kind == KindControl && ((m.role == RoleClient && typ == TypeHello) ||
			(m.role == RoleServer && (typ == TypeAccept || typ == TypeReject)))
	case StateEstablished:
		ok = kind == KindData || kind == KindCancel || typ == TypePing || typ == TypePong || typ == TypeClose
	case StateClosing, StateClosed:
		return ErrClosed
	}
	if !ok {
		return m.unexpected("sending " + describe(kind, typ))
	}
	return nil
}

// Received checks a message that arrived at now against the state, and says
// what to do about it:
//   - ActionPong for a PING, ActionCloseAck for a CLOSE in Established (the
//     machine is then Closed), ActionDisconnect for the ack of this side's
//     CLOSE (Closed);
//   - ErrAfterClose for anything else after this side sent CLOSE: discard
//     it quietly;
//   - ErrUnexpectedMessage for a message the state does not allow (a
//     protocol violation: CLOSE ERROR if established, else disconnect);
//   - ErrClosed once Closed.
//
// HELLO (daemon, Initial) and ACCEPT or REJECT (client, HelloSent) return
// ActionNone: run the handshake, then call Established or Rejected.
func (m *Machine) Received(now time.Time, kind Kind, typ MessageType) (Action, error) {
	switch m.state {
	case StateInitial:
		if m.role == RoleServer && kind == KindControl && typ == TypeHello {
			return ActionNone, nil
		}
	case StateHelloSent:
		if kind == KindControl && (typ == TypeAccept || typ == TypeReject) {
			return ActionNone, nil
		}
	case StateEstablished:
		if kind == KindData || kind == KindCancel {
			m.ka.OnReceive(now)
			return ActionNone, nil
		}
		switch typ {
		case TypePing:
			m.ka.OnReceive(now)
			return ActionPong, nil
		case TypePong:
			m.ka.OnReceive(now)
			return ActionNone, nil
		case TypeClose:
			m.state = StateClosed
			return ActionCloseAck, nil
		}
	case StateClosing:
		if kind == KindControl && typ == TypeClose {
			m.state = StateClosed
			return ActionDisconnect, nil
		}
		return ActionNone, ErrAfterClose
	case StateClosed:
		return ActionNone, ErrClosed
	}
	return ActionNone, m.unexpected("received " + describe(kind, typ))
}

// Tick runs the timers at now: a missed HELLO or ACCEPT deadline or an
// unacknowledged CLOSE gives ActionDisconnect (Closed); in Established the
// keepalive may give ActionPing, or ActionClose with reason TIMEOUT (the
// machine is then Closing and waits for the ack).
func (m *Machine) Tick(now time.Time) Action {
	switch m.state {
	case StateInitial, StateHelloSent, StateClosing:
		if !m.deadline.IsZero() && !now.Before(m.deadline) {
			m.state = StateClosed
			return ActionDisconnect
		}
	case StateEstablished:
		a := m.ka.Tick(now)
		if a == ActionClose {
			m.state = StateClosing
			m.reason = ReasonTimeout
			m.deadline = now.Add(CloseTimeout)
		}
		return a
	}
	return ActionNone
}

// Deadline is the next time Tick has something to do; zero when no timer
// runs (client before HELLO, Closed).
func (m *Machine) Deadline() time.Time {
	switch m.state {
	case StateEstablished:
		return m.ka.Deadline()
	case StateClosed:
		return time.Time{}
	}
	return m.deadline
}

// MissedPongs is the number of PINGs missed in a row.
func (m *Machine) MissedPongs() int { return m.ka.missedPongs() }
