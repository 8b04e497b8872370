package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// readLoop receives every message of the session and dispatches it. It only
// verifies, sequence-checks and routes frames; decoding payloads happens in
// the goroutine that wants them (Stream.Recv, the handler's), so one large
// reply never holds up the others.
func (s *session) readLoop() {
	defer s.wg.Done()
	early := s.early
	s.early = nil
	for i := range early {
		s.handleData(early[i])
	}
	for {
		msg, err := s.receive()
		if err != nil {
			if chErr := (*transport.ChannelError)(nil); errors.As(err, &chErr) {
				// A stream reset or broken framing: a protocol violation,
				// except while closing, when the daemon tearing the
				// connection down may reset streams before the
				// acknowledgement on the control stream has been read.
				if !s.closing.Load() {
					s.protocolError(err)
				}
				continue
			}
			if s.ctx.Err() == nil {
				s.ctrlMu.Lock()
				cause := s.peerClosed
				s.ctrlMu.Unlock()
				if cause == nil {
					cause = fmt.Errorf("client: connection: %w", err)
				}
				s.end(cause)
			}
			return
		}
		s.heard()
		kind, err := negotiate.MessageKind(msg.Data)
		switch {
		case err != nil:
			msg.Release()
			s.protocolError(err)
		case kind == negotiate.KindControl:
			s.handleControl(msg)
		case kind == negotiate.KindCancel:
			s.handleCancel(msg)
		default:
			s.handleData(msg)
		}
	}
}

// receive returns the next message for readLoop. What the reader sends
// while dispatching (PONGs, refusals, CLOSE acknowledgements) and what the
// handlers it starts send meanwhile is corked from one message that had to
// be waited for until none is left already received (at most batchMax), so
// those answers leave together; nothing waits for more messages.
func (s *session) receive() (transport.Message, error) {
	if s.corked > 0 {
		msg, err := s.conn.Receive(polled)
		if err == nil {
			if s.corked++; s.corked >= batchMax {
				s.uncork()
			}
			return msg, nil
		}
		s.uncork()
		if !errors.Is(err, context.Canceled) {
			return msg, err
		}
	}
	msg, err := s.conn.Receive(s.ctx)
	if err == nil {
		s.conn.Cork()
		s.corked = 1
	}
	return msg, err
}

func (s *session) uncork() {
	s.corked = 0
	_ = s.conn.Uncork() // a failed write ends the connection, which Receive reports
}

// batchMax bounds how many received messages one reader's Cork spans.
const batchMax = 64

// polled is a context that has ended: Receive with it returns a message
// that has already arrived, or at once the context's error.
var polled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// handleControl acts on PING, PONG and CLOSE; anything else is a protocol
// violation in an established session.
func (s *session) handleControl(msg transport.Message) {
	cm, err := negotiate.ParseControl(msg.Data)
	ch := msg.Channel
	msg.Release()
	if err != nil {
		s.protocolError(err)
		return
	}
	if ch != transport.ControlChannel {
		s.protocolError(fmt.Errorf("%w: %s on data channel %d", negotiate.ErrUnexpectedMessage, cm.Type, ch))
		return
	}
	if err := s.info.check(cm); err != nil {
		s.protocolError(err)
		return
	}

	s.ctrlMu.Lock()
	now := time.Now()
	act, err := s.m.Received(now, negotiate.KindControl, cm.Type)
	if err != nil {
		s.ctrlMu.Unlock()
		if !errors.Is(err, negotiate.ErrAfterClose) && !errors.Is(err, negotiate.ErrClosed) {
			s.protocolError(err)
		}
		return
	}
	switch act {
	case negotiate.ActionPong:
		err = s.sendControlLocked(negotiate.AppendPong(nil, s.info.ID, now))
		s.ctrlMu.Unlock()
		if err != nil {
			s.end(fmt.Errorf("client: send PONG: %w", err))
		}
	case negotiate.ActionCloseAck:
		// The daemon closes: acknowledge with the same reason, then go
		// once the daemon, which has the acknowledgement, has closed the
		// connection. Over QUIC the replies the daemon queued before its
		// CLOSE travel on their own streams and can arrive after it (a
		// graceful shutdown's last replies did, and their requests failed
		// with SERVER_SHUTDOWN): until the connection ends they are read,
		// and the transport delivers what the data streams still carry
		// before it reports the end. A daemon that does not close is
		// given up on after CloseTimeout.
		s.closing.Store(true)
		reason, text := cm.Close.Reason, cm.Close.Message
		cause := &negotiate.CloseError{Reason: reason, Message: text}
		s.peerClosed = cause
		s.sendControlLocked(negotiate.AppendClose(nil, s.info.ID, now, reason, ""))
		s.ctrlMu.Unlock()
		s.log.Info().Str("reason", string(reason)).Str("detail", text).Msg("daemon closed the session")
		time.AfterFunc(negotiate.CloseTimeout, func() { s.end(cause) })
	case negotiate.ActionDisconnect:
		// The acknowledgement of this side's CLOSE.
		cause := s.closeCause
		s.ctrlMu.Unlock()
		s.mu.Lock()
		s.acked = true
		s.mu.Unlock()
		s.end(cause)
	default:
		s.ctrlMu.Unlock()
	}
}

