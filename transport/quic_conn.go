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

	"github.com/quic-go/quic-go"
)

// sendCopyMax is the largest message Send copies behind its length prefix
// to hand quic-go a single Write. Above it the prefix and the message go
// in two Writes: copying megabytes costs more than the extra call.
const sendCopyMax = 64 << 10

// pastTime is a deadline that has always passed: it fails a blocked Write
// at once.
var pastTime = time.Unix(1, 0)

// errPeerFinished is why Receive ends when the peer closes its side of the
// control stream, which it does only from Close, and everything it sent on
// its data streams before has been read.
var errPeerFinished = errors.New("peer finished the control stream")

// quicConn is a Conn over one QUIC connection.
type quicConn struct {
	qc        *quic.Conn
	written   atomic.Uint64 // BytesWritten
	read      atomic.Uint64 // BytesRead
	isClient  bool
	cfg       Config
	queue     *recvQueue
	readLimit atomic.Int64
	// controlLimit is the control stream's: never above 65,536, as a
	// CONTROL message is at most that in every state (docs/protocol.md §1).
	controlLimit atomic.Int64

	mu       sync.Mutex
	streams  map[ChannelID]*quicStream
	idle     []*quicStream // opened here, nothing outstanding; LIFO keeps hot streams hot
	released chan struct{} // closed (then replaced) when idle gains a stream
	// shared is set by ShareDataChannel: AcquireChannel then returns one
	// data stream, one (guarded by mu), for every request.
	shared       atomic.Bool
	one          *quicStream
	control      *quicStream
	controlReady chan struct{} // closed once control is known
	closing      bool

	peerFinished     chan struct{} // closed when the peer finishes the control stream
	peerFinishedOnce sync.Once
	peerDoneOnce     sync.Once   // Receive's end after peerFinished: peerDone
	peerDoneTimer    *time.Timer // guarded by mu: bounds the wait for the data streams' ends
	// acceptedAll (guarded by mu) is set by acceptLoop once, after the
	// peer finished its control stream, it has taken every stream quic-go
	// had received by then; until then checkPeerDone cannot know them all.
	acceptedAll bool
	// stopAccept wakes acceptLoop when the peer finishes its control
	// stream.
	stopAccept context.CancelFunc
	acceptCtx  context.Context
	done       chan struct{} // closed by Close
	closeOnce  sync.Once
	ctx        context.Context // cancelled by Close; bounds AcceptStream
	cancel     context.CancelFunc
	wg         sync.WaitGroup

	// dataTurn (capacity 1) is held while one data message is handed to
	// quic-go: see takeDataTurn.
	dataTurn chan struct{}

	cork quicCork // quic_cork.go
}

// quicStream is one channel.
type quicStream struct {
	id       ChannelID
	str      *quic.Stream
	poolable bool // a data stream opened by this side

	// sendMu serialises Sends; a channel so that waiting for it can be
	// abandoned when the context ends.
	sendMu      chan struct{}
	broken      error   // guarded by sendMu: set when a Send was cut short mid-message
	deadlineSet bool    // guarded by sendMu: a write deadline may be set on str
	held        *[]byte // guarded by sendMu: framed messages a Cork holds
	wrote       atomic.Bool

	// dlMu and gen keep a late context.AfterFunc from setting a deadline
	// on a later Send (see armCancel).
	dlMu sync.Mutex
	gen  uint64

	// guarded by quicConn.mu
	pooled   bool
	dead     bool // read side failed or write side broken: never pooled again
	readDone bool // the read loop has ended: the peer sends nothing more here
}

