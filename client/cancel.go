package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// ErrRequestCancelled is the cause of a handler's context (wrapped in
// ErrDeliveryCancelled) when the requester cancelled the request: its
// context ended or it closed the stream early (docs/protocol.md §4.1).
var ErrRequestCancelled = errors.New("client: the requester cancelled the request")

// watch cancels the request when ctx ends before its END arrives: the
// stream fails with ctx's error and, in a session that negotiated cancel,
// the daemon gets a CANCEL. Without cancel the request's replies are
// dropped as they arrive, as for any abandoned stream.
func (cl *call) watch(ctx context.Context, st *Stream) {
	if ctx.Done() == nil {
		return // never ends: no registration to pay for
	}
	stop := context.AfterFunc(ctx, func() {
		cl.fail(ctx.Err())
		st.Close()
	})
	cl.mu.Lock()
	if cl.ended {
		cl.mu.Unlock()
		stop()
		return
	}
	cl.unwatch = stop
	cl.mu.Unlock()
}

// endWatch records that the request's END arrived: nothing to cancel any
// more.
func (cl *call) endWatch() {
	cl.mu.Lock()
	stop := cl.unwatch
	cl.unwatch, cl.ended = nil, true
	cl.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// sendCancel sends a CANCEL for a request whose END has not arrived, on
// the request's channel, behind the request. The call stays registered
// until the END (the daemon's `cancelled`, or the provider's reply that won
// the race), which returns the channel to the pool.
func (s *session) sendCancel(cl *call) {
	if !s.info.Params.Has(negotiate.FeatureCancel) {
		return
	}
	s.mu.Lock()
	outstanding := s.calls[cl.id] == cl
	s.mu.Unlock()
	if !outstanding {
		return
	}
	var buf [negotiate.MaxCancelLen]byte
	msg, err := negotiate.AppendCancel(buf[:0], cl.id)
	if err != nil {
		return
	}
	chs, err := s.channel(cl.ch)
	if err != nil {
		return
	}
	chs.mu.Lock()
	defer chs.mu.Unlock()
	if s.closing.Load() {
		return
	}
	if err := s.conn.Send(context.Background(), cl.ch, msg); err != nil {
		s.log.Debug().Err(err).Uint64("request_id", cl.id).Msg("CANCEL not sent")
		return
	}
	s.c.stats.cancelsSent.Add(1)
}

// handleCancel stops the handler of the delivery a CANCEL names and
// answers the daemon with the final reply `cancelled` at once, so the
// delivery's channel is free again even if the handler is slow to return.
// A CANCEL for a delivery that has ended is ignored.
func (s *session) handleCancel(msg transport.Message) {
	id, err := negotiate.ParseCancel(msg.Data)
	ch := msg.Channel
	msg.Release()
	switch {
	case !s.info.Params.Has(negotiate.FeatureCancel):
		s.protocolError(fmt.Errorf("%w: CANCEL without feature cancel", negotiate.ErrUnexpectedMessage))
		return
	case err != nil:
		s.protocolError(err)
		return
	}
	s.ctrlMu.Lock()
	_, err = s.m.Received(time.Now(), negotiate.KindCancel, "")
	s.ctrlMu.Unlock()
	if err != nil {
		if !errors.Is(err, negotiate.ErrAfterClose) && !errors.Is(err, negotiate.ErrClosed) {
			s.protocolError(err)
		}
		return
	}
	s.mu.Lock()
	d := s.deliveries[id]
	s.mu.Unlock()
	if d == nil || d.ch != ch {
		return
	}
	s.c.stats.cancelsReceived.Add(1)
	d.cancel(fmt.Errorf("%w: %w", ErrDeliveryCancelled, ErrRequestCancelled))
	// Not on the reader: the handler may be in the middle of a write.
	go d.end(negotiate.CodeCancelled, "cancelled by the requester")
}

// end sends the final error reply code, which frees the delivery's channel
// at the daemon, unless the handler's final reply went first.
func (d *delivery) end(code negotiate.ErrorCode, message string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return
	}
	d.done = true
	if err := d.s.sendError(d.ch, d.id, code, message); err != nil {
		d.s.log.Debug().Err(err).Uint64("delivery", d.id).Msg("delivery not ended")
	}
}
