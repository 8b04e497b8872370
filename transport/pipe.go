package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// Pipe returns the two ends of a connection inside one process: what one
// end sends, the other receives, with no socket, no framing and no TLS in
// between. It is how a part of the daemon's own process that speaks the
// session protocol (the OpenAI endpoint) attaches to it: the bytes never
// leave the process, so a network leg for them would only cost time.
//
// A pipe behaves as a WebSocket connection does: one channel (0) for
// everything, messages of at most MaxReadLimit bytes, a receive side
// bounded by cfg.ReceiveQueue and cfg.ReceiveBudget (a sender that finds
// its peer's side full waits, as a peer's TCP window would make it), and
// messages sent before Close still reach a peer that reads them. Its
// Transport is "inproc".
func Pipe(cfg Config) (Conn, Conn) { return pipe(cfg, cfg) }

// pipe is Pipe with each end's own configuration.
func pipe(ca, cb Config) (*pipeConn, *pipeConn) {
	a, b := newPipeEnd(ca.withDefaults()), newPipeEnd(cb.withDefaults())
	a.peer, b.peer = b, a
	return a, b
}

type pipeConn struct {
	peer      *pipeConn
	queue     *recvQueue // what the peer sent, for Receive
	readLimit atomic.Int64
	written   atomic.Uint64
	read      atomic.Uint64 // what the peer sent: BytesRead
	done      chan struct{} // closed by Close or Abort
	closeOnce sync.Once
}

func newPipeEnd(cfg Config) *pipeConn {
	c := &pipeConn{queue: newRecvQueue(cfg.ReceiveQueue, cfg.ReceiveBudget), done: make(chan struct{})}
	c.readLimit.Store(DefaultReadLimit)
	return c
}

// pipeAddr is the address of either end of a Pipe.
var pipeAddr net.Addr = inprocAddr{}

type inprocAddr struct{}

func (inprocAddr) Network() string { return "inproc" }
func (inprocAddr) String() string  { return "inproc" }

// IsInProcess reports whether addr is a Pipe's: a peer in this process.
func IsInProcess(addr net.Addr) bool {
	_, ok := addr.(inprocAddr)
	return ok
}

func (c *pipeConn) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *pipeConn) Receive(ctx context.Context) (Message, error) {
	return c.queue.pop(ctx)
}

// Send hands a copy of msg to the peer's receive side, waiting while that
// is full. A message over the peer's read limit fails the peer's Receive
// with ErrMessageTooLarge, as it would on the network. If ctx ends while
// Send waits, the connection is closed: a WebSocket's half-written message
// cannot be taken back either, and the two must behave alike.
func (c *pipeConn) Send(ctx context.Context, ch ChannelID, msg []byte) error {
	if ch != ControlChannel {
		return fmt.Errorf("%w: %d (an in-process pipe has only channel 0)", ErrUnknownChannel, ch)
	}
	if len(msg) > MaxReadLimit {
		return fmt.Errorf("%w: %d-byte message exceeds %d", ErrMessageTooLarge, len(msg), MaxReadLimit)
	}
	if c.closed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("transport: send: %w", err)
	}
	if int64(len(msg)) > c.peer.readLimit.Load() {
		c.peer.queue.fail(fmt.Errorf("%w: %d-byte message exceeds the read limit %d", ErrMessageTooLarge, len(msg), c.peer.readLimit.Load()))
		return nil
	}
	buf := getBuffer(len(msg))
	copy(buf.b, msg)
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { c.Abort() })
		defer stop()
	}
	if err := c.peer.queue.push(Message{Channel: ControlChannel, Data: buf.b, release: buf.release}); err != nil {
		buf.release()
		if ctx.Err() != nil {
			return fmt.Errorf("transport: send: %w", ctx.Err())
		}
		return ErrClosed
	}
	c.written.Add(uint64(len(msg)))
	c.peer.read.Add(uint64(len(msg)))
	return nil
}

// Cork and Uncork batch nothing: a message reaches the peer's side at
// once, with no system call to save.
func (c *pipeConn) Cork() {}

func (c *pipeConn) Uncork() error {
	if c.closed() {
		return ErrClosed
	}
	return nil
}

func (c *pipeConn) AcquireChannel(ctx context.Context) (ChannelID, error) {
	if c.closed() {
		return 0, ErrClosed
	}
	return ControlChannel, nil
}

func (c *pipeConn) ReleaseChannel(ChannelID) {}

func (c *pipeConn) SetReadLimit(n int64) { c.readLimit.Store(clampReadLimit(n)) }

// BytesWritten is the bytes the peer's receive side has taken
// (transport.WriteProgress).
func (c *pipeConn) BytesWritten() uint64 { return c.written.Load() }

// BytesRead is the bytes the peer has sent this end, whole messages
// (transport.ReadProgress).
func (c *pipeConn) BytesRead() uint64 { return c.read.Load() }

func (c *pipeConn) Transport() string { return "inproc" }

func (c *pipeConn) RemoteAddr() net.Addr { return pipeAddr }

// Close ends this end: its Receive and its later calls fail with
// ErrClosed, and the peer's Receive does too once it has read what this
// end sent before.
func (c *pipeConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		c.queue.close()
		c.peer.queue.fail(ErrClosed)
	})
	return nil
}

// Abort is Close: nothing waits for the peer in either.
func (c *pipeConn) Abort() { c.Close() }
