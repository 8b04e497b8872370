package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// session is one established agent session.
type session struct {
	srv       *Server
	conn      transport.Conn
	transport string
	neg       *negotiate.Session
	agent     string
	rs        *router.Session[peer]
	log       zerolog.Logger
	m         *sessionMetrics
	// delta: the session negotiated feature delta (docs/protocol.md §4.3):
	// it may send and receive request frames with the extension block.
	delta bool
	// marks are its per-model series as a provider (reqmetrics.go).
	marks atomic.Pointer[providerMarks]
	// weakSelf is made on the first reply this session sends to another
	// node (ref, clusterpeers.go).
	weakSelf atomic.Pointer[weak.Pointer[session]]

	// recv opens the agent's frames, send seals the frames to it.
	recv, send *negotiate.Sealer

	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex // guards machine
	machine *negotiate.Machine

	queue     *sendQueue   // DATA and errors, bounded
	ctrl      chan outMsg  // control messages, written first
	slowSince atomic.Int64 // unix nanos the queue was first found full; 0 if not
	closing   atomic.Bool  // CLOSE sent or received, or teardown began
	// closeWritten: the writer has sent CLOSE (or the acknowledgement of
	// one); DATA still queued is dropped, never sent after it.
	closeWritten atomic.Bool
	// peerClosed: the agent sent CLOSE and it was acknowledged. Over QUIC
	// its last replies may still come after it (docs/protocol.md §3.5).
	peerClosed  atomic.Bool
	closeReason atomic.Value // negotiate.CloseReason of the session's end
	// The writer (writer.go) runs on demand: writing is set while one runs,
	// writers counts it for teardown, wstopped (under wmu) keeps new ones
	// from starting once teardown began. batch and the rest of the
	// writer's state belong to the running writer.
	writing   atomic.Bool
	runWriter func() // runs drain on the daemon's writer pool, bound once: a go statement on a closure allocates
	wmu       sync.Mutex
	wstopped  bool
	writers   sync.WaitGroup
	batch     []outMsg
	// batchWrote: the writer's pass has handed the transport a message
	// (owned by the running writer).
	batchWrote bool
	// closeInBatch: the pass's batch holds this side's CLOSE (owned by the
	// running writer).
	closeInBatch bool
	// outFrames and outBytes count the pass's DATA frames written, by
	// format, until uncork adds them to the shared counters: one atomic
	// add per batch instead of two per frame (owned by the running
	// writer).
	outFrames, outBytes [numFormats]int
	timer               *time.Timer // the state machine's deadline: timerFired
	tickDue             atomic.Bool
	// stall fires when a DATA write has been blocked for
	// SlowConsumerGrace (writeStalled); only the writer arms it
	// (watchWrite). stallArmed says a write is being watched; stallMark
	// is the connection's progress (transport.WriteProgress) when the
	// watch began or was last renewed, so that a peer that goes on taking
	// bytes, however slowly, is not taken for one that stopped.
	stall      *time.Timer
	stallArmed atomic.Bool
	stallMark  atomic.Uint64
	progress   transport.WriteProgress // nil if the connection does not report it
	received   transport.ReadProgress  // nil if the connection does not report it
	rates      sessionRates            // touched by the reader only
	// lastRecv is when the last message arrived (Server.mono), probeSent
	// when the liveness check PINGed the session, 0 if no probe is
	// outstanding (liveness.go).
	lastRecv, probeSent atomic.Int64
	// probeMark and probeReadMark are the connection's progress
	// (bytesWritten, bytesRead) when the probe was sent or last renewed.
	probeMark, probeReadMark atomic.Uint64
	// lostReason is why the session's deliveries are failed over
	// (failover.go) when it ends: a failoverReason; unset means its agent
	// disconnected.
	lostReason atomic.Value
	// releaseAddr gives back the source address's connection slot
	// (admission); serveConn calls it too, and only the first call counts.
	releaseAddr func()
}

func (se *session) mode() string { return se.neg.Params.SecurityMode.String() }

