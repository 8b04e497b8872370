package conversation

import (
	"sync"

	"github.com/m2md/m2md/delta"
)

// Bases is a provider's kept documents: the requests delivered to it with
// an extension block and its answers, by requester and doc_id.
type Bases struct {
	mu     sync.Mutex
	budget int
	l      lru[baseKey]
}

// baseKey names a provider's base: the requester and its doc_id.
type baseKey struct {
	from string
	doc  uint64
}

// NewBases returns Bases that keep at most budget bytes of requests and
// their answers.
func NewBases(budget int) *Bases {
	b := &Bases{budget: budget}
	b.l.init(budget, nil)
	return b
}

// Get returns the base that requester from named doc, nil when it is not
// kept (never recorded, evicted, or its answer failed).
func (b *Bases) Get(from string, doc uint64) *delta.Base {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.l.get(baseKey{from, doc}); e != nil {
		return e.base
	}
	return nil
}

func (b *Bases) put(from string, doc uint64, base *delta.Base) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.l.put(baseKey{from, doc}, base, 0, backoff{})
}

// Recording is what a provider keeps of a delivered request with an
// extension block until its final answer makes it a base.
type Recording struct {
	b      *Bases
	from   string
	docID  uint64
	d      []byte // the request, then the replies' JSON
	reqLen int
}

// Record starts keeping request, delivered from requester from as
// document docID. It is nil (keeps nothing) when b is nil or the request
// alone fills the budget.
func (b *Bases) Record(from string, docID uint64, request []byte) *Recording {
	if b == nil || len(request) >= b.budget {
		return nil
	}
	return &Recording{b: b, from: from, docID: docID, d: append(make([]byte, 0, len(request)+len(request)/8+512), request...), reqLen: len(request)}
}

// Request is the recorded request; its bytes are never written after.
func (r *Recording) Request() []byte { return r.d[:r.reqLen:r.reqLen] }

// Reply adds a reply the provider is sending; the final one (end) stores
// the base, kept before it is sent since the requester's next turn may
// arrive as soon as it has left (a base whose reply then fails to leave is
// never named). An error reply (failed), or replies beyond the budget, end
// the recording without a base. It reports whether the recording goes on.
func (r *Recording) Reply(json []byte, failed, end bool) bool {
	if failed || len(r.d)+len(json) > r.b.budget {
		return false
	}
	r.d = append(r.d, json...)
	if end {
		r.b.put(r.from, r.docID, delta.MakeBase(r.d, r.reqLen))
		return false
	}
	return true
}
