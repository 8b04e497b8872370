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
	// ReceiveBudget bounds, in bytes, the messages this connection holds
	// for Receive: those being read and those waiting. On QUIC a message's
	// share is taken from its length prefix before any of its body is
	// read, so however many streams the peer opens, their bodies together
	// stay within the budget; a stream that cannot get budget is not read,
	// and QUIC flow control holds the peer back. The QUIC connection's
	// flow-control window is the budget too, so a connection's receive
	// side holds at most twice the budget (read, and in quic-go's buffers).
	// On WebSocket, where messages arrive one after another, it bounds the
	// waiting messages and one message is read beside them. Control
	// messages (QUIC stream 0) may exceed the budget by 64 KiB, so PING,
	// PONG and CLOSE never wait behind data. A single message larger than
	// the budget is taken when nothing else holds any. Default 8 MiB.
	ReceiveBudget int
	// MessageTimeout bounds how long one message may take to arrive once
	// its first byte has: a peer that trickles a message (slowloris) fails
	// the connection with ErrMessageTimeout instead of holding it, and its
	// budget, with partial bytes. Default 30 s.
	MessageTimeout time.Duration
	// HandshakeTimeout bounds connection set-up: the QUIC handshake, or
	// the WebSocket dial (TCP, TLS and HTTP upgrade) when the context has
	// no earlier deadline. Default 10 s.
	HandshakeTimeout time.Duration
	// IdleTimeout (QUIC) is how soon a vanished peer (killed, unplugged)
	// is noticed: the connection's idle timeout is four fifths of it (the
	// two sides' values are negotiated down to the smaller) and each side
	// sends a keep-alive packet every fifth, so a silent but live
	// connection stays up. The session protocol's own PING/PONG and
	// session timeout sit on top of this. Default 30 s: keep-alives every
	// 6 s keep the NAT binding of an agent behind a home or carrier NAT
	// (many forget a UDP flow after 30 s; RFC 9000 §10.1.2), and a live
	// connection survives a network outage, or a process that gets no CPU,
	// of up to 24 s, as a TCP connection would. 5 s dropped every QUIC
	// session of a process starved of CPU for 4 s.
	IdleTimeout time.Duration
	// KeepAlive (QUIC, the dialing side) is how often the connection
	// sends the daemon a small DATAGRAM, which a daemon restarted on the
	// same address answers with a stateless reset (see ListenQUIC): the
	// connection then ends at once, where a silent one would wait out
	// IdleTimeout. At most, and by default, a fifth of IdleTimeout; each
	// costs a packet and its acknowledgement.
	KeepAlive time.Duration
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
	defaultReceiveBudget       = 8 << 20
	defaultMessageTimeout      = 30 * time.Second
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
	if c.ReceiveBudget <= 0 {
		c.ReceiveBudget = defaultReceiveBudget
	}
	if c.MessageTimeout <= 0 {
		c.MessageTimeout = defaultMessageTimeout
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = defaultHandshakeTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = defaultIdleTimeout
	}
	if c.KeepAlive <= 0 || c.KeepAlive > c.IdleTimeout/5 {
		c.KeepAlive = c.IdleTimeout / 5
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
