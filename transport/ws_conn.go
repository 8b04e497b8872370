package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	ws        *websocket.Conn
	nc        *corkConn // under ws: holds a batch's writes for one system call
	cfg       Config
	remote    net.Addr
	queue     *recvQueue
	readLimit atomic.Int64
	probe     [1]byte // readMessage's scratch, used by readLoop only
	// tap sees frame headers before the library reads the bodies (daemon
	// side only; nil on the agent side, which trusts its daemon).
	tap *wsTap
	// body is the current message's reader as readLoop hands it to
	// readMessage: it refuses to read on once the tap has seen the
	// message's declared size pass the limit.
	body wsBody
	// slow fires when a message may have taken longer than
	// Config.MessageTimeout since its first frame header (watchSlow).
	// msgStart is when the message being read began (nanoseconds on the
	// connection's monotonic clock, since born), 0 between messages, and
	// -1 once the timer has claimed it as timed out; slowArmed says the
	// timer is set.
	slow      *time.Timer
	born      time.Time
	msgStart  atomic.Int64
	slowArmed atomic.Bool

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	// policyViolation makes Close send 1008 instead of 1000: the peer sent
	// a text message. tooBig makes it send 1009: a message above the limit.
	policyViolation atomic.Bool
	tooBig          atomic.Bool
}

// wsBody reads message number k of the connection, unless the tap has
// seen it announced larger than the read limit.
type wsBody struct {
	r   io.Reader
	tap *wsTap
	k   uint64
}

func (b *wsBody) Read(p []byte) (int, error) {
	if b.tap != nil && b.tap.oversizedMessage(b.k) {
		return 0, errAnnouncedTooLarge
	}
	return b.r.Read(p)
}

// errAnnouncedTooLarge is ErrMessageTooLarge found from frame headers.
var errAnnouncedTooLarge = fmt.Errorf("%w: announced in its frame headers", ErrMessageTooLarge)

func newWSConn(ws *websocket.Conn, nc *corkConn, remote net.Addr, cfg Config, tap *wsTap) *wsConn {
	c := &wsConn{
		ws:     ws,
		nc:     nc,
		cfg:    cfg,
		remote: remote,
		queue:  newRecvQueue(cfg.ReceiveQueue, cfg.ReceiveBudget),
		tap:    tap,
		done:   make(chan struct{}),
	}
	c.body.tap = tap
	if tap != nil {
		tap.refuse = c.announcedTooLarge
	}
	c.born = time.Now()
	c.slow = time.AfterFunc(time.Hour, c.watchSlow)
	c.slow.Stop()
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
	defer func() {
		// No message is read any more: watchSlow, which may be running
		// now, leaves the timer unset (an armed timer would hold the
		// connection until it fired).
		c.msgStart.Store(-1)
		c.slow.Stop()
	}()
	ctx := context.Background()
	last := wsFirstRead
	for {
		typ, r, err := c.ws.Reader(ctx)
		if err != nil {
			c.queue.fail(c.readError(err))
			return
		}
		c.body.k++
		if typ != websocket.MessageBinary {
			// The woken Receive's caller closes the connection; that close
			// must say 1008. Closing here would block this reader for the
			// closing handshake, which the caller's Close does anyway.
			c.policyViolation.Store(true)
			c.queue.fail(ErrTextMessage)
			return
		}
		c.msgStart.Store(max(1, int64(time.Since(c.born))))
		if !c.slowArmed.Load() && c.slowArmed.CompareAndSwap(false, true) {
			c.slow.Reset(c.cfg.MessageTimeout)
		}
		c.body.r = r
		limit := c.readLimit.Load()
		buf, err := readMessage(&c.body, limit, last, &c.probe)
		c.body.r = nil
		if c.msgStart.Swap(0) < 0 {
			if buf != nil {
				putBuffer(buf)
			}
			return // watchSlow has failed the queue
		}
		if err != nil {
			if errors.Is(err, ErrMessageTooLarge) || isWSTooBig(err) {
				// Not closed here: the session says why first (CLOSE
				// ERROR); its Close then sends 1009.
				c.tooBig.Store(true)
			}
			c.queue.fail(c.readError(err))
			return
		}
		last = max(wsFirstRead, min(len(buf.b), eagerAlloc))
		if err := c.queue.push(buf.message(ControlChannel)); err != nil {
			putBuffer(buf)
			return
		}
	}
}

