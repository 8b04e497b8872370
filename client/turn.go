package client

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/m2md/m2md/delta"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// turn is a request sent with an extension block (docs/protocol.md §4.3):
// what the requester needs to keep it in its history once its reply has
// arrived, and to send it again in full after base_missing.
type turn struct {
	docID, baseID uint64
	last          uint64 // messageKeys' key of all its messages
	d             []byte // the request, then its replies' JSON appended
	reqLen        int
	delta         bool        // sent as a delta
	base          *delta.Base // the base of the delta, for its reply's D_r
	replies       int         // reply bodies returned to the caller
	recording     bool        // d still holds every reply (within the budget)
	resent        bool
	miss          deltaBackoff // kept with it in the history
}

// deltaBackoff is what a conversation's base_missing answers have taught its
// requester: after a delta comes back base_missing (and is resent in full),
// the next 0, 1, 3, then 7 turns go in full (naming their base, for
// affinity) as misses follow each other, and a delta that arrives resets
// it. A provider that lost one base, or left, keeps the base of the resend
// (the daemon routes the next turn to whichever provider took it), so it
// costs one resend; a provider without feature delta never keeps a base
// and would cost a round trip per turn, so it costs one try in eight once
// the misses have doubled up to the cap.
type deltaBackoff struct {
	full   uint8 // turns still to send in full
	misses uint8 // base_missing answers in a row, at most maxMisses
}

const maxMisses = 4 // full turns after a miss: 0, 1, 3, 7 (2^(misses-1) - 1)

// missed is the deltaBackoff after one more base_missing.
func (b deltaBackoff) missed() deltaBackoff {
	if b.misses < maxMisses {
		b.misses++
	}
	b.full = 1<<(b.misses-1) - 1
	return b
}

var keyBufs = sync.Pool{New: func() any { return new([]uint64) }}

// encodeRequest appends the frame of a JSON request. In a session with
// feature delta a chat request carries an extension block naming it, and
// travels as a delta against the kept request it continues when that is
// smaller; the turn returned keeps it for the history. Other requests, or
// without the feature, get a plain frame and no turn.
func (s *session) encodeRequest(o outgoing, payload []byte) (*turn, error) {
	c := s.c
	if c.hist == nil || !s.info.Params.Has(negotiate.FeatureDelta) {
		return nil, o.encodeJSON(payload, s.encLim)
	}
	kb := keyBufs.Get().(*[]uint64)
	defer keyBufs.Put(kb)
	keys, ok := messageKeys(c.hist.seed, payload, (*kb)[:0])
	*kb = keys
	if !ok {
		return nil, o.encodeJSON(payload, s.encLim)
	}
	t := &turn{docID: c.newDocID(), last: keys[len(keys)-1], reqLen: len(payload), recording: true}
	var base *delta.Base
	t.baseID, base, t.miss = c.hist.find(keys)
	if t.miss.full > 0 {
		base = nil
		t.miss.full--
	}
	b, isDelta, err := delta.AppendEncodeFrame(*o.buf, payload, frame.Extension{DocID: t.docID, BaseID: t.baseID}, base, s.encLim)
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
	t.delta = isDelta
	if isDelta {
		t.base = base
		c.stats.deltasSent.Add(1)
	}
	t.d = append(make([]byte, 0, len(payload)+len(payload)/8+512), payload...)
	return t, nil
}

// reply records a reply body returned to the caller; at the final one the
// request and its response join the history.
func (t *turn) reply(c *Client, body []byte, end bool) {
	t.replies++
	if t.recording {
		if len(t.d)+len(body) > c.cfg.ConversationHistory {
			// The request itself stays until the end: a reply delta's
			// dictionary holds it.
			t.recording = false
			t.d = t.d[:t.reqLen:t.reqLen]
		} else {
			t.d = append(t.d, body...)
		}
	}
	if !end || !t.recording {
		return
	}
	if t.delta && !t.resent {
		t.miss = deltaBackoff{} // the provider had the base
	}
	reply, ok := replyKey(c.hist.seed, t.d[t.reqLen:], t.replies > 1)
	if ok {
		c.hist.add(t.docID, t.last, reply, delta.MakeBase(t.d, t.reqLen), t.miss)
	}
	t.d = nil
}