// serveConn runs one connection from HELLO to teardown.
func (s *Server) serveConn(conn transport.Conn) {
	defer conn.Close()
	// Counted under s.mu with the draining check, so that no connection is
	// added once shutdown has begun waiting for them (WaitGroup.Add may not
	// race Wait).
	s.mu.Lock()
	if s.draining.Load() {
		s.mu.Unlock()
		return
	}
	s.conns.Add(1)
	s.mu.Unlock()
	defer s.conns.Done()
	tname := conn.Transport()
	log := s.log.With().Str("transport", tname).Str("remote", conn.RemoteAddr().String()).Logger()
	start := time.Now()
	release, limit := func() {}, ""
	if !transport.IsInProcess(conn.RemoteAddr()) { // Attach: the daemon's own
		release, limit = s.adm.admit(conn.RemoteAddr(), start)
	}
	if limit != "" {
		s.limitHit(limit, conn.RemoteAddr(), "")
		s.metrics.handshakeFailures.WithLabelValues(tname, reasonLabel(negotiate.RejectRateLimited)).Inc()
		s.rejectConn(conn, negotiate.RejectRateLimited, "too many sessions from your address ("+limit+")")
		return
	}
	defer release()
	hctx, cancel := context.WithTimeout(s.handshakes, s.cfg.HelloTimeout)
	msg, err := conn.Receive(hctx)
	cancel()
	if err != nil {
		reason := "no_hello"
		switch {
		case s.draining.Load():
			reason = "shutdown"
		case errors.Is(err, transport.ErrMessageTooLarge):
			// The connection is open; the client learns why.
			reason = reasonTooLarge
			s.sendHandshakeReply(conn, negotiate.AppendReject(nil, time.Now(), negotiate.RejectUnknown,
				fmt.Sprintf("HELLO exceeds %d bytes", transport.DefaultReadLimit)))
		}
		s.metrics.handshakeFailures.WithLabelValues(tname, reason).Inc()
		log.Debug().Err(err).Msg("no HELLO")
		return
	}
	if s.draining.Load() {
		msg.Release()
		s.metrics.handshakeFailures.WithLabelValues(tname, "shutdown").Inc()
		return
	}
	if msg.Channel != transport.ControlChannel {
		msg.Release()
		s.metrics.handshakeFailures.WithLabelValues(tname, "protocol").Inc()
		log.Debug().Msg("first message not on the control channel")
		return
	}
	slot := s.takeSlot()
	if slot {
		defer s.freeSlot() // held until the session has ended (se.run returns)
	}
	neg, reply, err := s.neg.Accept(time.Now(), msg.Data, !slot)
	msg.Release()
	if err != nil {
		reason := negotiate.RejectUnknown
		var rej *negotiate.RejectError
		if errors.As(err, &rej) {
			reason = rej.Code
		}
		s.metrics.handshakeFailures.WithLabelValues(tname, reasonLabel(reason)).Inc()
		log.Info().Str("reject", string(reason)).Err(err).Msg("handshake rejected")
		s.sendHandshakeReply(conn, reply)
		return
	}
	// Register before ACCEPT leaves: once the agent has its ACCEPT, other
	// agents may address it at once. Frames routed to it meanwhile wait in
	// its queue; the writer starts only after ACCEPT is written.
	se, err := s.newSession(conn, neg, log)
	if errors.Is(err, router.ErrAgentIDTaken) {
		s.metrics.handshakeFailures.WithLabelValues(tname, reasonLabel(negotiate.RejectSecurityPolicy)).Inc()
		log.Info().Str("agent", neg.AgentID).Msg("handshake rejected: open mode, agent id held by a session from another address")
		neg.Wipe()
		s.sendHandshakeReply(conn, negotiate.AppendReject(nil, time.Now(), negotiate.RejectSecurityPolicy,
			"agent id "+neg.AgentID+" is in use by a session from another address (a daemon without org secrets lets only the same address replace a session)"))
		return
	}
	if err != nil {
		s.metrics.handshakeFailures.WithLabelValues(tname, "internal").Inc()
		log.Error().Err(err).Msg("session setup failed")
		neg.Wipe()
		return
	}
	// The address's connection slot is given back before the session leaves
	// the count, so that a reconnection the count shows room for is not
	// refused for its address.
	se.releaseAddr = release
	s.pending.established(conn.RemoteAddr())
	if err := s.sendHandshakeReply(conn, reply); err != nil {
		s.metrics.handshakeFailures.WithLabelValues(tname, "send_failed").Inc()
	}
	s.metrics.handshakeSeconds.WithLabelValues(tname).Observe(time.Since(start).Seconds())
	if s.draining.Load() {
		// Registered after shutdown collected the sessions to close (it sets
		// draining first, so this check cannot miss it): close it ourselves.
		se.closeAfterQueued(negotiate.ReasonServerShutdown, "daemon shutting down")
	}
	se.run()
}