// check verifies that a control message names this session.
func (i *SessionInfo) check(cm *negotiate.ControlMessage) error {
	if cm.SessionID != i.ID {
		return fmt.Errorf("%w: %s for session %q", negotiate.ErrSessionMismatch, cm.Type, cm.SessionID)
	}
	return nil
}

// handleData verifies a DATA message's frame and hands it to the request it
// answers, or to the handler.
func (s *session) handleData(msg transport.Message) {
	hdr, fr, perr := negotiate.ParseData(msg.Data)
	s.ctrlMu.Lock()
	_, err := s.m.Received(time.Now(), negotiate.KindData, "")
	if err != nil && perr == nil && hdr.IsReply() && s.peerClosed != nil && errors.Is(err, negotiate.ErrClosed) {
		// A reply the daemon sent before its CLOSE, overtaken by it
		// (handleControl): its request is still waiting for it.
		err = nil
	}
	s.ctrlMu.Unlock()
	if err != nil {
		msg.Release()
		if !errors.Is(err, negotiate.ErrAfterClose) && !errors.Is(err, negotiate.ErrClosed) {
			s.protocolError(err)
		}
		return
	}
	if err := perr; err != nil {
		msg.Release()
		s.protocolError(err)
		return
	}
	if hdr.IsBatch() && (hdr.IsNotice() || !s.info.Params.Has(negotiate.FeatureBatch)) {
		msg.Release()
		s.protocolError(fmt.Errorf("%w: BATCH in a session without feature batch", negotiate.ErrBadDataHeader))
		return
	}
	if len(hdr.Trace) > 0 && !s.info.Params.Has(negotiate.FeatureTrace) {
		msg.Release()
		s.protocolError(fmt.Errorf("%w: TRACE in a session without feature trace", negotiate.ErrBadDataHeader))
		return
	}
	st := &s.c.stats
	st.framesReceived.Add(1)
	st.wireReceived.Add(uint64(len(msg.Data)))
	plain, ferr := s.open(msg.Channel, msg.Data[:len(msg.Data)-len(fr)], fr)
	if ferr != nil {
		st.badFrames.Add(1)
		s.log.Warn().Err(ferr).Uint64("request_id", hdr.RequestID).Bool("reply", hdr.IsReply()).Msg("frame refused")
	}
	switch {
	case hdr.IsNotice():
		s.handleNotice(hdr, plain, ferr)
		msg.Release()
	case hdr.IsReply():
		s.handleReply(hdr, msg, plain, ferr)
	default:
		s.handleRequest(hdr, msg, plain, ferr)
	}
}

