package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// wsFirstRead is the least buffer a WebSocket message is first read into;
// the connection otherwise starts from its previous message's size.
const wsFirstRead = 512

// wsConn is a Conn over one WebSocket connection: one channel, id 0.
type wsConn struct {
	ws           *websocket.Conn
	nc           *corkConn // under ws: holds a batch's writes for one system call
	closeTimeout time.Duration
	remote       net.Addr
	queue        *recvQueue
	readLimit    atomic.Int64
	probe        [1]byte // readMessage's scratch, used by readLoop only

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	// policyViolation makes Close send 1008 instead of 1000: the peer sent
	// a text message.
	policyViolation atomic.Bool
}

func newWSConn(ws *websocket.Conn, nc *corkConn, remote net.Addr, cfg Config) *wsConn {
	c := &wsConn{
		ws:           ws,
		nc:           nc,
		closeTimeout: cfg.CloseTimeout,
		remote:       remote,
		queue:        newRecvQueue(cfg.ReceiveQueue, cfg.ReceiveQueueBytes),
		done:         make(chan struct{}),
	}
	// The library's own default (32 KiB) must never apply: set the
	// protocol's pre-ACCEPT limit before the first read.
	c.SetReadLimit(DefaultReadLimit)
	c.wg.Add(1)
	go c.readLoop()
	return c
}

// readLoop reads with a context that never ends: the library closes the
// connection when a read's context ends, so Receive's context cannot be
// passed down; Close unblocks the read instead.
func (c *wsConn) readLoop() {
	defer c.wg.Done()
	ctx := context.Background()
	last := wsFirstRead
	for {
		typ, r, err := c.ws.Reader(ctx)
		if err != nil {
			c.queue.fail(c.readError(err))
			return
		}
		if typ != websocket.MessageBinary {
			// The woken Receive's caller closes the connection; that close
			// must say 1008. Closing here would block this reader for the
			// closing handshake, which the caller's Close does anyway.
			c.policyViolation.Store(true)
			c.queue.fail(ErrTextMessage)
			return
		}
		limit := c.readLimit.Load()
		buf, err := readMessage(r, limit, last, &c.probe)
		if err != nil {
			c.queue.fail(c.readError(err))
			if errors.Is(err, ErrMessageTooLarge) || isWSTooBig(err) {
				c.flushForClose()
				c.ws.Close(websocket.StatusMessageTooBig, "message exceeds the read limit")
			}
			return
		}
		last = max(wsFirstRead, min(len(buf.b), eagerAlloc))
		if err := c.queue.push(buf.message(ControlChannel)); err != nil {
			putBuffer(buf)
			return
		}
	}
}

func (c *wsConn) readError(err error) error {
	switch {
	case c.isClosing():
		return ErrClosed
	case errors.Is(err, ErrMessageTooLarge):
		return err
	case isWSTooBig(err):
		return fmt.Errorf("%w: message exceeds the read limit %d", ErrMessageTooLarge, c.readLimit.Load())
	}
	return closedBy(err)
}

func (c *wsConn) isClosing() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *wsConn) Receive(ctx context.Context) (Message, error) {
	return c.queue.pop(ctx)
}

// Send writes msg as one binary message. The library serialises writers
// itself. If ctx ends while the message is being written the connection is
// closed, as a half-written WebSocket message cannot be taken back.
//
// Send counts as a Cork of its own: when another Send or a Cork is under
// way the message joins their batch and the last to end writes it; alone,
// it is written at once.
func (c *wsConn) Send(ctx context.Context, ch ChannelID, msg []byte) error {
	if ch != ControlChannel {
		return fmt.Errorf("%w: %d (WebSocket has only channel 0)", ErrUnknownChannel, ch)
	}
	if len(msg) > MaxReadLimit {
		return fmt.Errorf("%w: %d-byte message exceeds %d", ErrMessageTooLarge, len(msg), MaxReadLimit)
	}
	if c.isClosing() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		// The library would start the write and then close the connection
		// for the ended context; nothing has been written yet, so say no.
		return fmt.Errorf("transport: send: %w", err)
	}
	c.nc.cork()
	err := c.ws.Write(ctx, websocket.MessageBinary, msg)
	if err == nil {
		err = c.uncorkCtx(ctx)
	} else {
		c.nc.uncork() // the connection is failing; its own error says why
	}
	if err != nil {
		return c.writeError(ctx, err)
	}
	return nil
}

func (c *wsConn) writeError(ctx context.Context, err error) error {
	if c.isClosing() {
		return ErrClosed
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("transport: send: %w", ctxErr)
	}
	return closedBy(err)
}

// uncorkCtx ends a Send's cork. If that writes the batch, the write obeys
// ctx as the library's own writes do: a context that ends first closes the
// connection. Contexts that cannot end (the daemon's and client's data
// path) cost no AfterFunc registration.
func (c *wsConn) uncorkCtx(ctx context.Context) error {
	if ctx.Done() == nil {
		return c.nc.uncork()
	}
	stop := context.AfterFunc(ctx, func() { c.ws.CloseNow() })
	err := c.nc.uncork()
	stop()
	return err
}

// flushForClose writes what a batch holds, ahead of the close frame (Close
// may be called from inside a batch, whose end would come too late), and
// makes later writes go straight out. A peer that does not read gets
// Config.CloseTimeout for the batch and the close frame together, like
// QUIC's linger: a stuck write must not hold Close forever.
func (c *wsConn) flushForClose() {
	c.nc.SetWriteDeadline(time.Now().Add(c.closeTimeout))
	c.nc.closing()
}

// Cork holds back the messages sent until the matching Uncork, which
// writes them all with one system call.
func (c *wsConn) Cork() { c.nc.cork() }

// Uncork ends a Cork; the last one to end writes what is held.
func (c *wsConn) Uncork() error {
	if err := c.nc.uncork(); err != nil {
		return c.writeError(context.Background(), err)
	}
	return nil
}

func (c *wsConn) AcquireChannel(ctx context.Context) (ChannelID, error) {
	if c.isClosing() {
		return 0, ErrClosed
	}
	return ControlChannel, nil
}

func (c *wsConn) ReleaseChannel(ChannelID) {}

func (c *wsConn) SetReadLimit(n int64) {
	n = clampReadLimit(n)
	c.readLimit.Store(n)
	c.ws.SetReadLimit(n)
}

func (c *wsConn) Transport() string { return "ws" }

func (c *wsConn) RemoteAddr() net.Addr { return c.remote }

// Close sends a WebSocket close (1000) and waits for the peer's, which a
// live peer's reader answers at once; the library bounds the wait at 5 s
// per step. Data already written reaches the peer before the close frame
// (TCP keeps order), so nothing sent before Close is lost.
func (c *wsConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		c.queue.close()
		c.flushForClose()
		if c.policyViolation.Load() {
			c.ws.Close(websocket.StatusPolicyViolation, "m2m.v1 carries binary messages only")
		} else {
			c.ws.Close(websocket.StatusNormalClosure, "")
		}
	})
	c.wg.Wait()
	return nil
}
