package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// maxChannels bounds the session's channel tables: the daemon's streams
// towards this agent plus this agent's own, both bounded by the transports'
// stream limits (1,000 each by default).
const maxChannels = 4096

// maxEarly bounds the DATA messages kept while waiting for ACCEPT.
const maxEarly = 256

// closeAckGrace is how much longer than the protocol's 5 s a Close waits
// before giving up on the session's own timer.
const closeAckGrace = time.Second

var (
	errKeepalive = errors.New("client: daemon did not answer PING (session timed out)")
	errNoAck     = errors.New("client: CLOSE not acknowledged within 5 s")
	// errUnresponsive ends a session whose daemon did not answer PING
	// while requests waited (checkBusy).
	errUnresponsive = errors.New("client: daemon did not answer PING while requests waited: taken for dead")
)

// session is one connection and its established m2md session. The reader
// goroutine owns receiving and dispatching; the timer goroutine runs the
// keepalive and the CLOSE deadline; any goroutine may send.
type session struct {
	c    *Client
	conn transport.Conn
	info SessionInfo
	log  zerolog.Logger

	mode           frame.Security
	send, recv     *negotiate.Sealer
	maxPayload     int
	encLim, decLim frame.Limits

	// ctx ends when the session ends: it bounds every Send and Receive.
	ctx    context.Context
	cancel context.CancelFunc

	// ctrlMu guards the state machine and orders control messages: once
	// CLOSE is sent nothing else may follow it.
	ctrlMu     sync.Mutex
	m          *negotiate.Machine
	closeCause error // why this side sent CLOSE
	// peerClosed is the daemon's CLOSE, once acknowledged: the session
	// reads the replies still on their way and ends with it when the
	// connection does (handleControl).
	peerClosed error
	poke       chan struct{}
	// closing is set once CLOSE was sent or the session ended: DATA stops.
	closing atomic.Bool

	chMu  sync.Mutex
	chans map[transport.ChannelID]*channel

	// early holds DATA that overtook ACCEPT, for the reader to handle first.
	early   []transport.Message
	corked  int // messages the reader has handled inside its Cork (readLoop's own)
	started atomic.Bool

	mu         sync.Mutex
	calls      map[uint64]*call
	deliveries map[uint64]*delivery
	ended      bool
	cause      error
	acked      bool // this side's CLOSE was acknowledged
	done       chan struct{}

	wg sync.WaitGroup // reader and timer

	// born is the origin of lastRecv and probeSent: nanoseconds on the
	// monotonic clock since the session began. lastRecv is when the reader
	// last received a message, probeSent when checkBusy PINGed (0: no
	// probe outstanding); owned by the timer goroutine besides lastRecv.
	born      time.Time
	lastRecv  atomic.Int64
	probeSent int64
}

// channel is one channel's send side: sealing and writing a frame happen
// under mu, so sequence numbers reach the wire in order.
type channel struct {
	mu sync.Mutex
}

// dial opens a connection to the daemon.
func (c *Client) dial(ctx context.Context) (transport.Conn, error) {
	if c.dialer != nil {
		return c.dialer(ctx)
	}
	t := c.cfg.targets[int(c.nextTarget.Load())%len(c.cfg.targets)]
	if t.scheme == "quic" {
		return transport.DialQUIC(ctx, t.addr, c.cfg.tls, c.cfg.Transport)
	}
	return transport.DialWS(ctx, t.addr, c.cfg.tls, c.cfg.Transport)
}

// rotate makes the next dial go to the next daemon URL (a cluster's next
// node); with one URL it changes nothing.
func (c *Client) rotate() {
	if len(c.cfg.targets) > 1 {
		c.nextTarget.Add(1)
	}
}

// connect dials and runs the handshake with the current daemon URL; a
// failure moves on to the next URL. The session is not started.
func (c *Client) connect(ctx context.Context) (*session, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		c.rotate()
		return nil, err
	}
	s, err := c.handshake(ctx, conn)
	if err != nil {
		conn.Close()
		c.rotate()
		return nil, err
	}
	return s, nil
}

