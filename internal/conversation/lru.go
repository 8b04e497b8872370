package conversation

import "github.com/m2md/m2md/delta"

// lru holds bases within a byte budget, least recently used first out.
type lru[K comparable] struct {
	budget, used int
	m            map[K]*lruEntry[K]
	head         lruEntry[K] // sentinel: head.next is the most recent
	evicted      func(*lruEntry[K])
}

type lruEntry[K comparable] struct {
	key  K
	base *delta.Base
	// tag is the requester's index key, or the provider's key of the
	// request's bytes (0: none).
	tag uint64
	// The requester's: the key of the request's messages, whether its
	// answer was streamed (several replies), and what base_missing
	// answers taught it.
	last       uint64
	stream     bool
	miss       backoff
	prev, next *lruEntry[K]
}

// EntryOverhead approximates what an entry costs besides its base: a
// budget holds bases whose sizes plus EntryOverhead each add up to it.
const EntryOverhead = 128

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
// budget, and returns its entry; a base larger than the whole budget is
// not kept (nil).
func (l *lru[K]) put(k K, b *delta.Base, tag uint64, miss backoff) *lruEntry[K] {
	size := b.Size() + EntryOverhead
	if size > l.budget {
		return nil
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
	return e // never evicted here: it is the most recent, and fits
}

func (l *lru[K]) remove(e *lruEntry[K]) {
	l.unlink(e)
	delete(l.m, e.key)
	l.used -= e.base.Size() + EntryOverhead
	if l.evicted != nil {
		l.evicted(e)
	}
}
