package conversation

import (
	"bytes"
	"hash/maphash"
	"sync"

	"github.com/m2md/m2md/delta"
)

// Bases is a provider's kept documents: the requests delivered to it with
// an extension block and its answers, by requester and doc_id, and the
// newest by the key of its request's bytes (to find a request delivered
// again).
type Bases struct {
	mu     sync.Mutex
	seed   maphash.Seed
	budget int
	l      lru[baseKey]
	byReq  map[uint64]baseKey
}

// baseKey names a provider's base: the requester and its doc_id.
type baseKey struct {
	from string
	doc  uint64
}

// NewBases returns Bases that keep at most budget bytes of requests and
// their answers.
func NewBases(budget int) *Bases {
	b := &Bases{seed: maphash.MakeSeed(), budget: budget, byReq: make(map[uint64]baseKey)}
	b.l.init(budget, func(e *lruEntry[baseKey]) {
		if b.byReq[e.tag] == e.key {
			delete(b.byReq, e.tag)
		}
	})
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

// put keeps base under from and doc; req is the key of its request's
// bytes.
func (b *Bases) put(from string, doc uint64, base *delta.Base, req uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := baseKey{from, doc}
	if b.l.put(k, base, req, backoff{}) != nil {
		b.byReq[req] = k
	}
}

// repeated returns the newest kept base whose request is request, byte for
// byte (keyed req), or nil. It does not count as a use of the base.
func (b *Bases) repeated(req uint64, request []byte) *delta.Base {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.byReq[req]
	if !ok {
		return nil
	}
	if e := b.l.m[k]; e != nil && bytes.Equal(e.base.Request(), request) {
		return e.base
	}
	return nil
}

// Recording is what a provider keeps of a delivered request with an
// extension block until its final answer makes it a base.
type Recording struct {
	b      *Bases
	from   string
	docID  uint64
	key    uint64 // of the request's bytes
	req    []byte // the request: in d, or a kept base's
	d      []byte // a copy of the request, then the replies' JSON
	reqLen int
	// A request delivered again byte for byte shares the kept base's
	// bytes instead of a copy in d, as long as the replies repeat its
	// answer's (the first off bytes so far): a repeated exchange adds
	// nothing a requester could name that the kept one does not hold.
	same *delta.Base
	off  int
}

// Record starts keeping request, delivered from requester from as
// document docID. It is nil (keeps nothing) when b is nil or the request
// alone fills the budget.
func (b *Bases) Record(from string, docID uint64, request []byte) *Recording {
	if b == nil || len(request) >= b.budget {
		return nil
	}
	r := &Recording{b: b, from: from, docID: docID, key: maphash.Bytes(b.seed, request), reqLen: len(request)}
	if r.same = b.repeated(r.key, request); r.same != nil {
		r.req = r.same.Request()
		return r
	}
	r.d = append(make([]byte, 0, len(request)+len(request)/8+512), request...)
	r.req = r.d[:r.reqLen:r.reqLen]
	return r
}

// Request is the recorded request; its bytes are never written after.
func (r *Recording) Request() []byte { return r.req }

// Reply adds a reply the provider is sending; the final one (end) stores
// the base, kept before it is sent since the requester's next turn may
// arrive as soon as it has left (a base whose reply then fails to leave is
// never named). An error reply (failed), or replies beyond the budget, end
// the recording without a base. It reports whether the recording goes on.
func (r *Recording) Reply(json []byte, failed, end bool) bool {
	held := len(r.d)
	if r.same != nil {
		held = r.reqLen + r.off
	}
	if failed || held+len(json) > r.b.budget {
		return false
	}
	if r.same != nil && bytes.HasPrefix(r.same.Response()[r.off:], json) {
		r.off += len(json)
	} else {
		r.copyShared()
		r.d = append(r.d, json...)
	}
	if !end {
		return true
	}
	base := r.same
	if base == nil || r.off != len(base.Response()) {
		r.copyShared()
		base = delta.MakeBase(r.d, r.reqLen)
	}
	r.b.put(r.from, r.docID, base, r.key)
	return false
}

// copyShared ends the sharing of a repeated exchange whose replies now
// differ (or end early): d gets a copy of what was shared.
func (r *Recording) copyShared() {
	if r.same == nil {
		return
	}
	resp := r.same.Response()[:r.off]
	r.d = append(append(make([]byte, 0, r.reqLen+len(resp)+r.reqLen/8+512), r.req...), resp...)
	r.req, r.same = r.d[:r.reqLen:r.reqLen], nil
}