func newQUICConn(qc *quic.Conn, isClient bool, cfg Config) (*quicConn, error) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &quicConn{
		qc:           qc,
		isClient:     isClient,
		cfg:          cfg,
		queue:        newRecvQueue(cfg.ReceiveQueue, cfg.ReceiveBudget),
		streams:      make(map[ChannelID]*quicStream),
		controlReady: make(chan struct{}),
		peerFinished: make(chan struct{}),
		dataTurn:     make(chan struct{}, 1),
		done:         make(chan struct{}),
		ctx:          ctx,
		cancel:       cancel,
	}
	c.SetReadLimit(DefaultReadLimit)
	c.acceptCtx, c.stopAccept = context.WithCancel(ctx)
	if isClient {
		// The client's first bidirectional stream is stream 0, the control
		// stream. Opening it sends nothing: the daemon sees it with HELLO.
		str, err := qc.OpenStream()
		if err != nil {
			cancel()
			qc.CloseWithError(quicErrProtocol, "")
			return nil, fmt.Errorf("transport: open control stream: %w", err)
		}
		if str.StreamID() != 0 {
			cancel()
			qc.CloseWithError(quicErrProtocol, "")
			return nil, fmt.Errorf("%w: control stream got id %d, want 0", ErrProtocol, str.StreamID())
		}
		if _, err := c.addStream(str, false); err != nil {
			cancel()
			return nil, err
		}
	}
	c.wg.Add(2)
	go c.acceptLoop()
	go c.datagrams()
	return c, nil
}

// addStream registers str and starts its reader.
func (c *quicConn) addStream(str *quic.Stream, poolable bool) (*quicStream, error) {
	c.mu.Lock()
	s, err := c.addStreamLocked(str, poolable)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	go c.readLoop(s)
	return s, nil
}

// addStreamLocked registers str; the caller holds c.mu and then starts
// the stream's reader (go c.readLoop(s)).
func (c *quicConn) addStreamLocked(str *quic.Stream, poolable bool) (*quicStream, error) {
	if c.closing {
		str.CancelRead(quicStreamAborted)
		str.CancelWrite(quicStreamAborted)
		return nil, ErrClosed
	}
	s := &quicStream{
		id:       ChannelID(str.StreamID()),
		str:      str,
		poolable: poolable,
		sendMu:   make(chan struct{}, 1),
	}
	c.streams[s.id] = s
	if s.id == ControlChannel {
		c.control = s
		close(c.controlReady)
	}
	c.wg.Add(1)
	return s, nil
}

// acceptLoop takes the streams the peer opens: on the daemon the control
// stream first (stream 0 is implicitly opened by any later client stream,
// and quic-go hands streams out in order), then data streams from either
// side's requests.
func (c *quicConn) acceptLoop() {
	defer c.wg.Done()
	ctx := c.acceptCtx
	for {
		str, err := c.qc.AcceptStream(ctx)
		if err != nil && ctx != c.ctx && c.ctx.Err() == nil {
			// The peer finished its control stream (stopAccept): take
			// every stream that arrives within peerStreamGrace, then let
			// checkPeerDone decide whether anything is still to come.
			// Streams quic-go already has come at once; the grace is for
			// a data stream whose first bytes the peer wrote before the
			// FIN but that reach us just after it (docs/protocol.md §1).
			gctx, cancel := context.WithTimeout(c.ctx, c.peerStreamGrace())
			for {
				str, err := c.qc.AcceptStream(gctx)
				if err != nil {
					break
				}
				_, _ = c.addStream(str, false)
			}
			cancel()
			c.mu.Lock()
			c.acceptedAll = true
			c.mu.Unlock()
			c.checkPeerDone()
			ctx = c.ctx
			continue
		}
		if err != nil {
			c.connFailed(err)
			return
		}
		// While Close lingers, addStream resets the streams that still
		// arrive, so that the peer knows at once that nothing more will
		// be read from them (and stops waiting for their ends).
		_, _ = c.addStream(str, false)
	}
}

// minPeerStreamGrace is the least peerStreamGrace: QUIC's default
// max_ack_delay, a bound on how long a peer's packets already sent are
// held on the way, even on loopback, where the RTT says microseconds but a
// loaded machine can hold quic-go's packet processing for a scheduler tick.
const minPeerStreamGrace = 25 * time.Millisecond

