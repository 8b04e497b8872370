// Package transport carries m2md session messages over QUIC streams and
// binary WebSocket connections (docs/protocol.md §1).
//
// A Conn is one connection and therefore one session. Messages are opaque
// byte slices (kind byte first); the transport only delimits them, splits
// them into channels and enforces the read limit. Channel 0 on WebSocket is
// the only channel; on QUIC, channel ids are stream ids, the control stream
// is stream 0, and data channels come from a pool of long-lived streams.
package transport

import (
	"context"
	"net"
)

// ChannelID names the channel a message travels on: a QUIC stream id, or 0
// on WebSocket.
type ChannelID uint64

// ControlChannel is the channel HELLO, ACCEPT, REJECT, PING, PONG and CLOSE
// travel on (QUIC stream 0; the only WebSocket channel).
const ControlChannel ChannelID = 0

// Message is one received message.
type Message struct {
	// Channel is where the message arrived; replies go back on it.
	Channel ChannelID
	// Data is the message, kind byte first. It is valid until Release.
	Data []byte

	release func()
}

// Release hands the message's buffer back to the transport's pool. Data
// must not be used afterwards. Release on a zero Message is a no-op.
func (m *Message) Release() {
	if m.release != nil {
		m.release()
		m.release = nil
	}
	m.Data = nil
}

// Conn is one connection carrying one session.
//
// Receive must be called from a single goroutine. Send, AcquireChannel and
// ReleaseChannel are safe for concurrent use; messages sent on one channel
// arrive in the order their Send calls returned.
type Conn interface {
	// Receive returns the next message from any channel.
	Receive(ctx context.Context) (Message, error)
	// Send writes one message on channel ch.
	Send(ctx context.Context, ch ChannelID, msg []byte) error
	// AcquireChannel returns a data channel with no request outstanding,
	// opening one if none is idle. On WebSocket it always returns 0.
	AcquireChannel(ctx context.Context) (ChannelID, error)
	// ReleaseChannel returns a channel obtained from AcquireChannel once the
	// final reply on it has arrived.
	ReleaseChannel(ch ChannelID)
	// SetReadLimit bounds the size of a message Receive accepts; a larger
	// one fails Receive with ErrMessageTooLarge before it is buffered.
	SetReadLimit(n int64)
	// Transport names the transport: "quic" or "ws".
	Transport() string
	// RemoteAddr is the peer's address.
	RemoteAddr() net.Addr
	// Close tears the connection down; pending and later calls fail.
	Close() error
}
