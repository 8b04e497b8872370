package client

import (
	"errors"
	"fmt"
	"slices"

	"github.com/m2md/m2md/delta"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/internal/conversation"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// encodeRequest appends the frame of a JSON request. In a session with
// feature delta a chat request carries an extension block naming it, and
// travels as a delta against the kept request it continues when that is
// smaller; the turn returned keeps it for the history. Other requests, or
// without the feature, get a plain frame and no turn.
func (s *session) encodeRequest(o outgoing, payload []byte) (*conversation.Turn, error) {
	c := s.c
	if c.hist == nil || !s.info.Params.Has(negotiate.FeatureDelta) {
		return nil, o.encodeJSON(payload, s.encLim)
	}
	t := c.hist.Begin(payload)
	if t == nil {
		return nil, o.encodeJSON(payload, s.encLim)
	}
	b, isDelta, err := delta.AppendEncodeFrame(*o.buf, payload, t.Extension(), t.Base(), s.encLim)
	switch {
	case errors.Is(err, frame.ErrSchema):
		// Messages, but classified as a response: no extension block.
		return nil, o.encodeJSON(payload, s.encLim)
	case errors.Is(err, frame.ErrLimit):
		return nil, fmt.Errorf("%w: %w", ErrTooLarge, err)
	case err != nil:
		return nil, fmt.Errorf("client: encode: %w", err)
	}
	*o.buf = b
	t.Sent(payload, isDelta)
	if isDelta {
		c.stats.deltasSent.Add(1)
	}
	return t, nil
}

// decodeReplyDelta rebuilds a reply delta to t's request against its
// dictionary D_r (docs/protocol.md §4.3, "Reply deltas"): the base's
// response when the request travelled as a delta (not its resend in
// full), then the request.
func decodeReplyDelta(t *conversation.Turn, fr []byte, lim frame.Limits) ([]byte, error) {
	req := t.Request()
	if req == nil {
		return nil, errors.New("client: a reply delta to a request that carried no extension block")
	}
	dict := bufpool.Get(len(req) + 4096)
	defer bufpool.Put(dict)
	*dict = delta.AppendReplyDict((*dict)[:0], t.ReplyBase(), req)
	return delta.AppendDecodeReply(nil, fr, *dict, lim)
}

// resendable reports whether err, the reply to t's request, is
// base_missing for a delta that can still be sent again in full: once,
// and only if nothing was returned to the caller yet.
func resendable(t *conversation.Turn, err error) bool {
	var re *RemoteError
	return t.CanResend() && errors.As(err, &re) && re.Code == negotiate.CodeBaseMissing
}

// resend sends the stream's request again as a full frame naming the same
// document and base, after base_missing, and makes the stream wait for the
// new request's replies.
func (st *Stream) resend() error {
	t := st.turn
	t.Resent()
	c := st.cl.s.c
	s, err := c.current(st.ctx)
	if err != nil {
		return err
	}
	doc := t.Request()
	id := c.newRequestID()
	var tb [negotiate.MaxTraceLen]byte
	o, err := newTracedOutgoing(0, id, st.to, s.appendTrace(tb[:0], st.ctx), len(doc))
	if err != nil {
		return err
	}
	defer o.free()
	b, err := frame.AppendEncodeExt(*o.buf, doc, t.Extension(), s.encLim)
	if err != nil {
		return fmt.Errorf("client: encode: %w", err)
	}
	*o.buf = b
	if st.wantHeaders {
		if err := frame.SetWantsHeaders(b[o.hdrLen:]); err != nil {
			return fmt.Errorf("client: ResponseHeaders: %w", err)
		}
	}
	cl := new(call)
	if err := s.launch(st.ctx, cl, id, o); err != nil {
		return err
	}
	c.stats.requests.Add(1)
	c.stats.deltaResends.Add(1)
	c.stats.jsonSent.Add(uint64(len(doc)))
	st.mu.Lock()
	closed := st.closed
	if !closed {
		st.cl = cl
	}
	st.mu.Unlock()
	if closed {
		cl.abandon()
		return errStreamClosed
	}
	cl.watch(st.ctx, st)
	return nil
}

// decodeDelivery decodes a delivered M2M v1 frame whose header h has been
// read: a delta against the base this provider keeps, or a full document.
// A frame with an extension block is recorded for d. The code is what to
// answer when it fails.
func (s *session) decodeDelivery(d *delivery, plain []byte, h *frame.Header) ([]byte, negotiate.ErrorCode, error) {
	c := s.c
	if !h.Ext.Present() {
		body, err := frame.AppendDecode(nil, plain, s.decLim)
		return body, negotiate.CodeBadFrame, err
	}
	if !s.info.Params.Has(negotiate.FeatureDelta) {
		return nil, negotiate.CodeBadFrame, errors.New("frame with an extension block in a session without feature delta")
	}
	var body []byte
	var err error
	var base *delta.Base
	if h.Ext.Delta {
		if c.bases != nil {
			base = c.bases.Get(d.from, h.Ext.BaseID)
		}
		body, err = delta.AppendDecodeFrame(nil, plain, base, s.decLim)
		switch {
		case errors.Is(err, delta.ErrNoBase), errors.Is(err, delta.ErrBaseMismatch), errors.Is(err, delta.ErrCorrupt):
			c.stats.basesMissing.Add(1)
			return nil, negotiate.CodeBaseMissing, fmt.Errorf("base %d of %s: %w", h.Ext.BaseID, d.from, err)
		case errors.Is(err, frame.ErrLimit):
			return nil, negotiate.CodeTooLarge, err
		case err != nil:
			return nil, negotiate.CodeBadFrame, err
		}
		c.stats.deltasReceived.Add(1)
	} else if body, err = frame.AppendDecode(nil, plain, s.decLim); err != nil {
		return nil, negotiate.CodeBadFrame, err
	}
	d.rec = c.bases.Record(d.from, h.Ext.DocID, body)
	// A reply delta is tried only for a request that continues a
	// conversation (its block names a base). The answer to a first or
	// single turn shares too little with its request: on the corpus those
	// deltas are 0.54-0.58 of the JSON and lose to Brotli, and on the
	// OpenAI edge's single-turn answers the attempt was 10% of the mesh's
	// CPU, always thrown away.
	if h.Ext.BaseID != 0 {
		// What a reply delta is encoded against: the request as the
		// handler gets it, and the base it was rebuilt from.
		r := &replyDict{base: base}
		if d.rec != nil {
			r.req = d.rec.Request()
		} else {
			r.req = slices.Clone(body) // the handler owns body
		}
		d.reply = r
	}
	return body, "", nil
}

// replyDict is what a provider keeps of a request with an extension block
// to encode its final response as a reply delta (docs/protocol.md §4.3,
// "Reply deltas"): D_r = the base's response (a delta request) ‖ req.
type replyDict struct {
	base *delta.Base // nil unless the request was a delta
	req  []byte
}

// sendFinal sends json, the final reply to a request that came with an
// extension block: as a reply delta against r when that is smaller, else
// as the plain frame.
func (s *session) sendFinal(ch transport.ChannelID, id uint64, json []byte, r *replyDict) error {
	o, err := newOutgoing(negotiate.FlagReply|negotiate.FlagEnd, id, "", len(json))
	if err != nil {
		return err
	}
	defer o.free()
	dict := bufpool.Get(len(r.req) + 4096)
	defer bufpool.Put(dict)
	*dict = delta.AppendReplyDict((*dict)[:0], r.base, r.req)
	b, isDelta, err := delta.AppendEncodeReply(*o.buf, json, *dict, s.encLim)
	switch {
	case errors.Is(err, frame.ErrLimit):
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	case err != nil:
		return fmt.Errorf("client: encode: %w", err)
	}
	*o.buf = b
	if err := s.sendMessage(ch, o); err != nil {
		return err
	}
	s.c.stats.jsonSent.Add(uint64(len(json)))
	if isDelta {
		s.c.stats.replyDeltasSent.Add(1)
	}
	return nil
}

// record adds a reply the provider is sending to its recording, which
// ends (the base stored, or dropped) at the final one. Called with d.mu
// held.
func (d *delivery) record(json []byte, code negotiate.ErrorCode, end bool) {
	if !d.rec.Reply(json, code != "", end) {
		d.rec = nil
	}
}