// rejectConn answers a connection refused before its handshake: it waits
// briefly for the HELLO so the client learns why, then sends REJECT.
func (s *Server) rejectConn(conn transport.Conn, code negotiate.RejectCode, why string) {
	ctx, cancel := context.WithTimeout(s.baseCtx, time.Second)
	defer cancel()
	if msg, err := conn.Receive(ctx); err == nil {
		msg.Release()
		_ = conn.Send(ctx, transport.ControlChannel, negotiate.AppendReject(nil, time.Now(), code, why))
	}
}

func (s *Server) sendHandshakeReply(conn transport.Conn, reply []byte) error {
	ctx, cancel := context.WithTimeout(s.baseCtx, s.cfg.CloseTimeout)
	defer cancel()
	return conn.Send(ctx, transport.ControlChannel, reply)
}

func (s *Server) newSession(conn transport.Conn, neg *negotiate.Session, log zerolog.Logger) (*session, error) {
	p := neg.Params
	se := &session{
		srv:       s,
		conn:      conn,
		transport: conn.Transport(),
		neg:       neg,
		agent:     neg.AgentID,
		delta:     p.Has(negotiate.FeatureDelta),
		m:         s.metrics.forTransport(conn.Transport()),
		machine:   negotiate.NewMachine(negotiate.RoleServer, time.Now()),
		queue:     newSendQueue(s.cfg.SendQueueLen, max(s.cfg.MaxPayload*2, 4<<20)),
		ctrl:      make(chan outMsg, 8),
		rates:     newSessionRates(s.cfg.MessagesPerMinute, s.cfg.BytesPerSecond, p.MaxPayload),
	}
	se.lastRecv.Store(s.mono(time.Now()))
	se.log = log.With().Str("session", neg.ID).Str("agent", neg.AgentID).Logger()
	if k := time.Duration(s.cfg.timeScale); k > 1 {
		p.SessionTimeout, p.PingInterval, p.PongTimeout = p.SessionTimeout/k, p.PingInterval/k, p.PongTimeout/k
	}
	if err := se.machine.Established(p, time.Now()); err != nil {
		return nil, err
	}
	se.runWriter = func() { s.pool.run(se) }
	se.stall = time.AfterFunc(time.Hour, se.writeStalled)
	se.stall.Stop()
	se.progress, _ = conn.(transport.WriteProgress)
	se.received, _ = conn.(transport.ReadProgress)
	se.timer = time.AfterFunc(time.Hour, se.timerFired)
	se.timer.Stop() // armed once the session is registered
	var err error
	if se.send, se.recv, err = neg.Sealers(s.sealerChannels()); err != nil {
		return nil, err
	}
	conn.SetReadLimit(int64(p.MaxPayload) + 512)
	if p.Has(negotiate.FeatureSharedStream) {
		transport.ShareDataChannel(conn)
	}
	se.ctx, se.cancel = context.WithCancel(s.baseCtx)
	var models []string
	if neg.Peer != nil {
		models = neg.Peer.Models
	}
	var rs, replaced *router.Session[peer]
	if s.cluster != nil {
		rs, replaced, err = s.cluster.register(se, models, s.mayReplace(conn))
	} else {
		rs, replaced, err = s.router.RegisterIf(neg.Org, neg.AgentID, models, se, s.mayReplace(conn))
	}
	if err != nil {
		se.cancel()
		return nil, err
	}
	se.rs = rs
	s.reqm.marksOf(se, rs) // its series exist, at zero, from now
	se.rearm()
	// A replaced proxy of a remote agent (clusterpeers.go) is closed by
	// its own node when our announcement reaches it.
	if replaced != nil {
		if old, local := replaced.Value().(*session); local {
			old.log.Info().Str("by", neg.ID).Msg("session replaced by a newer one for the same agent id")
			old.initiateClose(negotiate.ReasonReplaced, "a newer session claimed agent id "+neg.AgentID)
		}
	}
	s.mu.Lock()
	s.sessions[se] = struct{}{}
	s.mu.Unlock()
	s.metrics.sessions.WithLabelValues(se.transport).Inc()
	s.metrics.sessionsTotal.WithLabelValues(se.transport).Inc()
	se.log.Info().Str("mode", se.mode()).Strs("models", models).Int("max_payload", p.MaxPayload).
		Bool("authenticated", p.Authenticated).Msg("session established")
	return se, nil
}