// decodeReplyDelta rebuilds a reply delta to t's request against its
// dictionary D_r (docs/protocol.md §4.3, "Reply deltas"): the base's
// response when the request travelled as a delta (not its resend in
// full), then the request.
func (t *turn) decodeReplyDelta(fr []byte, lim frame.Limits) ([]byte, error) {
	if t == nil || len(t.d) < t.reqLen {
		return nil, errors.New("client: a reply delta to a request that carried no extension block")
	}
	var base *delta.Base
	if t.delta && !t.resent {
		base = t.base
	}
	dict := bufpool.Get(t.reqLen + 4096)
	defer bufpool.Put(dict)
	*dict = delta.AppendReplyDict((*dict)[:0], base, t.d[:t.reqLen])
	return delta.AppendDecodeReply(nil, fr, *dict, lim)
}

// resendable reports whether err, the request's reply, is base_missing for
// a delta that can still be sent again in full: once, and only if nothing
// was returned to the caller yet.
func (t *turn) resendable(err error) bool {
	var re *RemoteError
	return t.delta && !t.resent && t.replies == 0 && len(t.d) >= t.reqLen &&
		errors.As(err, &re) && re.Code == negotiate.CodeBaseMissing
}

// resend sends the stream's request again as a full frame naming the same
// document and base, after base_missing, and makes the stream wait for the
// new request's replies.
func (st *Stream) resend() error {
	t := st.turn
	t.resent, t.miss = true, t.miss.missed()
	c := st.cl.s.c
	s, err := c.current(st.ctx)
	if err != nil {
		return err
	}
	doc := t.d[:t.reqLen]
	id := c.newRequestID()
	var tb [negotiate.MaxTraceLen]byte
	o, err := newTracedOutgoing(0, id, st.to, s.appendTrace(tb[:0], st.ctx), len(doc))
	if err != nil {
		return err
	}
	defer o.free()
	b, err := frame.AppendEncodeExt(*o.buf, doc, frame.Extension{DocID: t.docID, BaseID: t.baseID}, s.encLim)
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

// newDocID returns the next doc_id: per client, from 1 (docs/protocol.md
// §4.3: ids under 128 take one byte), never 0.
func (c *Client) newDocID() uint64 {
	for {
		if id := c.nextDoc.Add(1); id != 0 {
			return id
		}
	}
}

// recording is what a provider keeps of a delivery that carried an
// extension block, to store it as a base once answered.
type recording struct {
	docID  uint64
	d      []byte // the request, then the replies' JSON
	reqLen int
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
			base = c.bases.get(d.from, h.Ext.BaseID)
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
	if c.bases != nil && len(body) < c.cfg.ConversationBases {
		d.rec = &recording{docID: h.Ext.DocID, d: append(make([]byte, 0, len(body)+len(body)/8+512), body...), reqLen: len(body)}
	}
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
			r.req = d.rec.d[:len(body):len(body)] // never written after
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

// record adds a reply the provider is sending to its recording; the final
// one stores the base (a base whose reply then fails to leave is never
// named by a requester). Called with d.mu held.
func (d *delivery) record(json []byte, code negotiate.ErrorCode, end bool) {
	r := d.rec
	c := d.s.c
	if code != "" || len(r.d)+len(json) > c.cfg.ConversationBases {
		d.rec = nil
		return
	}
	r.d = append(r.d, json...)
	if end {
		c.bases.put(d.from, r.docID, delta.MakeBase(r.d, r.reqLen))
		d.rec = nil
	}
}
