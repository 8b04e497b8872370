package transport

import "time"

// Read limits (docs/protocol.md §1).
const (
	// DefaultReadLimit is the read limit of a new connection: the protocol
	// caps messages at 65,536 bytes until ACCEPT has negotiated more.
	DefaultReadLimit = 64 << 10
	// MaxReadLimit is the largest read limit SetReadLimit accepts and the
	// largest message Send writes: the 16 MiB maximum max_payload plus the
	// 512 bytes of room the protocol allows for the DATA header.
	MaxReadLimit = 16<<20 + 512
)

// ALPN is the TLS application protocol of QUIC connections.
const ALPN = "m2m/1"

// Subprotocol is the WebSocket subprotocol both sides must agree on.
const Subprotocol = "m2m.v1"

// Config tunes a connection. The zero value is the documented default for
// every field; fields a transport does not use are ignored by it.
type Config struct {
	// ReceiveQueue bounds how many received messages wait for Receive.
	// When it is full the connection stops reading, so a slow consumer
	// pushes back on the peer (QUIC flow control, TCP window) instead of
	// growing memory. Default 64.
	ReceiveQueue int
	// ReceiveQueueBytes bounds the total size of those messages. A single
	// message larger than this is still taken when nothing else is
	// waiting. Default 8 MiB.
	ReceiveQueueBytes int
	// HandshakeTimeout bounds connection set-up: the QUIC handshake, or
	// the WebSocket dial (TCP, TLS and HTTP upgrade) when the context has
	// no earlier deadline. Default 10 s.
	HandshakeTimeout time.Duration
	// IdleTimeout (QUIC) closes a connection from which no packet has
	// arrived for this long. Each side sends keep-alive packets every
	// third of it, so a silent but live connection stays up and a dead
	// peer is noticed within IdleTimeout. The session protocol's own
	// PING/PONG and session timeout sit on top of this. Default 30 s.
	IdleTimeout time.Duration
	// MaxIncomingChannels (QUIC) bounds the streams the peer may open.
	// Streams live as long as the connection, so this is also the most
	// requests the peer can have in flight towards this side. Default 1000.
	MaxIncomingChannels int
	// CloseTimeout bounds how long Close waits for the peer to have taken
	// the last messages sent before it tears the connection down (see
	// Conn.Close); on WebSocket it bounds writing them and the close
	// frame. Default 2 s.
	CloseTimeout time.Duration
}

const (
	defaultReceiveQueue        = 64
	defaultReceiveQueueBytes   = 8 << 20
	defaultHandshakeTimeout    = 10 * time.Second
	defaultIdleTimeout         = 30 * time.Second
	defaultMaxIncomingChannels = 1000
	defaultCloseTimeout        = 2 * time.Second
)

// withDefaults returns c with zero (or negative) fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.ReceiveQueue <= 0 {
		c.ReceiveQueue = defaultReceiveQueue
	}
	if c.ReceiveQueueBytes <= 0 {
		c.ReceiveQueueBytes = defaultReceiveQueueBytes
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = defaultHandshakeTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = defaultIdleTimeout
	}
	if c.MaxIncomingChannels <= 0 {
		c.MaxIncomingChannels = defaultMaxIncomingChannels
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = defaultCloseTimeout
	}
	return c
}

// clampReadLimit maps a requested read limit into [1, MaxReadLimit]; zero
// or negative means MaxReadLimit (the negotiated max_payload 0 means "no
// preference", i.e. the largest).
func clampReadLimit(n int64) int64 {
	if n <= 0 || n > MaxReadLimit {
		return MaxReadLimit
	}
	return n
}