// mayReplace is the policy for a new session claiming an agent id that a
// live session holds (DERP's duplicate-connection policy, made explicit).
// With org secrets the newcomer proved it holds the agent key, so the
// newest session wins: that is how an agent reconnects after its old
// connection died unnoticed. Without them anybody can claim any id, so the
// newest wins only from the holder's own source address (the same host
// reconnecting); from elsewhere the newcomer is refused.
func (s *Server) mayReplace(conn transport.Conn) func(*router.Session[peer]) bool {
	if len(s.cfg.OrgSecrets) > 0 || transport.IsInProcess(conn.RemoteAddr()) {
		return nil // the newest wins; a session of the daemon's own process (Attach) always does
	}
	ip := remoteIP(conn.RemoteAddr())
	return func(holder *router.Session[peer]) bool {
		// A holder on another cluster node (a proxy, no connection here)
		// is from an address this node cannot compare: refused alike; so
		// is one of the daemon's own process (Attach), whose address has
		// no IP to match.
		h, local := holder.Value().(*session)
		return local && remoteIP(h.conn.RemoteAddr()) == ip
	}
}

// run serves the session until it ends and then tears it down.
func (se *session) run() {
	se.readLoop()

	// Teardown. The reader has stopped routing this session's messages, so
	// its orphans can be answered now without overtaking a reply (router doc).
	se.closing.Store(true)
	orphans := se.srv.router.Remove(se.rs)
	if se.srv.cluster != nil {
		se.srv.cluster.unregister(se)
	}
	se.srv.endOrphans(orphans, se.agent, se.failoverReason(), "disconnected")
	se.cancel()
	se.conn.Close()
	se.stopWriter()
	se.drainQueues("receiver_gone")
	se.releaseAddr()
	se.srv.mu.Lock()
	delete(se.srv.sessions, se)
	se.srv.mu.Unlock()
	se.srv.metrics.sessions.WithLabelValues(se.transport).Dec()
	reason, _ := se.closeReason.Load().(negotiate.CloseReason)
	label := reasonLabel(reason)
	if reason == "" {
		label = closeDisconnected
	}
	se.srv.metrics.sessionsClosed.WithLabelValues(label).Inc()
	se.log.Info().Str("reason", label).Int("orphans", len(orphans)).Msg("session ended")
	se.neg.Wipe()
}

