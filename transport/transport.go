// Package transport carries m2md session messages over QUIC streams and
// binary WebSocket connections (docs/protocol.md §1).
//
// A Conn is one connection and therefore one session. Messages are opaque
// byte slices (kind byte first); the transport only delimits them, splits
// them into channels and enforces the read limit. Channel 0 on WebSocket is
// the only channel; on QUIC, channel ids are stream ids, the control stream
// is stream 0, and data channels come from a pool of long-lived streams, or,
// after ShareDataChannel, are one stream for every request.
//
// Daemon side:
//
//	ln, _ := transport.ListenQUIC(":4433", tlsConf, cfg)
//	for {
//		c, err := ln.Accept(ctx) // handshake done; control stream arrives with HELLO
//		if err != nil { … }
//		go serve(c)
//	}
//	mux.Handle("/m2m", transport.NewWSHandler(cfg, serve)) // ws:// and wss://
//
// Agent side:
//
//	c, _ := transport.DialQUIC(ctx, "daemon:4433", tlsConf, cfg) // see package certs
//	c, _ := transport.DialWS(ctx, "wss://daemon:8443/m2m", tlsConf, cfg)
//
// Every connection starts with the protocol's pre-ACCEPT read limit
// (DefaultReadLimit); SetReadLimit raises it to the negotiated max_payload
// + 512. Received messages live in pooled buffers that Message.Release
// returns. Reading happens in the background into a queue bounded by
// Config.ReceiveQueue and ReceiveBudget: when Receive falls behind, the
// transport stops reading and the peer is held back by flow control.
//
// Errors: ErrClosed (connection gone; peer and network causes are wrapped
// for errors.As), ErrMessageTooLarge, ErrTextMessage, ErrProtocol,
// ErrUnknownChannel, and *ChannelError for a QUIC channel that failed while
// the connection lives on.
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
// must not be used afterwards. Release on a zero Message is a no-op, and a
// second Release of the same Message value is too; but copies of a Message
// share one buffer, so release exactly one of them.
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
//
// A Receive error is final for the connection, except a context error (the
// connection is untouched) and, on QUIC, a *ChannelError (that channel is
// dead, the others carry on; the session layer usually closes anyway, as a
// peer that breaks framing is broken). Messages that arrived before the
// connection ended are returned before the error.
//
// Send writes the whole message or fails. If its context ends while the
// message is partly written, the message cannot be recalled: on QUIC that
// channel is reset and later Sends on it fail with ErrProtocol; on
// WebSocket the library closes the connection. A context that has ended
// before Send is called writes nothing and harms nothing.
type Conn interface {
	// Receive returns the next message from any channel. A message that
	// has already arrived is returned even if ctx has ended, so a done
	// context polls: agents use it to answer everything already received
	// inside one Cork.
	Receive(ctx context.Context) (Message, error)
	// Send writes one message on channel ch.
	Send(ctx context.Context, ch ChannelID, msg []byte) error
	// Cork holds back the messages sent, by any goroutine, until the
	// matching Uncork, so that a batch leaves in as few system calls as
	// the transport allows. Corks nest; every Cork needs its Uncork.
	// Nothing waits for more messages to arrive: a Send with no Cork
	// under way is written at once. Close writes what a batch
	// holds before it closes, even when called inside the batch.
	Cork()
	// Uncork ends a Cork. The last one to end writes what is held and
	// returns the connection's error if that fails (the messages were
	// lost with the connection). The write can block on a peer that does
	// not read, as Send can; closing the connection ends it.
	Uncork() error
	// AcquireChannel returns a data channel with no request outstanding,
	// opening one if none is idle; when the peer's stream limit is reached
	// it waits for a ReleaseChannel. After ShareDataChannel it returns the
	// one data channel this side sends its requests on. On WebSocket it
	// always returns 0.
	AcquireChannel(ctx context.Context) (ChannelID, error)
	// ReleaseChannel returns a channel obtained from AcquireChannel once the
	// final reply on it has arrived. Channels the peer opened, the control
	// channel, failed channels and repeated releases are ignored.
	ReleaseChannel(ch ChannelID)
	// SetReadLimit bounds the size of a message Receive accepts; a larger
	// one fails Receive with ErrMessageTooLarge before it is buffered. n is
	// clamped to [1, MaxReadLimit]; n <= 0 means MaxReadLimit.
	SetReadLimit(n int64)
	// Transport names the transport: "quic" or "ws".
	Transport() string
	// RemoteAddr is the peer's address.
	RemoteAddr() net.Addr
	// Close tears the connection down; pending and later calls fail with
	// ErrClosed. It is idempotent and returns once the transport's
	// goroutines have exited. Messages Send has already returned for still
	// reach a live peer: Close waits (QUIC: at most Config.CloseTimeout;
	// WebSocket: the closing handshake) for the peer to have read them.
	Close() error
	// Abort tears the connection down at once, like Close but without
	// waiting for the peer: messages it has not read are lost. It is for a
	// peer taken for dead.
	Abort()
}

// WriteProgress is implemented by this package's connections: the bytes
// they have handed to the network so far, counted in pieces of at most
// 64 KiB as the peer's flow control lets them go. A Send blocked on a peer
// that reads slowly still moves it; one blocked on a peer that has stopped
// reading does not, which is how the daemon tells the two apart.
type WriteProgress interface {
	BytesWritten() uint64
}

// ReadProgress is implemented by this package's connections on the side
// that accepted them (the daemon's): the bytes received so far, counted as
// they arrive, so a large message still arriving moves it before it is
// whole. A peer that sends slowly moves it; one that has gone does not.
type ReadProgress interface {
	BytesRead() uint64
}
