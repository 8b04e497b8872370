package negotiate

import (
	"fmt"

	"github.com/m2md/m2md/security"
)

// Role says which end of a session a value belongs to.
type Role uint8

const (
	RoleClient Role = iota + 1
	RoleServer
)

func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleServer:
		return "daemon"
	}
	return "unknown"
}

// Session is the outcome of a successful handshake, on either side.
//
// Its frame keys are secret: Session formats itself without them (fmt
// verbs, loggers that use String), and Wipe clears them when the session
// ends.
type Session struct {
	// ID is the session id from ACCEPT.
	ID string
	// Role is this side's role.
	Role Role
	// AgentID is the client's agent id.
	AgentID string
	// Org is the org the client authenticated as; "" when not authenticated.
	Org string
	// Params is what the daemon decided.
	Params Negotiated
	// Peer is what the other side announced: the client's HELLO (daemon
	// side; its Models drive routing) or the daemon's ACCEPT (client side).
	Peer *Capabilities
	// Transcript is the hash of HELLO and ACCEPT that salts the frame keys
	// (docs/protocol.md §5.1). It is not secret.
	Transcript [32]byte

	c2s, s2c security.Key
}

// SendKey is the key of the frames this side sends.
func (s *Session) SendKey() []byte {
	if s.Role == RoleServer {
		return s.s2c[:]
	}
	return s.c2s[:]
}

// ReceiveKey is the key of the frames this side receives.
func (s *Session) ReceiveKey() []byte {
	if s.Role == RoleServer {
		return s.c2s[:]
	}
	return s.s2c[:]
}

// Wipe clears the frame keys. Call it when the session ends, after the
// frame protectors built from the keys are gone.
func (s *Session) Wipe() {
	s.c2s.Wipe()
	s.s2c.Wipe()
}

// CheckControl verifies that a control message received during the session
// names it: after ACCEPT every control message carries the session id.
func (s *Session) CheckControl(m *ControlMessage) error {
	if m.SessionID != s.ID {
		return fmt.Errorf("%w: %s for %q in session %s", ErrSessionMismatch, m.Type, truncateForError(m.SessionID), s.ID)
	}
	return nil
}

// String describes the session without its keys.
func (s *Session) String() string {
	return fmt.Sprintf("session %s (%s side, agent %s, org %q, %s, max payload %d)",
		s.ID, s.Role, s.AgentID, s.Org, s.Params.SecurityMode, s.Params.MaxPayload)
}

// Format makes every fmt verb print String, so that %v, %+v and %#v never
// reveal the frame keys.
func (s *Session) Format(f fmt.State, _ rune) { fmt.Fprint(f, s.String()) }