func (se *session) readLoop() {
	for {
		msg, err := se.conn.Receive(se.ctx)
		if err != nil {
			if !errors.Is(err, transport.ErrClosed) && se.ctx.Err() == nil {
				se.receiveFailed(err)
			}
			return
		}
		kind, err := negotiate.MessageKind(msg.Data)
		if err != nil {
			msg.Release()
			se.protocolError("unknown message kind")
			continue
		}
		now := time.Now() // one clock reading per message: rates, state machine, routing time, liveness
		se.lastRecv.Store(se.srv.mono(now))
		if limit := se.rates.allow(now, kind, len(msg.Data)); limit != "" {
			se.srv.limitHit(limit, se.conn.RemoteAddr(), se.neg.ID)
			if kind == negotiate.KindData {
				if dh, _, err := negotiate.ParseData(msg.Data); err == nil {
					// The error replies are rate limited too: a sender far
					// over its rate would otherwise get one per message.
					tell := se.rates.tell(time.Now())
					se.refuseTelling(msg.Channel, &dh, negotiate.CodeRateLimited, "session exceeds its "+limit, tell)
					if !tell && !dh.IsReply() {
						// A request must end: one refused without an
						// answer would leave its requester waiting. A
						// sender that keeps flooding after its errors is
						// closed instead, which ends all its requests.
						se.closeAfterQueued(negotiate.ReasonError, "session kept sending over its "+limitFlag(limit)+" after rate_limited errors")
					}
				}
			}
			msg.Release()
			continue
		}
		if kind == negotiate.KindCancel {
			se.handleCancel(msg)
			continue
		}
		if kind == negotiate.KindData {
			if msg.Channel == transport.ControlChannel && se.transport == "quic" {
				// QUIC's stream 0 carries control messages only
				// (docs/protocol.md §1); WebSocket has no other channel.
				msg.Release()
				se.protocolError("DATA on the control stream")
				continue
			}
			se.mu.Lock()
			_, err := se.machine.Received(now, negotiate.KindData, "")
			se.mu.Unlock()
			if err != nil {
				if errors.Is(err, negotiate.ErrClosed) && se.lateReply(msg, now) {
					continue
				}
				msg.Release()
				if errors.Is(err, negotiate.ErrAfterClose) {
					se.srv.metrics.framesRefused.WithLabelValues("after_close").Inc()
					continue
				}
				if errors.Is(err, negotiate.ErrClosed) {
					se.awaitCloseWritten()
					return
				}
				se.protocolError("DATA not allowed now")
				continue
			}
			se.handleData(msg, now)
			continue
		}
		if done := se.handleControl(msg); done {
			return
		}
	}
}

// handleControl processes a CONTROL message; it reports whether the
// session is over.
func (se *session) handleControl(msg transport.Message) bool {
	cm, err := negotiate.ParseControl(msg.Data)
	onControl := msg.Channel == transport.ControlChannel
	msg.Release()
	if err != nil || !onControl {
		se.protocolError("malformed control message")
		return false
	}
	if err := se.neg.CheckControl(cm); err != nil {
		se.protocolError("control message names another session")
		return false
	}
	se.mu.Lock()
	act, err := se.machine.Received(time.Now(), negotiate.KindControl, cm.Type)
	se.mu.Unlock()
	if err != nil {
		if errors.Is(err, negotiate.ErrAfterClose) {
			return false
		}
		if errors.Is(err, negotiate.ErrClosed) {
			se.awaitCloseWritten()
			return true
		}
		se.protocolError("unexpected " + string(cm.Type))
		return false
	}
	switch act {
	case negotiate.ActionPong:
		se.sendControl(negotiate.AppendPong(nil, se.neg.ID, time.Now()), false)
	case negotiate.ActionCloseAck:
		reason := negotiate.ReasonNormal
		if cm.Close != nil && cm.Close.Reason != "" {
			reason = cm.Close.Reason
		}
		se.setReason(reason)
		se.closing.Store(true)
		// The agent is leaving: a request routed to it from now on could
		// only fail (its queue refuses it, its connection is closing), and
		// the agent's own client may already have returned from Close.
		// Another provider takes it, or it gets the error it would get
		// once the agent had gone (base_missing for a delta).
		se.srv.router.Unlink(se.rs)
		if se.transport != "quic" {
			se.sendControl(negotiate.AppendClose(nil, se.neg.ID, time.Now(), reason, "acknowledged"), true)
			// The writer closes the connection after the acknowledgement;
			// keep reading until then so the transport can flush.
			return false
		}
		// Over QUIC the CLOSE can overtake the agent's last replies on
		// their data streams (docs/protocol.md §3.5): they are still taken
		// (lateReply) until the agent, which closes once it has the
		// acknowledgement, has closed the connection, for at most a fifth
		// of CloseTimeout (1 s by default: a reply that lost a packet is
		// sent again within a round trip or two).
		se.peerClosed.Store(true)
		se.sendControl(negotiate.AppendClose(nil, se.neg.ID, time.Now(), reason, "acknowledged"), false)
		time.AfterFunc(se.srv.cfg.CloseTimeout/5, func() { se.conn.Close() })
		return false
	case negotiate.ActionDisconnect:
		return true
	}
	return false
}