// handshake sends HELLO and waits (at most negotiate.HelloTimeout) for
// ACCEPT or REJECT.
func (c *Client) handshake(ctx context.Context, conn transport.Conn) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, negotiate.HelloTimeout)
	defer cancel()
	m, hs, err := c.sendHello(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer hs.Close()
	msg, early, err := awaitAccept(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer msg.Release()
	s, err := c.accept(conn, m, hs, msg)
	if err != nil {
		for i := range early {
			early[i].Release()
		}
		return nil, err
	}
	s.early = early
	return s, nil
}

// sendHello sends this agent's HELLO and returns the state machine and
// the handshake waiting for ACCEPT.
func (c *Client) sendHello(ctx context.Context, conn transport.Conn) (*negotiate.Machine, *negotiate.ClientHandshake, error) {
	now := time.Now()
	m := negotiate.NewMachine(negotiate.RoleClient, now)
	hs, err := negotiate.NewHello(c.cfg.helloConfig(), now)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %w", err)
	}
	// DATA that overtakes ACCEPT (see awaitAccept) may be as large as this
	// agent offered to accept; the negotiated limit replaces this after
	// ACCEPT.
	if c.cfg.MaxPayload > 0 {
		conn.SetReadLimit(int64(c.cfg.MaxPayload) + 512)
	} else {
		conn.SetReadLimit(transport.MaxReadLimit)
	}
	if err := conn.Send(ctx, transport.ControlChannel, hs.Message()); err != nil {
		hs.Close()
		return nil, nil, fmt.Errorf("client: send HELLO: %w", err)
	}
	if err := m.HelloSent(now); err != nil {
		hs.Close()
		return nil, nil, fmt.Errorf("client: %w", err)
	}
	return m, hs, nil
}

// awaitAccept returns the daemon's answer to HELLO. Over QUIC, DATA the
// daemon sends right after ACCEPT (a request routed to this agent the
// moment it registered) travels on another stream and may overtake it:
// such messages (at most maxEarly) are returned too, to be handled once
// the session exists.
func awaitAccept(ctx context.Context, conn transport.Conn) (transport.Message, []transport.Message, error) {
	var early []transport.Message
	fail := func(err error) (transport.Message, []transport.Message, error) {
		for i := range early {
			early[i].Release()
		}
		return transport.Message{}, nil, err
	}
	for {
		msg, err := conn.Receive(ctx)
		if err != nil {
			return fail(fmt.Errorf("client: waiting for ACCEPT: %w", err))
		}
		if msg.Channel == transport.ControlChannel {
			return msg, early, nil
		}
		if k, _ := negotiate.MessageKind(msg.Data); k != negotiate.KindData || len(early) == maxEarly {
			msg.Release()
			return fail(fmt.Errorf("client: %w: message on channel %d before ACCEPT", negotiate.ErrUnexpectedMessage, msg.Channel))
		}
		early = append(early, msg)
	}
}

// accept completes the handshake with the daemon's answer and builds the
// session.
func (c *Client) accept(conn transport.Conn, m *negotiate.Machine, hs *negotiate.ClientHandshake, msg transport.Message) (*session, error) {
	cm, err := negotiate.ParseControl(msg.Data)
	if err != nil {
		return nil, fmt.Errorf("client: %w: %w", negotiate.ErrBadAccept, err)
	}
	if _, err := m.Received(time.Now(), negotiate.KindControl, cm.Type); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	ns, err := hs.Accept(msg.Data)
	if err != nil {
		return nil, fmt.Errorf("client: handshake: %w", err)
	}
	defer ns.Wipe() // the Sealers below hold their own copies
	established := time.Now()
	if err := m.Established(ns.Params, established); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}

	s := &session{
		c:          c,
		conn:       conn,
		m:          m,
		mode:       ns.Params.SecurityMode,
		maxPayload: ns.Params.MaxPayload,
		poke:       make(chan struct{}, 1),
		chans:      make(map[transport.ChannelID]*channel),
		calls:      make(map[uint64]*call),
		deliveries: make(map[uint64]*delivery),
		done:       make(chan struct{}),
		info: SessionInfo{
			ID:          ns.ID,
			AgentID:     ns.AgentID,
			Transport:   conn.Transport(),
			RemoteAddr:  conn.RemoteAddr(),
			Params:      ns.Params,
			Established: established,
		},
	}
	if ns.Peer != nil {
		s.info.Daemon = ns.Peer.AgentID
	}
	if s.send, s.recv, err = ns.Sealers(maxChannels); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	// A frame this side encodes must still fit max_payload once protected.
	s.encLim = frame.Limits{MaxMessage: s.maxPayload - s.send.Overhead(), Quality: c.cfg.CompressionQuality, CompressFrom: c.cfg.CompressFrom}
	s.decLim = frame.Limits{MaxMessage: s.maxPayload}
	conn.SetReadLimit(int64(s.maxPayload) + 512)
	if ns.Params.Has(negotiate.FeatureSharedStream) {
		transport.ShareDataChannel(conn)
	}
	s.log = c.log.With().Str("session", ns.ID).Str("transport", s.info.Transport).Logger()
	s.born = time.Now()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// start runs the session's goroutines.
func (s *session) start() {
	s.started.Store(true)
	s.wg.Add(2)
	go s.readLoop()
	go s.timerLoop()
	s.log.Info().Str("daemon", s.info.Daemon).Str("mode", s.mode.String()).
		Int("max_payload", s.maxPayload).Msg("session established")
}