// peerStreamGrace is how long, after the peer finished its control
// stream, a data stream that this side has not seen yet may still arrive:
// the control stream's FIN can come in the same packet ahead of a data
// stream's first frame, or in the packet before it. Its RTT estimate plus
// four deviations, at least minPeerStreamGrace, at most CloseTimeout.
func (c *quicConn) peerStreamGrace() time.Duration {
	st := c.qc.ConnectionStats()
	return min(max(st.SmoothedRTT+4*st.MeanDeviation, minPeerStreamGrace), c.cfg.CloseTimeout)
}

func (c *quicConn) readLoop(s *quicStream) {
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		s.readDone = true
		c.mu.Unlock()
		c.checkPeerDone()
	}()
	limit, pool := &c.readLimit, dataPool
	if s.id == ControlChannel {
		limit, pool = &c.controlLimit, controlPool
	}
	var hdr [4]byte
	// A message has MessageTimeout from its first byte for its prefix, and
	// again from the moment it has budget for its body: waiting for budget
	// is this side's doing, not the peer's.
	started := func() { s.str.SetReadDeadline(time.Now().Add(c.cfg.MessageTimeout)) }
	in := countingReader{s.str, &c.read}
	for {
		n, err := readPrefix(in, &hdr, limit, started)
		if err != nil {
			c.streamFailed(s, err)
			return
		}
		if err := c.queue.reserve(n, pool); err != nil {
			if s.id == ControlChannel && c.isClosing() {
				// Close is lingering: keep reading (below) so the peer's
				// FIN on the control stream is seen and the linger can end
				// early.
				if _, err := io.CopyN(io.Discard, s.str, int64(n)); err == nil {
					continue
				}
			}
			return // closed or failed
		}
		started()
		buf, err := readBody(in, n)
		s.str.SetReadDeadline(time.Time{})
		if err != nil {
			c.queue.unreserve(n, pool)
			c.streamFailed(s, err)
			return
		}
		if err := c.queue.pushReserved(buf.message(s.id), pool); err != nil {
			putBuffer(buf)
			if s.id == ControlChannel && c.isClosing() {
				// Close is lingering: keep reading so the peer's FIN on the
				// control stream is seen and the linger can end early.
				continue
			}
			return
		}
	}
}

func (c *quicConn) isClosing() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// streamFailed sorts a read error into channel-level (the connection
// carries on; Receive reports a *ChannelError) and connection-level.
func (c *quicConn) streamFailed(s *quicStream, err error) {
	var streamErr *quic.StreamError
	switch {
	case errors.Is(err, io.EOF):
		if s.id == ControlChannel {
			c.peerFinishedOnce.Do(func() { close(c.peerFinished) })
			c.awaitPeerDone()
			return
		}
		// A closing peer finishes every stream it wrote on before its
		// control stream: nothing more will come on this one, and it
		// cannot carry a reply any more.
		c.mu.Lock()
		s.dead = true
		c.mu.Unlock()
		return
	case errors.Is(err, ErrMessageTooLarge):
		// The rest of the stream cannot be framed any more.
		s.str.CancelRead(quicStreamTooBig)
	case errors.Is(err, ErrProtocol), errors.As(err, &streamErr):
	case isTimeout(err) && c.qc.Context().Err() == nil:
		// A message begun and not finished: the peer holds budget with
		// partial bytes. The connection's Receive ends; the connection
		// stays open so the session can say why.
		if !c.isClosing() {
			c.queue.fail(fmt.Errorf("%w: channel %d: more than %v", ErrMessageTimeout, s.id, c.cfg.MessageTimeout))
		}
		return
	default:
		c.connFailed(err)
		return
	}
	if c.isClosing() {
		return
	}
	c.mu.Lock()
	s.dead = true
	c.mu.Unlock()
	c.queue.pushErr(&ChannelError{Channel: s.id, Err: err})
}

