package daemon

import "sync"

// The affinity map (docs/protocol.md §4.3, docs/operations.md "Conversation
// affinity"): which provider received each document a requester named with
// a doc_id, so that the conversation's next turn - a delta against that
// document, or a full request naming it as base - goes to the provider that
// holds it. It is filled from frame headers only, and an entry is a hint,
// never a promise: the provider may have evicted the document, and a
// request then gets base_missing and is resent whole.
//
// The bound is exact, and shared fairly between orgs: it holds at most max
// entries, and when full a new entry replaces the least recently used entry
// of the org holding the most (of the recording org itself when it holds as
// many as any other). So one org's traffic never evicts the documents of an
// org holding fewer than it: orgs that keep recording end up with equal
// shares, and an org alone may use them all. One lock covers the map: the
// bound and the shares are properties of the whole, and the work under the
// lock is a map access and a few index updates.
//
// Keys hold the org and agent id strings the sessions already hold, and the
// value is the provider's agent id string, so recording and looking up
// allocate nothing; the entries live in one slice, linked by index into one
// LRU list per org.

// DefaultAffinityEntries is Config.AffinityEntries's default: the 65,536
// most recent documents, about 13 MiB when full (measured: ~200 bytes an
// entry, map included; docs/operations.md). Every turn of a conversation
// takes one entry, and only its newest matters, so this keeps thousands of
// conversations routed to their providers.
const DefaultAffinityEntries = 1 << 16

type affinityKey struct {
	org, requester string
	doc            uint64
}

type affinityEntry struct {
	key        affinityKey
	provider   string
	org        int32 // index of its org's list in affinityMap.orgs
	prev, next int32 // LRU neighbours within its org; -1 ends the list
}

// orgLRU is one org's entries, most recently used first.
type orgLRU struct {
	head, tail int32 // -1 when empty
	n          int
}

// affinityMap is bounded to max entries in all (at least one).
type affinityMap struct {
	mu      sync.Mutex
	max     int
	index   map[affinityKey]int32
	entries []affinityEntry
	// orgs holds a list per org that ever recorded; the daemon's orgs are
	// its configured ones, so this stays small.
	orgs   []orgLRU
	orgIdx map[string]int32
}

func newAffinityMap(entries int) *affinityMap {
	return &affinityMap{
		max:    max(entries, 1),
		index:  make(map[affinityKey]int32),
		orgIdx: make(map[string]int32),
	}
}

// lookup returns the provider that received document doc of requester in
// org, and marks the entry recently used.
func (m *affinityMap) lookup(org, requester string, doc uint64) (string, bool) {
	k := affinityKey{org, requester, doc}
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.index[k]
	if !ok {
		return "", false
	}
	m.touch(i)
	return m.entries[i].provider, true
}

// record notes that document doc of requester in org went to provider; when
// the map is full it replaces the least recently used entry of the org that
// holds the most.
func (m *affinityMap) record(org, requester string, doc uint64, provider string) {
	k := affinityKey{org, requester, doc}
	m.mu.Lock()
	defer m.mu.Unlock()
	if i, ok := m.index[k]; ok {
		m.entries[i].provider = provider
		m.touch(i)
		return
	}
	o, ok := m.orgIdx[org]
	if !ok {
		o = int32(len(m.orgs))
		m.orgs = append(m.orgs, orgLRU{head: -1, tail: -1})
		m.orgIdx[org] = o
	}
	var i int32
	if len(m.entries) < m.max {
		i = int32(len(m.entries))
		m.entries = append(m.entries, affinityEntry{prev: -1, next: -1})
	} else {
		i = m.orgs[m.largest(o)].tail
		m.unlink(i)
		delete(m.index, m.entries[i].key)
	}
	e := &m.entries[i]
	e.key, e.provider, e.org = k, provider, o
	m.index[k] = i
	m.pushFront(i)
}

// largest is the org whose least recently used entry a new entry of org o
// replaces: the one holding the most entries, o itself on a tie.
func (m *affinityMap) largest(o int32) int32 {
	best := o
	for j := range m.orgs {
		if m.orgs[j].n > m.orgs[best].n {
			best = int32(j)
		}
	}
	return best
}

// len is the number of entries (tests, metrics).
func (m *affinityMap) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.index)
}

// orgLen is the number of entries of org (tests).
func (m *affinityMap) orgLen(org string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.orgIdx[org]; ok {
		return m.orgs[o].n
	}
	return 0
}

func (m *affinityMap) touch(i int32) {
	if m.orgs[m.entries[i].org].head == i {
		return
	}
	m.unlink(i)
	m.pushFront(i)
}

func (m *affinityMap) unlink(i int32) {
	e := &m.entries[i]
	l := &m.orgs[e.org]
	if e.prev >= 0 {
		m.entries[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next >= 0 {
		m.entries[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = -1, -1
	l.n--
}

func (m *affinityMap) pushFront(i int32) {
	e := &m.entries[i]
	l := &m.orgs[e.org]
	e.prev, e.next = -1, l.head
	if l.head >= 0 {
		m.entries[l.head].prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
	l.n++
}
