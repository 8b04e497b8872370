package daemon

import (
	"context"
	"errors"

	"github.com/m2md/m2md/transport"
)

// ErrNotServing is Attach's error when the daemon is not running: before
// Run is ready, or once it has begun to shut down.
var ErrNotServing = errors.New("daemon: not serving (Attach before Run is ready, or after shutdown began)")

// Attach opens a connection to the daemon from inside its own process: a
// transport.Pipe whose other end the daemon serves like an accepted
// connection. A part of the process that speaks the session protocol, the
// OpenAI endpoint, uses it with client.DialConn: its requests never leave
// the process, so a socket, TLS and WebSocket framing for them would only
// cost time.
//
// An attached session is the daemon's own: the per-address admission
// limits, which bound strangers on the network, do not count it; without
// org secrets it may take over an agent id held by a session from the
// network, and no session from the network may take its id (mayReplace).
// Its handshake, authentication and limits are otherwise an agent's.
func (s *Server) Attach(ctx context.Context) (transport.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-s.ready:
	default:
		return nil, ErrNotServing
	}
	if s.draining.Load() {
		return nil, ErrNotServing
	}
	agent, ours := transport.Pipe(s.transportConfig())
	go s.serveConn(ours)
	return agent, nil
}