// awaitPeerDone runs when the peer has finished its control stream. The
// peer's messages on data streams may still be in flight (QUIC orders
// bytes within a stream, not across streams): Receive ends only once every
// stream the peer may have written on has ended too (checkPeerDone), or
// after Config.CloseTimeout for a peer that does not finish its streams.
func (c *quicConn) awaitPeerDone() {
	c.mu.Lock()
	if c.peerDoneTimer == nil && !c.closing {
		c.peerDoneTimer = time.AfterFunc(c.cfg.CloseTimeout, c.peerDone)
	}
	c.mu.Unlock()
	c.stopAccept() // acceptLoop takes the streams that arrived, then checks
}

// checkPeerDone ends Receive once the peer has finished its control stream,
// acceptLoop has taken the streams that arrived before that, and every data
// stream's read side has ended. Streams this side opened
// but never wrote on are unknown to the peer and not waited for; a stream
// the peer learns of while it closes, it resets (addStream), which ends
// its read loop here.
func (c *quicConn) checkPeerDone() {
	select {
	case <-c.peerFinished:
	default:
		return
	}
	c.mu.Lock()
	if !c.acceptedAll {
		c.mu.Unlock()
		return
	}
	for _, s := range c.streams {
		if s.id != ControlChannel && !s.readDone && !(s.poolable && !s.wrote.Load()) {
			c.mu.Unlock()
			return
		}
	}
	c.mu.Unlock()
	c.peerDone()
}

func (c *quicConn) peerDone() {
	c.peerDoneOnce.Do(func() {
		c.mu.Lock()
		if c.peerDoneTimer != nil {
			c.peerDoneTimer.Stop()
		}
		c.mu.Unlock()
		c.queue.fail(closedBy(errPeerFinished))
	})
}

// connFailed reports the end of the connection to Receive, with the reason
// quic-go recorded (peer's CONNECTION_CLOSE, idle timeout …).
func (c *quicConn) connFailed(err error) {
	if c.isClosing() {
		return
	}
	if cause := context.Cause(c.qc.Context()); cause != nil {
		err = cause
	}
	c.queue.fail(closedBy(err))
}

func (c *quicConn) Receive(ctx context.Context) (Message, error) {
	return c.queue.pop(ctx)
}

func (c *quicConn) Send(ctx context.Context, ch ChannelID, msg []byte) error {
	if len(msg) > MaxReadLimit {
		return fmt.Errorf("%w: %d-byte message exceeds %d", ErrMessageTooLarge, len(msg), MaxReadLimit)
	}
	s, err := c.stream(ctx, ch)
	if err != nil {
		return err
	}
	if err := acquire(ctx, s.sendMu, c.done); err != nil {
		return err
	}
	defer func() { <-s.sendMu }()
	if c.isClosing() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("transport: send on channel %d: %w", ch, err)
	}
	if s.broken != nil {
		return &ChannelError{Channel: ch, Err: s.broken}
	}
	return c.send(ctx, s, msg)
}

// stream finds channel ch. On the daemon a Send on the control channel
// waits for the client's control stream to arrive.
func (c *quicConn) stream(ctx context.Context, ch ChannelID) (*quicStream, error) {
	c.mu.Lock()
	s, closing := c.streams[ch], c.closing
	c.mu.Unlock()
	switch {
	case closing:
		return nil, ErrClosed
	case s != nil:
		return s, nil
	case ch != ControlChannel:
		return nil, fmt.Errorf("%w: %d", ErrUnknownChannel, ch)
	}
	select {
	case <-c.controlReady:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.control, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, ErrClosed
	}
}

// BytesWritten is the bytes the streams have handed to QUIC so far
// (transport.WriteProgress).
func (c *quicConn) BytesWritten() uint64 { return c.written.Load() }

// BytesRead is the bytes the streams have read so far, a message's as
// they arrive (transport.ReadProgress).
func (c *quicConn) BytesRead() uint64 { return c.read.Load() }