// isEnded reports whether the session is over.
func (s *session) isEnded() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// endCause returns why the session ended.
func (s *session) endCause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

// lostError is what requests in flight get when the session ends.
func lostError(cause error) error {
	if errors.Is(cause, ErrClosed) {
		return cause
	}
	return fmt.Errorf("%w: %w", ErrConnectionLost, cause)
}

// sendErr is what a send gets once the session is closing or over.
func (s *session) sendErr() error {
	return lostError(s.causeOr(negotiate.ErrClosed))
}

// causeOr is why the session is ending: its recorded cause, else the cause
// of the CLOSE this side sent, else def.
func (s *session) causeOr(def error) error {
	s.mu.Lock()
	cause := s.cause
	s.mu.Unlock()
	if cause == nil {
		s.ctrlMu.Lock()
		cause = s.closeCause
		s.ctrlMu.Unlock()
	}
	if cause == nil {
		cause = def
	}
	return cause
}

// end finishes the session: the connection is closed, requests in flight
// fail, handlers are cancelled. It is idempotent and must not be called
// with ctrlMu held.
func (s *session) end(cause error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.cause = cause
	calls, deliveries := s.calls, s.deliveries
	s.calls, s.deliveries = nil, nil
	s.mu.Unlock()

	s.closing.Store(true)
	s.cancel()
	if !s.started.Load() {
		for i := range s.early {
			s.early[i].Release()
		}
		s.early = nil
	}
	s.ctrlMu.Lock()
	s.m.Disconnected()
	s.ctrlMu.Unlock()

	lost := lostError(cause)
	for _, cl := range calls {
		cl.fail(lost)
	}
	for _, d := range deliveries {
		d.cancel(lost)
	}
	if errors.Is(cause, errUnresponsive) {
		// The daemon is taken for dead: a closing handshake would wait
		// (up to the transport's CloseTimeout) for an answer that will not
		// come, and the next daemon URL should not wait for it.
		s.conn.Abort()
	} else {
		s.conn.Close()
	}
	s.log.Info().Err(cause).Msg("session ended")
	close(s.done)
}

// shutdown sends CLOSE with reason and waits for the acknowledgement (at
// most negotiate.CloseTimeout), then ends the session and waits for its
// goroutines. cause is what requests still in flight get.
func (s *session) shutdown(reason negotiate.CloseReason, cause error) error {
	if s.sendClose(reason, cause) {
		t := time.NewTimer(negotiate.CloseTimeout + closeAckGrace)
		select {
		case <-s.done:
		case <-t.C:
		}
		t.Stop()
	}
	s.end(cause)
	s.wg.Wait()
	s.mu.Lock()
	acked := s.acked
	s.mu.Unlock()
	if !acked && s.closeCauseIs(cause) {
		return errNoAck
	}
	return nil
}

// closeCauseIs reports whether this side's CLOSE was sent with cause (as
// opposed to the session having ended some other way first).
func (s *session) closeCauseIs(cause error) bool {
	s.ctrlMu.Lock()
	defer s.ctrlMu.Unlock()
	return s.closeCause == cause
}

// sendClose sends CLOSE if the session is established, and reports whether
// it did. The acknowledgement (or the 5 s timer) ends the session.
func (s *session) sendClose(reason negotiate.CloseReason, cause error) bool {
	s.ctrlMu.Lock()
	defer s.ctrlMu.Unlock()
	if s.m.CanSend(negotiate.KindControl, negotiate.TypeClose) != nil {
		return false
	}
	now := time.Now()
	// No more DATA from here on, so flip before the CLOSE is on the wire.
	s.closing.Store(true)
	if err := s.sendControlLocked(negotiate.AppendClose(nil, s.info.ID, now, reason, "")); err != nil {
		return false
	}
	if err := s.m.CloseSent(reason, now); err != nil {
		return false
	}
	s.closeCause = cause
	s.pokeTimer()
	return true
}

// protocolError answers a daemon that broke the protocol with CLOSE ERROR
// (§2, §7); the session then ends with the acknowledgement or after 5 s.
func (s *session) protocolError(err error) {
	s.log.Warn().Err(err).Msg("protocol violation by the daemon, closing")
	cause := fmt.Errorf("client: protocol violation by the daemon: %w", err)
	if !s.sendClose(negotiate.ReasonError, cause) {
		s.end(cause)
	}
}

func (s *session) pokeTimer() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// sendControlLocked sends a control message; ctrlMu is held. The send is
// bounded so that a stalled connection cannot hold the state machine (and
// Close) for longer than the protocol's CLOSE timeout.
func (s *session) sendControlLocked(msg []byte) error {
	ctx, cancel := context.WithTimeout(s.ctx, negotiate.CloseTimeout)
	defer cancel()
	return s.conn.Send(ctx, transport.ControlChannel, msg)
}

