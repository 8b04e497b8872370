package client

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"github.com/m2md/m2md/delta"
	"github.com/m2md/m2md/internal/jsonscan"
)

// Conversations (docs/protocol.md §4.3, feature delta). A requester keeps
// the requests it sent with the responses it received, and finds among
// them the base of a new request: the kept request whose messages, followed
// by its response's assistant message, begin the new request's messages.
// Messages are compared by what they say (role, content, tool calls), not
// by their bytes: SDKs re-serialise the assistant message they send back.
// A wrong match costs compression, never correctness: the delta is encoded
// against the bytes the requester holds, and the provider checks the CRC.

// messageKeys reads the "messages" of a chat request and returns, for each
// i, a key of messages[0..i] (keys[i] depends on every message up to i).
// ok is false when the document has no non-empty messages array.
func messageKeys(seed maphash.Seed, doc []byte, keys []uint64) (_ []uint64, ok bool) {
	p := docs.Get().(*jsonscan.Doc)
	defer docs.Put(p)
	root, err := p.Parse(doc, jsonscan.Limits{})
	if err != nil || root.Kind != jsonscan.KindObject {
		return keys, false
	}
	msgs := member(p, root, "messages")
	if msgs.Kind != jsonscan.KindArray {
		return keys, false
	}
	var sum uint64
	for _, m := range p.Children(msgs) {
		sum = chain(seed, sum, messageKey(seed, p, m))
		keys = append(keys, sum)
	}
	return keys, len(keys) > 0
}

var (
	docs    = sync.Pool{New: func() any { return new(jsonscan.Doc) }}
	scratch = sync.Pool{New: func() any { return new([]byte) }}
)

// chain extends the key of a message list by one message.
func chain(seed maphash.Seed, sum, msg uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], sum)
	binary.LittleEndian.PutUint64(b[8:], msg)
	return maphash.Bytes(seed, b[:])
}

// messageKey is the key of one message: its role, content and tool calls
// (and tool_call_id), each canonical. An absent, null or empty content or
// tool_calls are the same.
func messageKey(seed maphash.Seed, p *jsonscan.Doc, m jsonscan.Node) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	if m.Kind != jsonscan.KindObject {
		writeCanonical(&h, p, m)
		return h.Sum64()
	}
	fields := [...]string{"role", "content", "tool_calls", "tool_call_id"}
	var found [len(fields)]jsonscan.Node
	for _, c := range p.Children(m) {
		for i, f := range fields {
			if p.HasName(&c, f) {
				found[i] = c
			}
		}
	}
	for _, v := range found {
		if isEmpty(p, v) {
			h.WriteByte('e')
		} else {
			writeCanonical(&h, p, v)
		}
	}
	return h.Sum64()
}

func isEmpty(p *jsonscan.Doc, v jsonscan.Node) bool {
	switch v.Kind {
	case jsonscan.KindNone, jsonscan.KindNull:
		return true
	case jsonscan.KindString:
		return p.Str(v).Len == 0
	case jsonscan.KindArray:
		return len(p.Children(v)) == 0
	}
	return false
}

// writeCanonical hashes a value so that the same JSON value written
// differently (member order, whitespace, string escapes) hashes alike.
func writeCanonical(h *maphash.Hash, p *jsonscan.Doc, v jsonscan.Node) {
	var n [8]byte
	switch v.Kind {
	case jsonscan.KindString:
		s := p.Str(v)
		binary.LittleEndian.PutUint64(n[:], uint64(s.Len))
		h.WriteByte('s')
		h.Write(n[:])
		if !s.Escaped {
			h.Write(s.Raw)
		} else {
			b := scratch.Get().(*[]byte)
			*b = s.AppendDecoded((*b)[:0])
			h.Write(*b)
			scratch.Put(b)
		}
	case jsonscan.KindArray:
		kids := p.Children(v)
		binary.LittleEndian.PutUint64(n[:], uint64(len(kids)))
		h.WriteByte('a')
		h.Write(n[:])
		for _, k := range kids {
			writeCanonical(h, p, k)
		}
	case jsonscan.KindObject:
		kids := slices.Clone(p.Children(v))
		names := make([]string, len(kids))
		for i, k := range kids {
			names[i] = string(p.Name(k).AppendDecoded(nil))
		}
		order := make([]int, len(kids))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(names[a], names[b]) })
		binary.LittleEndian.PutUint64(n[:], uint64(len(kids)))
		h.WriteByte('o')
		h.Write(n[:])
		for _, i := range order {
			h.WriteString(names[i])
			h.WriteByte(0)
			writeCanonical(h, p, kids[i])
		}
	default:
		h.WriteByte(byte('0' + v.Kind))
		h.Write(p.Text(v))
	}
}

// replyKey is the key of a response's assistant message (its
// choices[0].message, or for a stream what streamMessage rebuilds), as
// messageKeys computes it for the same message in a request.
func replyKey(seed maphash.Seed, resp []byte, stream bool) (uint64, bool) {
	if stream {
		m, ok := streamMessage(resp)
		if !ok {
			return 0, false
		}
		resp = m
	}
	p := docs.Get().(*jsonscan.Doc)
	defer docs.Put(p)
	msg, err := p.Parse(resp, jsonscan.Limits{})
	if err != nil || msg.Kind != jsonscan.KindObject {
		return 0, false
	}
	if !stream {
		choices := member(p, msg, "choices")
		if choices.Kind != jsonscan.KindArray || len(p.Children(choices)) == 0 {
			return 0, false
		}
		if msg = member(p, p.Children(choices)[0], "message"); msg.Kind != jsonscan.KindObject {
			return 0, false
		}
	}
	return messageKey(seed, p, msg), true
}