// countingReader counts what it reads into n.
type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n.Add(uint64(n))
	return n, err
}

// takeDataTurn waits until s may hand a message to quic-go; took says
// whether it holds the turn, which giveDataTurn gives back. Data messages
// leave one after another, not interleaved across streams: the receiver
// gives its budget to messages in the order their length prefixes arrive
// and leaves the bodies of the others unread, in the connection's
// flow-control window (recvQueue.reserve).
// Bodies written at once on many streams share that window (quic-go sends
// every stream with data in turn), so unread bodies could fill it while
// the messages holding the budget still missed bytes: the connection
// stalled until MessageTimeout, with the default budget as with a small
// one (TestQUICConcurrentSendsSmallBudget). One after another, the rest
// of the message at the head of the receiver's line is next on the wire.
// Control messages are not held: they are small, have a budget of their
// own, and PING or CLOSE must not wait behind a large message.
// The caller holds s.sendMu; stop (c.done, or Close's linger) ends the wait.
func (c *quicConn) takeDataTurn(ctx context.Context, s *quicStream, stop <-chan struct{}) (took bool, err error) {
	if s.id == ControlChannel {
		return false, nil
	}
	if err := acquire(ctx, c.dataTurn, stop); err != nil {
		if errors.Is(err, ErrClosed) {
			return false, err
		}
		return false, fmt.Errorf("transport: send on channel %d: %w", s.id, err)
	}
	return true, nil
}

// acquire takes sem (a channel of capacity 1 used as a lock), without a
// select in the common case of no contention; it gives up with ctx's error
// when ctx ends, or ErrClosed when stop is closed.
func acquire(ctx context.Context, sem chan<- struct{}, stop <-chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return ErrClosed
	}
}

// giveDataTurn ends a turn takeDataTurn took.
func (c *quicConn) giveDataTurn(took bool) {
	if took {
		<-c.dataTurn
	}
}

// write sends one framed message; the caller holds s.sendMu.
func (c *quicConn) write(ctx context.Context, s *quicStream, msg []byte) error {
	took, err := c.takeDataTurn(ctx, s, c.done)
	if err != nil {
		return err
	}
	defer c.giveDataTurn(took)
	stop := c.armDeadline(ctx, s)
	first := s.announce()
	var written int
	var buf *buffer
	if len(msg) <= sendCopyMax {
		buf = getBuffer(4 + len(msg))
		putFrameHeader(buf.b, len(msg))
		copy(buf.b[4:], msg)
		written, err = s.str.Write(buf.b)
	} else {
		buf = getBuffer(4)
		putFrameHeader(buf.b, len(msg))
		written, err = s.str.Write(buf.b)
		// In pieces, so that BytesWritten shows a large message going out
		// as the peer takes it.
		for off := 0; err == nil && off < len(msg); {
			var n int
			n, err = s.str.Write(msg[off:min(off+sendCopyMax, len(msg))])
			off += n
			written += n
			c.written.Add(uint64(n))
		}
	}
	if len(msg) <= sendCopyMax {
		c.written.Add(uint64(written))
	}
	putBuffer(buf)
	c.disarmDeadline(s, stop)
	if err == nil {
		return nil
	}
	s.unannounce(first, written)
	return c.writeFailed(ctx, s, written, len(msg)+4, err)
}

// announce records, before s's bytes go to quic-go, that the peer may know
// s, so that checkPeerDone waits for the end of s's read side. Recorded
// once Write had returned, it came too late: quic-go sends while Write
// is still on its way back (or blocked mid-message on flow control), the
// peer could answer on s and finish its control stream in that time, and
// Receive then ended without waiting for the answer, which was lost
// (TestQUICAnswerDuringFirstWrite). It reports whether this is s's first
// write, for unannounce. The caller holds s.sendMu.
func (s *quicStream) announce() (first bool) {
	if s.wrote.Load() {
		return false
	}
	s.wrote.Store(true)
	return true
}

