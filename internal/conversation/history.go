package conversation

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/m2md/m2md/delta"
)

// History is a requester's kept documents: doc_id → base, the index from
// the key of "its messages plus its assistant message" to doc_id, and from
// the key of its messages alone to the newest doc_id (to find a request
// sent again).
type History struct {
	mu      sync.Mutex
	seed    maphash.Seed
	budget  int
	docs    lru[uint64]
	index   map[uint64]uint64
	byLast  map[uint64]uint64
	nextDoc atomic.Uint64
}

// NewHistory returns a History that keeps at most budget bytes of
// requests and their responses (a turn larger than that is not kept).
func NewHistory(budget int) *History {
	h := &History{seed: maphash.MakeSeed(), budget: budget, index: make(map[uint64]uint64), byLast: make(map[uint64]uint64)}
	h.docs.init(budget, func(e *lruEntry[uint64]) {
		if h.index[e.tag] == e.key {
			delete(h.index, e.tag)
		}
		if h.byLast[e.last] == e.key {
			delete(h.byLast, e.last)
		}
	})
	return h
}

// newDocID returns the next doc_id: per requester, from 1 (docs/protocol.md
// §4.3: ids under 128 take one byte), never 0.
func (h *History) newDocID() uint64 {
	for {
		if id := h.nextDoc.Add(1); id != 0 {
			return id
		}
	}
}

// find returns the kept document whose messages and answer begin the
// messages keyed by keys, preferring the longest; id 0 when none. miss is
// its conversation's backoff after base_missing.
func (h *History) find(keys []uint64) (id uint64, base *delta.Base, miss backoff) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(keys) - 1; i >= 0; i-- {
		if id := h.index[keys[i]]; id != 0 {
			if e := h.docs.get(id); e != nil {
				return id, e.base, e.miss
			}
		}
	}
	return 0, nil, backoff{}
}

// add keeps document id, whose messages are keyed by last (the last key
// messageKeys returned) and whose response's assistant message by reply;
// stream says whether the response came in several replies.
func (h *History) add(id, last, reply uint64, b *delta.Base, stream bool, miss backoff) {
	h.addTagged(id, last, chain(h.seed, last, reply), b, stream, miss)
}

// addTagged is add with the index key, chain(last, reply), known.
func (h *History) addTagged(id, last, tag uint64, b *delta.Base, stream bool, miss backoff) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.docs.m[h.index[tag]]; old != nil {
		// The same messages answered alike (a request repeated): one base
		// for both is enough, the newest.
		h.docs.remove(old)
	}
	if e := h.docs.put(id, b, tag, miss); e != nil {
		e.last, e.stream = last, stream
		h.index[tag] = id
		h.byLast[last] = id
	}
}

// kept is what a requester holds of a kept document that a new request
// repeats: the new turn shares its bytes for as long as it repeats them.
type kept struct {
	base   *delta.Base
	tag    uint64
	stream bool
}

// repeated returns the newest kept document whose messages are keyed by
// last and whose request is request, byte for byte (base nil when there is
// none). It does not count as a use of the document.
func (h *History) repeated(last uint64, request []byte) kept {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.docs.m[h.byLast[last]]
	if e == nil || !bytes.Equal(e.base.Request(), request) {
		return kept{}
	}
	return kept{base: e.base, tag: e.tag, stream: e.stream}
}

// backoff is what a conversation's base_missing answers have taught its
// requester: after a delta comes back base_missing (and is resent in full),
// the next 0, 1, 3, then 7 turns go in full (naming their base, for
// affinity) as misses follow each other, and a delta that arrives resets
// it. A provider that lost one base, or left, keeps the base of the resend
// (the daemon routes the next turn to whichever provider took it), so it
// costs one resend; a provider without feature delta never keeps a base
// and would cost a round trip per turn, so it costs one try in eight once
// the misses have doubled up to the cap.
type backoff struct {
	full   uint8 // turns still to send in full
	misses uint8 // base_missing answers in a row, at most maxMisses
}

const maxMisses = 4 // full turns after a miss: 0, 1, 3, 7 (2^(misses-1) - 1)

// missed is the backoff after one more base_missing.
func (b backoff) missed() backoff {
	if b.misses < maxMisses {
		b.misses++
	}
	b.full = 1<<(b.misses-1) - 1
	return b
}