// member returns the member name of object n (the last one of that name),
// or a node of KindNone.
func member(p *jsonscan.Doc, n jsonscan.Node, name string) jsonscan.Node {
	var found jsonscan.Node
	if n.Kind != jsonscan.KindObject {
		return found
	}
	for _, c := range p.Children(n) {
		if p.HasName(&c, name) {
			found = c
		}
	}
	return found
}

// lru holds bases within a byte budget, least recently used first out.
type lru[K comparable] struct {
	budget, used int
	m            map[K]*lruEntry[K]
	head         lruEntry[K] // sentinel: head.next is the most recent
	evicted      func(*lruEntry[K])
}

type lruEntry[K comparable] struct {
	key        K
	base       *delta.Base
	tag        uint64       // the requester's index key
	miss       deltaBackoff // the requester's: what base_missing answers taught it
	prev, next *lruEntry[K]
}

// entryOverhead approximates what an entry costs besides its base.
const entryOverhead = 128

func (l *lru[K]) init(budget int, evicted func(*lruEntry[K])) {
	l.budget, l.evicted = budget, evicted
	l.m = make(map[K]*lruEntry[K])
	l.head.next, l.head.prev = &l.head, &l.head
}

func (l *lru[K]) unlink(e *lruEntry[K]) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (l *lru[K]) front(e *lruEntry[K]) {
	e.prev, e.next = &l.head, l.head.next
	l.head.next.prev = e
	l.head.next = e
}

// get returns the entry under k and marks it recently used.
func (l *lru[K]) get(k K) *lruEntry[K] {
	e := l.m[k]
	if e == nil {
		return nil
	}
	l.unlink(e)
	l.front(e)
	return e
}

// put keeps b under k, evicting the least recently used beyond the
// budget; a base larger than the whole budget is not kept.
func (l *lru[K]) put(k K, b *delta.Base, tag uint64, miss deltaBackoff) {
	size := b.Size() + entryOverhead
	if size > l.budget {
		return
	}
	if old := l.m[k]; old != nil {
		l.remove(old)
	}
	e := &lruEntry[K]{key: k, base: b, tag: tag, miss: miss}
	l.m[k] = e
	l.front(e)
	l.used += size
	for l.used > l.budget {
		l.remove(l.head.prev)
	}
}

func (l *lru[K]) remove(e *lruEntry[K]) {
	l.unlink(e)
	delete(l.m, e.key)
	l.used -= e.base.Size() + entryOverhead
	if l.evicted != nil {
		l.evicted(e)
	}
}

// history is a requester's kept documents: doc_id → base, and the index
// from the key of "its messages plus its assistant message" to doc_id.
type history struct {
	mu    sync.Mutex
	seed  maphash.Seed
	docs  lru[uint64]
	index map[uint64]uint64
}

func newHistory(budget int) *history {
	h := &history{seed: maphash.MakeSeed(), index: make(map[uint64]uint64)}
	h.docs.init(budget, func(e *lruEntry[uint64]) {
		if h.index[e.tag] == e.key {
			delete(h.index, e.tag)
		}
	})
	return h
}

// find returns the kept document whose messages and answer begin the
// messages keyed by keys, preferring the longest; id 0 when none. miss is
// its conversation's deltaBackoff after base_missing.
func (h *history) find(keys []uint64) (id uint64, base *delta.Base, miss deltaBackoff) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(keys) - 1; i >= 0; i-- {
		if id := h.index[keys[i]]; id != 0 {
			if e := h.docs.get(id); e != nil {
				return id, e.base, e.miss
			}
		}
	}
	return 0, nil, deltaBackoff{}
}

// add keeps document id, whose messages are keyed by last (the last key
// messageKeys returned) and whose response's assistant message by reply.
func (h *history) add(id, last, reply uint64, b *delta.Base, miss deltaBackoff) {
	tag := chain(h.seed, last, reply)
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.docs.m[h.index[tag]]; old != nil {
		// The same messages answered alike (a request repeated): one base
		// for both is enough, the newest.
		h.docs.remove(old)
	}
	h.docs.put(id, b, tag, miss)
	if _, kept := h.docs.m[id]; kept {
		h.index[tag] = id
	}
}

// baseKey names a provider's base: the requester and its doc_id.
type baseKey struct {
	from string
	doc  uint64
}

// bases is a provider's kept documents.
type bases struct {
	mu sync.Mutex
	l  lru[baseKey]
}

func newBases(budget int) *bases {
	b := &bases{}
	b.l.init(budget, nil)
	return b
}

func (b *bases) get(from string, doc uint64) *delta.Base {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.l.get(baseKey{from, doc}); e != nil {
		return e.base
	}
	return nil
}

func (b *bases) put(from string, doc uint64, base *delta.Base) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.l.put(baseKey{from, doc}, base, 0, deltaBackoff{})
}