// unannounce takes back announce after a first Write that handed nothing
// to quic-go: the peer cannot know s.
func (s *quicStream) unannounce(first bool, written int) {
	if first && written == 0 {
		s.wrote.Store(false)
	}
}

// writeFailed sorts out a Write of total bytes on s that failed after
// written of them; the caller holds s.sendMu.
func (c *quicConn) writeFailed(ctx context.Context, s *quicStream, written, total int, err error) error {
	if written > 0 {
		// Part of the message is on its way: the peer could not find the
		// next message boundary, so the channel ends here.
		s.str.CancelWrite(quicStreamAborted)
		s.broken = fmt.Errorf("%w: an earlier Send was cut short after %d of %d bytes", ErrProtocol, written, total)
		c.mu.Lock()
		s.dead = true
		c.mu.Unlock()
	}
	select {
	case <-c.qc.Context().Done():
		if c.isClosing() {
			return ErrClosed
		}
		return closedBy(context.Cause(c.qc.Context()))
	default:
	}
	if c.isClosing() {
		return ErrClosed
	}
	ctxErr := ctx.Err()
	if ctxErr == nil && isTimeout(err) {
		// The stream's deadline is the context's and can fire a moment
		// before the context's own timer does.
		if _, ok := ctx.Deadline(); ok {
			ctxErr = context.DeadlineExceeded
		}
	}
	if ctxErr != nil {
		return fmt.Errorf("transport: send on channel %d: %w", s.id, ctxErr)
	}
	return &ChannelError{Channel: s.id, Err: err}
}

// armDeadline makes the coming Write obey ctx: its deadline directly, its
// cancellation through a deadline in the past. Contexts that can never end
// (context.Background) cost nothing.
func (c *quicConn) armDeadline(ctx context.Context, s *quicStream) (stop func() bool) {
	if d, ok := ctx.Deadline(); ok {
		s.str.SetWriteDeadline(d)
		s.deadlineSet = true
	} else if s.deadlineSet {
		s.str.SetWriteDeadline(time.Time{})
		s.deadlineSet = false
	}
	if ctx.Done() == nil {
		return nil
	}
	s.dlMu.Lock()
	s.gen++
	gen := s.gen
	s.dlMu.Unlock()
	return context.AfterFunc(ctx, func() {
		s.dlMu.Lock()
		if s.gen == gen {
			s.str.SetWriteDeadline(pastTime)
		}
		s.dlMu.Unlock()
	})
}

func (c *quicConn) disarmDeadline(s *quicStream, stop func() bool) {
	if stop == nil {
		return
	}
	if !stop() {
		// The AfterFunc ran or is about to: the next Send must clear
		// whatever it set. Bumping gen stops one that has not got the lock
		// yet from setting anything at all.
		s.deadlineSet = true
	}
	s.dlMu.Lock()
	s.gen++
	s.dlMu.Unlock()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *quicConn) AcquireChannel(ctx context.Context) (ChannelID, error) {
	if c.shared.Load() {
		return c.acquireShared(ctx)
	}
	for {
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			return 0, ErrClosed
		}
		if n := len(c.idle); n > 0 {
			s := c.idle[n-1]
			c.idle[n-1] = nil
			c.idle = c.idle[:n-1]
			s.pooled = false
			c.mu.Unlock()
			return s.id, nil
		}
		if c.released == nil {
			c.released = make(chan struct{})
		}
		released := c.released
		c.mu.Unlock()

		str, err := c.qc.OpenStream()
		if err == nil {
			s, err := c.addStream(str, true)
			if err != nil {
				return 0, err
			}
			return s.id, nil
		}
		if _, atLimit := errors.AsType[*quic.StreamLimitReachedError](err); !atLimit {
			if c.isClosing() {
				return 0, ErrClosed
			}
			return 0, closedBy(err)
		}
		// Every stream the peer allows is in use: wait for one to come back.
		select {
		case <-released:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.done:
			return 0, ErrClosed
		}
	}
}