// open verifies or decrypts a received frame in place and checks its
// sequence number (docs/protocol.md §5.3). In mode none only the mode is
// checked: sequence numbers are written but not checked there.
// A sealed TokenNative envelope (docs/protocol.md §4.2) is opened with the
// DATA header hdr as associated data. A frame whose first byte begins no
// form DATA carries is refused (bad_frame), as the daemon refuses it.
func (s *session) open(ch transport.ChannelID, hdr, fr []byte) ([]byte, error) {
	form, err := negotiate.ReadFrameForm(fr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	switch {
	case form == negotiate.FormM2M || form == negotiate.FormCompact:
		plain, err := s.recv.Open(uint32(ch), fr)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
		}
		return plain, nil
	case s.mode == frame.SecurityNone && form == negotiate.FormTokenNative:
		return fr, nil
	case s.mode == frame.SecurityNone:
		return nil, fmt.Errorf("%w: %w: a sealed TokenNative envelope in a session of mode none", ErrBadFrame, negotiate.ErrUnknownFrame)
	case form == negotiate.FormTokenNative || !s.info.Params.Has(negotiate.FeatureTNSealed):
		return nil, fmt.Errorf("%w: unprotected non-M2M frame in a %s session", ErrBadFrame, s.mode)
	}
	tn, err := s.recv.OpenTokenNative(uint32(ch), hdr, fr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	return tn, nil
}

// isM2M reports whether fr starts like an M2M v1 frame (TokenNative frames
// start with their tokenizer byte).
func isM2M(fr []byte) bool {
	return len(fr) >= frame.PrefixLen && string(fr[:frame.PrefixLen]) == frame.Prefix
}

// handleReply queues a reply for the request it answers. The END reply ends
// the request here, not when its reader gets to it, so the channel goes back
// to the pool at once.
func (s *session) handleReply(hdr negotiate.DataHeader, msg transport.Message, plain []byte, ferr error) {
	s.mu.Lock()
	cl := s.calls[hdr.RequestID]
	if cl != nil && hdr.IsEnd() {
		delete(s.calls, hdr.RequestID)
	}
	s.mu.Unlock()
	if cl == nil {
		s.c.stats.late.Add(1)
		msg.Release()
		return
	}
	if hdr.IsEnd() {
		cl.endWatch()
		s.conn.ReleaseChannel(cl.ch)
	}
	s.c.stats.replies.Add(1)
	cl.push(reply{msg: msg, frame: plain, peer: hdr.Peer, end: hdr.IsEnd(), batch: hdr.IsBatch(), err: ferr})
}

// handleNotice stops the handler of the delivery the notice is about.
func (s *session) handleNotice(hdr negotiate.DataHeader, plain []byte, ferr error) {
	s.c.stats.notices.Add(1)
	var cause error = &RemoteError{Code: "unreadable_notice"}
	if ferr == nil {
		cause = decodeErrorFrame("", plain, s.decLim)
	}
	s.mu.Lock()
	d := s.deliveries[hdr.RequestID]
	s.mu.Unlock()
	s.log.Debug().Uint64("delivery", hdr.RequestID).Bool("known", d != nil).AnErr("notice", cause).Msg("notice")
	if d != nil {
		d.cancel(fmt.Errorf("%w: %w", ErrDeliveryCancelled, cause))
		// The delivery has ended at the daemon, but its channel goes back
		// to the daemon's pool only with this side's END (docs/protocol.md
		// §4, notices): send it now rather than let the stream be held
		// until the session ends. Not on the reader: the handler may be in
		// the middle of a write.
		go d.end(negotiate.CodeCancelled, "the delivery was ended by the daemon's notice")
	}
}

// decodeErrorFrame turns an error frame into the error it reports.
func decodeErrorFrame(from string, fr []byte, lim frame.Limits) error {
	body, err := frame.AppendDecode(nil, fr, lim)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	if fr[frame.OffSchema] != byte(frame.SchemaError) {
		return fmt.Errorf("%w: notice of schema %#02x, want an error frame", ErrBadFrame, fr[frame.OffSchema])
	}
	rerr, err := parseRemoteError(from, body)
	if err != nil {
		return err
	}
	return rerr
}

// handleRequest starts the handler for a delivery, or answers at once when
// it cannot run: a refused frame, no handler, too many handlers running.
func (s *session) handleRequest(hdr negotiate.DataHeader, msg transport.Message, plain []byte, ferr error) {
	id, ch := hdr.RequestID, msg.Channel
	c := s.c
	c.stats.deliveries.Add(1)
	refuse := func(code negotiate.ErrorCode, text string) {
		msg.Release()
		if err := s.sendError(ch, id, code, text); err != nil {
			s.log.Debug().Err(err).Msg("could not refuse delivery")
		}
	}
	switch {
	case ferr != nil:
		refuse(negotiate.RefusalCode(ferr), ferr.Error())
		return
	case c.cfg.Handler == nil:
		refuse(negotiate.CodeNoHandler, "agent "+c.cfg.AgentID+" serves no requests")
		return
	}
	select {
	case c.sem <- struct{}{}:
	default:
		c.stats.busy.Add(1)
		refuse(negotiate.CodeProviderBusy, "agent "+c.cfg.AgentID+" is running its maximum of handlers")
		return
	}
	d := newDelivery(s, id, ch, string(hdr.Peer))
	d.ctx = withRemoteTrace(d.ctx, hdr.Trace)
	d.batch = hdr.IsBatch()
	s.mu.Lock()
	switch {
	case s.ended:
		s.mu.Unlock()
		<-c.sem
		d.cancel(nil)
		msg.Release()
		return
	case s.deliveries[id] != nil:
		s.mu.Unlock()
		<-c.sem
		d.cancel(nil)
		refuse(negotiate.CodeDuplicateRequest, "delivery id already in progress")
		return
	}
	s.deliveries[id] = d
	s.mu.Unlock()
	c.handlers.Add(1)
	go s.serve(d, msg, plain)
}

// removeDelivery forgets a finished delivery.
func (s *session) removeDelivery(d *delivery) {
	s.mu.Lock()
	if s.deliveries[d.id] == d {
		delete(s.deliveries, d.id)
	}
	s.mu.Unlock()
}
