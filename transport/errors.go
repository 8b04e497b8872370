package transport

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed reports a connection that is gone: closed by this side
	// (Close), by the peer, or by the network (idle timeout). Errors from a
	// peer or network close wrap the cause as well (a *quic.ApplicationError,
	// *quic.IdleTimeoutError, websocket.CloseError …) for errors.As.
	ErrClosed = errors.New("transport: connection closed")
	// ErrMessageTooLarge reports a message above the read limit (on
	// Receive) or above MaxReadLimit (on Send). On Receive it is detected
	// before any of the message is buffered: from the QUIC length prefix,
	// or from the WebSocket frame headers (a fragmented message's running
	// total) on the daemon side; an agent's WebSocket reads at most the
	// limit first.
	ErrMessageTooLarge = errors.New("transport: message too large")
	// ErrTextMessage reports a WebSocket text message; the connection has
	// been closed with status 1008 (policy violation).
	ErrTextMessage = errors.New("transport: text WebSocket message (m2m.v1 carries binary messages only)")
	// ErrProtocol reports a peer that broke the framing rules: a stream
	// that ends inside a message or is finished before the connection, a
	// missing subprotocol or ALPN.
	ErrProtocol = errors.New("transport: protocol violation")
	// ErrMessageTimeout reports a message that began to arrive but did not
	// arrive whole within Config.MessageTimeout. It ends the connection's
	// Receive like a connection-level error, but the connection is still
	// open, so the session layer can say why before closing it.
	ErrMessageTimeout = errors.New("transport: a started message did not arrive whole in time")
	// ErrUnknownChannel reports a Send on a channel this connection does
	// not have.
	ErrUnknownChannel = errors.New("transport: unknown channel")
)

// ChannelError reports that one channel failed while the connection carries
// on (QUIC only: a stream reset by the peer, a length prefix above the read
// limit, a stream ending inside a message). The channel is unusable
// afterwards. It wraps the cause, so errors.Is(err, ErrMessageTooLarge)
// and errors.Is(err, ErrProtocol) work through it.
type ChannelError struct {
	Channel ChannelID
	Err     error
}

func (e *ChannelError) Error() string {
	return fmt.Sprintf("transport: channel %d: %v", e.Channel, e.Err)
}

func (e *ChannelError) Unwrap() error { return e.Err }

// closedBy wraps the reason a connection went away in ErrClosed, unless it
// already is ErrClosed.
func closedBy(cause error) error {
	if cause == nil || errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("%w: %w", ErrClosed, cause)
}