// timerLoop runs the machine's timers: PING after silence, CLOSE TIMEOUT
// after missed PONGs or the session timeout, giving up on a CLOSE that is
// not acknowledged. It wakes at the machine's deadline; waking early (the
// deadline moved on because something arrived) costs one Tick.
func (s *session) timerLoop() {
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.ctrlMu.Lock()
		now := time.Now()
		act := s.m.Tick(now)
		var sendErr error
		switch act {
		case negotiate.ActionPing:
			sendErr = s.sendControlLocked(negotiate.AppendPing(nil, s.info.ID, now))
		case negotiate.ActionClose:
			// The machine is Closing with reason TIMEOUT.
			s.closing.Store(true)
			s.closeCause = errKeepalive
			sendErr = s.sendControlLocked(negotiate.AppendClose(nil, s.info.ID, now, s.m.CloseReason(), "no answer to PING"))
		}
		deadline := s.m.Deadline()
		s.ctrlMu.Unlock()

		switch {
		case act == negotiate.ActionDisconnect:
			s.end(s.causeOr(errKeepalive))
			return
		case sendErr != nil:
			s.end(sendErr)
			return
		case act == negotiate.ActionPing:
			s.log.Debug().Msg("silence: PING sent")
		case act == negotiate.ActionClose:
			s.log.Warn().Msg("daemon did not answer PING: CLOSE TIMEOUT sent")
		}

		wait := time.Hour
		if !deadline.IsZero() {
			wait = max(time.Until(deadline), time.Millisecond)
		}
		if s.waiting() {
			if err := s.checkBusy(); err != nil {
				s.end(err)
				return
			}
			wait = min(wait, s.busyPeriod())
		} else {
			s.probeSent = 0
		}
		t.Reset(wait)
		select {
		case <-s.ctx.Done():
			return
		case <-s.poke:
		case <-t.C:
		}
	}
}

// waiting reports whether requests of this session wait for replies.
func (s *session) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls) > 0
}

// heard records that a message arrived.
func (s *session) heard() { s.lastRecv.Store(int64(time.Since(s.born))) }

// busyPeriod is how often checkBusy runs while requests wait.
func (s *session) busyPeriod() time.Duration {
	return min(s.c.cfg.BusyPingAfter, s.c.cfg.BusyPongTimeout) / 4
}

// checkBusy is the client's side of docs/protocol.md §3.4, "Sessions
// that hold requests": while requests wait, a daemon silent for
// BusyPingAfter is PINGed, and one from which nothing arrives within
// BusyPongTimeout of that PING is taken for dead (the error returned):
// the session ends, its requests fail at once, and the client moves on to
// its next daemon URL instead of waiting out the protocol's 90 s keepalive.
// Run by the timer goroutine only.
func (s *session) checkBusy() error {
	now := int64(time.Since(s.born))
	last := s.lastRecv.Load()
	if s.probeSent != 0 && last >= s.probeSent {
		s.probeSent = 0
	}
	cfg := &s.c.cfg.Options
	switch {
	case s.probeSent == 0 && now-last >= int64(cfg.BusyPingAfter):
		s.ctrlMu.Lock()
		var err error
		if s.m.CanSend(negotiate.KindControl, negotiate.TypePing) == nil {
			err = s.sendControlLocked(negotiate.AppendPing(nil, s.info.ID, time.Now()))
		}
		s.ctrlMu.Unlock()
		if err != nil {
			return err
		}
		s.probeSent = now
	case s.probeSent != 0 && now-s.probeSent >= int64(cfg.BusyPongTimeout):
		s.log.Warn().Dur("pong_timeout", cfg.BusyPongTimeout).Msg("daemon did not answer PING while requests waited: session given up")
		return errUnresponsive
	}
	return nil
}

// channel returns the send state of channel id.
func (s *session) channel(id transport.ChannelID) (*channel, error) {
	s.chMu.Lock()
	defer s.chMu.Unlock()
	if ch, ok := s.chans[id]; ok {
		return ch, nil
	}
	if len(s.chans) >= maxChannels {
		return nil, fmt.Errorf("%w: limit %d", negotiate.ErrTooManyChannels, maxChannels)
	}
	ch := &channel{}
	s.chans[id] = ch
	return ch, nil
}

// addCall registers a request waiting for replies.
func (s *session) addCall(cl *call) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return lostError(s.cause)
	}
	s.calls[cl.id] = cl
	if len(s.calls) == 1 {
		s.pokeTimer() // the daemon is now checked harder (checkBusy)
	}
	return nil
}

// removeCall forgets a request whose send failed.
func (s *session) removeCall(cl *call) {
	s.mu.Lock()
	if s.calls[cl.id] == cl {
		delete(s.calls, cl.id)
	}
	s.mu.Unlock()
}