// lateReply routes msg, a DATA message that arrived after the agent's
// CLOSE was acknowledged, when it is a reply: over QUIC the CLOSE can
// overtake the replies the agent wrote before it, and its requesters would
// otherwise get agent_gone instead of their answers. Anything else is
// refused as after-close. It takes msg unless it reports false: the
// session is not one that takes late replies.
func (se *session) lateReply(msg transport.Message, now time.Time) bool {
	if !se.peerClosed.Load() {
		return false
	}
	if dh, _, err := negotiate.ParseData(msg.Data); err == nil && dh.IsReply() {
		se.handleData(msg, now)
		return true
	}
	msg.Release()
	se.srv.metrics.framesRefused.WithLabelValues("after_close").Inc()
	return true
}

// receiveFailed ends a session whose connection can deliver no more
// messages although it is open: a message above the read limit, a message
// trickled past MessageTimeout, broken framing. The agent is told why with
// CLOSE ERROR (docs/protocol.md §2) before the connection closes; nothing
// it sends after that is read.
func (se *session) receiveFailed(err error) {
	reason, why := "protocol", "message framing broken"
	switch {
	case errors.Is(err, transport.ErrMessageTooLarge):
		reason = reasonTooLarge
		why = fmt.Sprintf("message exceeds this session's limit (max_payload %d + 512; control messages 65,536 bytes)", se.neg.Params.MaxPayload)
	case errors.Is(err, transport.ErrMessageTimeout):
		reason = reasonMessageTimeout
		why = fmt.Sprintf("a message did not arrive whole within %v of its first byte", se.srv.cfg.MessageTimeout)
	}
	se.srv.metrics.framesRefused.WithLabelValues(reason).Inc()
	se.log.Info().Err(err).Str("refused", reason).Msg("closing: receive failed")
	se.initiateClose(negotiate.ReasonError, why)
	se.awaitCloseWritten()
}

// awaitCloseWritten waits, briefly, until the writer has written the CLOSE
// (or the acknowledgement of the peer's) that is queued: teardown closes
// the connection, and a CLOSE still queued then would be lost. A message
// that arrives after the peer's CLOSE, while the acknowledgement waits in
// the queue, ends the read loop; without this wait the peer's Close saw
// its connection end with no acknowledgement.
func (se *session) awaitCloseWritten() {
	deadline := time.Now().Add(se.srv.cfg.CloseTimeout)
	for !se.closeWritten.Load() && time.Now().Before(deadline) && se.ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
}

// protocolError closes the session with CLOSE ERROR.
func (se *session) protocolError(why string) {
	se.srv.metrics.framesRefused.WithLabelValues("protocol").Inc()
	se.log.Info().Str("why", why).Msg("protocol violation")
	se.initiateClose(negotiate.ReasonError, why)
}

func (se *session) setReason(r negotiate.CloseReason) {
	se.closeReason.CompareAndSwap(nil, r)
}

// initiateClose sends CLOSE with reason; the writer records it, the machine
// waits for the acknowledgement (CloseTimeout), and a backstop closes the
// connection even if the writer is stuck behind a peer that does not read.
// Safe from any goroutine; only the first call acts.
func (se *session) initiateClose(reason negotiate.CloseReason, why string) {
	if !se.closing.CompareAndSwap(false, true) {
		return
	}
	se.setReason(reason)
	msg := negotiate.AppendClose(nil, se.neg.ID, time.Now(), reason, why)
	se.enqueueControl(outMsg{buf: bufFrom(msg), kind: msgControl, closeSent: reason})
	time.AfterFunc(se.srv.cfg.CloseTimeout+time.Second, func() { se.conn.Close() })
}