// announcedTooLarge ends Receive when the tap has seen a message announced
// above the read limit. The connection stays open for the session's CLOSE;
// Close then sends 1009 and unblocks the reader.
func (c *wsConn) announcedTooLarge() {
	c.tooBig.Store(true)
	if !c.isClosing() {
		c.queue.fail(fmt.Errorf("%w: message exceeds the read limit %d", errAnnouncedTooLarge, c.readLimit.Load()))
	}
}

// watchSlow runs when the message timer fires. The timer is not set and
// stopped around every message, which cost two timer-heap operations per
// message received: once set, it stays set while messages keep coming,
// and each time it fires it looks at the message being read now. A
// message that began less than MessageTimeout ago sets it for the rest of
// its time; one older than that has timed out; between messages the timer
// is left unset, so an idle connection has none pending.
func (c *wsConn) watchSlow() {
	for {
		start := c.msgStart.Load()
		if start <= 0 {
			c.slowArmed.Store(false)
			// A message that began after the load found no timer set
			// and set none: take it on.
			if c.msgStart.Load() > 0 && c.slowArmed.CompareAndSwap(false, true) {
				continue
			}
			return
		}
		if left := c.cfg.MessageTimeout - (time.Since(c.born) - time.Duration(start)); left > 0 {
			c.slow.Reset(left)
			if c.msgStart.Load() < 0 {
				c.slow.Stop() // the reader ended meanwhile
			}
			return
		}
		if c.msgStart.CompareAndSwap(start, -1) {
			c.messageTimedOut()
			return
		}
		// The message ended meanwhile, and maybe another began: look again.
	}
}

// messageTimedOut ends Receive when a message takes too long. The
// connection stays open for the session's CLOSE; Close then unblocks the
// reader.
func (c *wsConn) messageTimedOut() {
	if !c.isClosing() {
		c.queue.fail(fmt.Errorf("%w: more than %v", ErrMessageTimeout, c.cfg.MessageTimeout))
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
	c.nc.SetWriteDeadline(time.Now().Add(c.cfg.CloseTimeout))
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
	if c.tap != nil {
		c.tap.limit.Store(n)
	}
	c.ws.SetReadLimit(n)
}

// BytesWritten is the bytes the connection has taken so far
// (transport.WriteProgress); 0 without a cork under the library.
func (c *wsConn) BytesWritten() uint64 {
	if c.nc == nil {
		return 0
	}
	return c.nc.written.Load()
}

// BytesRead is the bytes read from the connection so far, a message's as
// they arrive (transport.ReadProgress); 0 on a dialled connection, which
// has no tap.
func (c *wsConn) BytesRead() uint64 {
	if c.tap == nil {
		return 0
	}
	return c.tap.read.Load()
}

func (c *wsConn) Transport() string { return "ws" }

func (c *wsConn) RemoteAddr() net.Addr { return c.remote }

// Close sends a WebSocket close (1000) and waits for the peer's, which a
// live peer's reader answers at once. Data already written reaches the peer
// before the close frame (TCP keeps order), so nothing sent before Close is
// lost.
//
// The library bounds most steps at 5 s but not one: before the peer's close
// frame it reads out the rest of the message in progress, without a
// deadline, so a peer that announced 2^63 bytes, or trickles, would hold
// Close forever. A read deadline bounds the handshake at CloseTimeout.
// Abort ends the connection at once, without a closing handshake: for a
// peer taken for dead, which would never answer one.
func (c *wsConn) Abort() {
	c.closeOnce.Do(func() {
		close(c.done)
		c.queue.close()
		c.ws.CloseNow()
	})
	c.wg.Wait()
}

func (c *wsConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		c.queue.close()
		c.flushForClose()
		c.nc.SetReadDeadline(time.Now().Add(c.cfg.CloseTimeout))
		switch {
		case c.policyViolation.Load():
			c.ws.Close(websocket.StatusPolicyViolation, "m2m.v1 carries binary messages only")
		case c.tooBig.Load():
			c.ws.Close(websocket.StatusMessageTooBig, "message exceeds the read limit")
		default:
			c.ws.Close(websocket.StatusNormalClosure, "")
		}
	})
	c.wg.Wait()
	return nil
}