func (c *quicConn) ReleaseChannel(ch ChannelID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.streams[ch]
	if s == nil || !s.poolable || s.pooled || s.dead || c.closing || s == c.one {
		return
	}
	s.pooled = true
	c.idle = append(c.idle, s)
	if c.released != nil {
		close(c.released)
		c.released = nil
	}
}

func (c *quicConn) SetReadLimit(n int64) {
	n = clampReadLimit(n)
	c.readLimit.Store(n)
	c.controlLimit.Store(min(n, DefaultReadLimit))
}

func (c *quicConn) Transport() string { return "quic" }

func (c *quicConn) RemoteAddr() net.Addr { return c.qc.RemoteAddr() }

// Close ends the connection. Receive, AcquireChannel and waiting Sends
// return ErrClosed at once. Messages already handed to Send are not thrown
// away: quic-go drops stream data it has not delivered when a connection
// closes (on both sides: the peer discards what it received but had not
// read yet), so Close first finishes every stream it wrote on, the data
// streams before the control stream, and waits, at most
// Config.CloseTimeout, until the peer has read to the control stream's end
// and closes too, or the connection is gone. The peer, seeing the control
// stream end, reads its data streams to their ends before its Receive
// fails (awaitPeerDone): data sent just before Close is delivered even when
// it arrives after the control stream's end. A peer that is itself closing
// has finished its control stream already; Close then does not wait.
func (c *quicConn) Close() error {
	c.closeOnce.Do(func() { c.shutdown(true) })
	c.wg.Wait()
	return nil
}

// Abort ends the connection at once: nothing waits for the peer to read
// what was sent. It is for a peer taken for dead, whose reads would never
// come; Close there holds the connection for CloseTimeout in vain.
func (c *quicConn) Abort() {
	c.closeOnce.Do(func() { c.shutdown(false) })
	c.wg.Wait()
}

// shutdown closes the connection; wait first finishes the streams and
// waits for the peer, as Close describes.
func (c *quicConn) shutdown(wait bool) {
	c.mu.Lock()
	c.closing = true
	streams := make([]*quicStream, 0, len(c.streams))
	for _, s := range c.streams {
		streams = append(streams, s)
	}
	control := c.control
	c.idle = nil
	if c.peerDoneTimer != nil {
		c.peerDoneTimer.Stop()
	}
	c.mu.Unlock()
	close(c.done)
	c.queue.close()
	if !wait {
		for _, s := range streams {
			s.str.SetWriteDeadline(pastTime)
		}
		c.qc.CloseWithError(quicErrNone, "")
		c.cancel()
		return
	}

	lingerOver := make(chan struct{})
	linger := time.AfterFunc(c.cfg.CloseTimeout, func() { close(lingerOver) })
	defer linger.Stop()
	c.flushHeldForClose(lingerOver)

	// Sends blocked on flow control give up; whatever they had not handed
	// over would be lost anyway.
	for _, s := range streams {
		if s != control {
			s.str.SetWriteDeadline(pastTime)
		}
	}
	// Finish the data streams first, each once its Send (if any) has
	// given up or finished, so the peer knows when it has read all.
	for _, s := range streams {
		if s == control {
			continue
		}
		select {
		case s.sendMu <- struct{}{}:
			if s.broken == nil {
				s.str.Close()
			}
			<-s.sendMu
		case <-lingerOver:
		}
	}
	if control != nil && control.wrote.Load() {
		select {
		case control.sendMu <- struct{}{}:
			if control.broken == nil {
				control.str.Close() // FIN: "nothing more from this side"
			}
			<-control.sendMu
			select {
			case <-c.peerFinished:
			case <-c.qc.Context().Done():
			case <-lingerOver:
			}
		case <-lingerOver:
		}
	}
	c.qc.CloseWithError(quicErrNone, "")
	c.cancel()
}
