package conversation

import (
	"bytes"
	"sync"

	"github.com/m2md/m2md/delta"
	"github.com/m2md/m2md/frame"
)

// Turn is a chat request sent with an extension block (docs/protocol.md
// §4.3): its doc_id and base, and the request until its answer is in, to
// keep both in the history, to send the request again in full after
// base_missing, and to rebuild a reply delta.
type Turn struct {
	h             *History
	docID, baseID uint64
	last          uint64      // messageKeys' key of all its messages
	base          *delta.Base // the base to try, then the delta's (when sent as one)
	req           []byte      // the request as sent, until its answer is in
	d             []byte      // a copy of the request, then its replies' JSON appended
	reqLen        int
	// A request that repeats a kept one byte for byte shares its bytes
	// instead of a copy in d, as long as its replies repeat the kept
	// answer's (the first off bytes so far): a repeated exchange adds
	// nothing a later request could use that the kept one does not hold.
	same      kept // same.base nil: not sharing
	off       int
	delta     bool // sent as a delta
	replies   int  // reply bodies returned to the caller
	recording bool // every reply is held (within the budget)
	resent    bool
	miss      backoff // kept with it in the history
}

var keyBufs = sync.Pool{New: func() any { return new([]uint64) }}

// Begin starts the turn of request, a chat request about to be sent: it
// takes a doc_id and finds the base, if any, whose messages and answer
// begin request's messages. It is nil when request has no messages, so it
// neither continues a conversation nor can be continued by one: it goes
// without an extension block.
func (h *History) Begin(request []byte) *Turn {
	kb := keyBufs.Get().(*[]uint64)
	defer keyBufs.Put(kb)
	keys, ok := messageKeys(h.seed, request, (*kb)[:0])
	*kb = keys
	if !ok {
		return nil
	}
	t := &Turn{h: h, docID: h.newDocID(), last: keys[len(keys)-1], reqLen: len(request), recording: true}
	t.baseID, t.base, t.miss = h.find(keys)
	t.same = h.repeated(t.last, request)
	if t.miss.full > 0 {
		t.base = nil
		t.miss.full--
	}
	return t
}

// Extension is the request's extension block: its doc_id and the doc_id of
// the base it continues (0 for none), Delta unset.
func (t *Turn) Extension() frame.Extension {
	return frame.Extension{DocID: t.docID, BaseID: t.baseID}
}

// Base is the base to try a delta against: nil when the request continues
// nothing kept, or when recent base_missing answers say to send it in full
// (still naming its base, for affinity).
func (t *Turn) Base() *delta.Base { return t.base }

// Sent records that request left, as a delta against Base or in full, and
// keeps a copy of it (unless it repeats a kept request).
func (t *Turn) Sent(request []byte, asDelta bool) {
	t.delta = asDelta
	if t.same.base != nil {
		t.req = t.same.base.Request()
		return
	}
	t.d = append(make([]byte, 0, len(request)+len(request)/8+512), request...)
	t.req = t.d[:t.reqLen]
}

// Request is the request as sent, nil once its answer is in (or before it
// was sent).
func (t *Turn) Request() []byte {
	if t == nil {
		return nil
	}
	return t.req
}

// ReplyBase is the base a reply delta's dictionary starts with (D_r, docs/
// protocol.md §4.3, "Reply deltas"): the delta's base when the request went
// as one and was not resent in full, else nil.
func (t *Turn) ReplyBase() *delta.Base {
	if t.delta && !t.resent {
		return t.base
	}
	return nil
}

// CanResend reports whether the request, answered base_missing, may go
// again in full: a delta, not resent yet, and nothing returned to the
// caller.
func (t *Turn) CanResend() bool {
	return t.delta && !t.resent && t.replies == 0 && t.req != nil
}

// Resent records that the request went again in full after base_missing.
func (t *Turn) Resent() { t.resent, t.miss = true, t.miss.missed() }

// Reply records a reply body returned to the caller; at the final one
// (end) the request and its response join the history.
func (t *Turn) Reply(body []byte, end bool) {
	t.replies++
	if t.recording {
		switch {
		case t.held()+len(body) > t.h.budget:
			// The request itself stays until the end: a reply delta's
			// dictionary holds it.
			t.recording = false
			if t.same.base == nil {
				t.d = t.d[:t.reqLen:t.reqLen]
			}
		case t.same.base != nil && bytes.HasPrefix(t.same.base.Response()[t.off:], body):
			t.off += len(body)
		default:
			t.copyShared()
			t.d = append(t.d, body...)
		}
	}
	if end {
		t.answered()
	}
}

// held is the bytes of the request and the replies held so far.
func (t *Turn) held() int {
	if t.same.base != nil {
		return t.reqLen + t.off
	}
	return len(t.d)
}

// copyShared ends the sharing of a repeated exchange whose replies now
// differ (or end early): d gets a copy of what was shared.
func (t *Turn) copyShared() {
	if t.same.base == nil {
		return
	}
	resp := t.same.base.Response()[:t.off]
	t.d = append(append(make([]byte, 0, t.reqLen+len(resp)+t.reqLen/8+512), t.req...), resp...)
	t.req, t.same = t.d[:t.reqLen], kept{}
}

// answered adds the request and its response to the history, once the
// final reply is in: a repeated exchange under the kept one's index key
// with its bytes, another with the key of its answer's message.
func (t *Turn) answered() {
	defer func() { t.req, t.d, t.same = nil, nil, kept{} }()
	if !t.recording {
		return
	}
	if t.delta && !t.resent {
		t.miss = backoff{} // the provider had the base
	}
	stream := t.replies > 1
	if s := t.same; s.base != nil && t.off == s.base.Size()-t.reqLen && stream == s.stream {
		t.h.addTagged(t.docID, t.last, s.tag, s.base, stream, t.miss)
		return
	}
	t.copyShared()
	reply, ok := replyKey(t.h.seed, t.d[t.reqLen:], stream)
	if ok {
		t.h.add(t.docID, t.last, reply, delta.MakeBase(t.d, t.reqLen), stream, t.miss)
	}
}