// closeAfterQueued sends CLOSE with reason behind everything already
// queued for the session, so that replies waiting in its queue still reach
// it first (a graceful shutdown); later messages are refused. Like
// initiateClose, only the first close acts.
//
// Its backstop starts when the CLOSE has been written (uncork), not now: the
// replies ahead of it were accepted and may be megabytes, which a loaded
// machine takes seconds to write, and a backstop counted from here cut
// them off mid-flush. A writer that stops making progress is not left
// waiting: every write is watched by the stall timer (SlowConsumerGrace),
// and the server bounds the whole shutdown.
func (se *session) closeAfterQueued(reason negotiate.CloseReason, why string) {
	if !se.closing.CompareAndSwap(false, true) {
		return
	}
	se.setReason(reason)
	msg := negotiate.AppendClose(nil, se.neg.ID, time.Now(), reason, why)
	se.queue.pushLast(outMsg{buf: bufFrom(msg), kind: msgControl, closeSent: reason})
	se.kick()
}

func bufFrom(b []byte) *[]byte {
	p := bufpool.Get(len(b))
	copy(*p, b)
	return p
}

// sendControl queues a control message (PONG, CLOSE ack); closeAfter makes
// the writer close the connection once it is written.
func (se *session) sendControl(b []byte, closeAfter bool) {
	se.enqueueControl(outMsg{buf: bufFrom(b), kind: msgControl, closeAfter: closeAfter})
}

func (se *session) enqueueControl(m outMsg) {
	select {
	case se.ctrl <- m:
		se.kick()
	default:
		m.free()
		se.srv.metrics.queueDrops.WithLabelValues("control_full").Inc()
	}
}

// enqueue hands a message to the writer without blocking. It fails when the
// session is closing or its queue is full (by count or bytes); the caller
// then tells the message's sender. A queue that stays full for
// SlowConsumerGrace closes the session.
func (se *session) enqueue(m outMsg) bool {
	if se.closing.Load() {
		se.srv.metrics.queueDrops.WithLabelValues("receiver_closing").Inc()
		return false
	}
	if !se.queue.push(m) {
		se.full()
		return false
	}
	se.kick()
	return true
}

func (se *session) full() {
	se.srv.metrics.queueDrops.WithLabelValues(string(negotiate.CodeQueueFull)).Inc()
	now := time.Now().UnixNano()
	if !se.slowSince.CompareAndSwap(0, now) {
		return
	}
	n, bytes := se.queue.stats()
	se.log.Warn().Int("queued", n).Int("queued_bytes", bytes).Msg("send queue full: slow consumer")
	// The writer clears slowSince whenever it takes a batch. If it has not
	// by the end of the grace period, the session is not reading: close it,
	// whether or not anyone tries to send it more meanwhile.
	time.AfterFunc(se.srv.cfg.SlowConsumerGrace, func() {
		if se.slowSince.Load() != now {
			return
		}
		se.log.Warn().Dur("for", se.srv.cfg.SlowConsumerGrace).Msg("closing slow consumer")
		se.srv.metrics.queueDrops.WithLabelValues("slow_consumer_closed").Inc()
		se.initiateClose(negotiate.ReasonError, "slow consumer: send queue full")
		// Its writer is stuck behind a peer that does not read, so the
		// CLOSE cannot go out: end the connection now.
		se.conn.Close()
	})
}

// drainQueues frees what the writer left behind, counting undelivered DATA.
func (se *session) drainQueues(reason string) {
	for _, m := range se.queue.takeAll(nil) {
		if m.kind == msgData {
			se.srv.metrics.queueDrops.WithLabelValues(reason).Inc()
		}
		m.free()
	}
	for {
		select {
		case m := <-se.ctrl:
			m.free()
		default:
			return
		}
	}
}
