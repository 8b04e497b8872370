package daemon

import "sync"

// The affinity map (docs/protocol.md §4.3, docs/operations.md "Conversation
// affinity"): which provider received each document a requester named with
// a doc_id, so that the conversation's next turn - a delta against that
// document, or a full request naming it as base - goes to the provider that
// holds it. It is filled from frame headers only, bounded, and least
// recently used entries are evicted first. An entry is a hint, never a
// promise: the provider may have evicted the document, and a request then
// gets base_missing and is resent whole.
//
// Keys hold the org and agent id strings the sessions already hold, and the
// value is the provider's agent id string, so recording and looking up
// allocate nothing; the entries live in one slice per shard, linked by
// index into an LRU list.

// DefaultAffinityEntries is Config.AffinityEntries's default: the 65,536
// most recent documents, about 13 MiB when full (measured: ~200 bytes an
// entry, map included; docs/operations.md). Every turn of a conversation
// takes one entry, and only its newest matters, so this keeps thousands of
// conversations routed to their providers.
const DefaultAffinityEntries = 1 << 16

// affinityShards splits the map so that sessions recording at once rarely
// share a lock; doc ids are chosen by requesters (the Go client counts from
// a random start), so their low bits spread well.
const affinityShards = 16

type affinityKey struct {
	org, requester string
	doc            uint64
}

type affinityEntry struct {
	key        affinityKey
	provider   string
	prev, next int32 // LRU neighbours; -1 ends the list
}

type affinityShard struct {
	mu         sync.Mutex
	index      map[affinityKey]int32
	entries    []affinityEntry
	head, tail int32 // most and least recently used; -1 when empty
	max        int
	_          [40]byte // keep neighbouring shards' locks off one cache line
}

// affinityMap is bounded to max entries in all (at least one per shard).
type affinityMap struct {
	shards [affinityShards]affinityShard
}

func newAffinityMap(max int) *affinityMap {
	m := &affinityMap{}
	per := max / affinityShards
	if per < 1 {
		per = 1
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.max, s.head, s.tail = per, -1, -1
		s.index = make(map[affinityKey]int32)
	}
	return m
}

func (m *affinityMap) shard(k *affinityKey) *affinityShard {
	// doc alone picks the shard: cheap, and doc ids of one requester are
	// consecutive, so they spread over every shard.
	return &m.shards[k.doc%affinityShards]
}

// lookup returns the provider that received document doc of requester in
// org, and marks the entry recently used.
func (m *affinityMap) lookup(org, requester string, doc uint64) (string, bool) {
	k := affinityKey{org, requester, doc}
	s := m.shard(&k)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[k]
	if !ok {
		return "", false
	}
	s.touch(i)
	return s.entries[i].provider, true
}

// record notes that document doc of requester in org went to provider,
// evicting the least recently used entry of its shard when it is full.
func (m *affinityMap) record(org, requester string, doc uint64, provider string) {
	k := affinityKey{org, requester, doc}
	s := m.shard(&k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[k]; ok {
		s.entries[i].provider = provider
		s.touch(i)
		return
	}
	var i int32
	if len(s.entries) < s.max {
		i = int32(len(s.entries))
		s.entries = append(s.entries, affinityEntry{prev: -1, next: -1})
	} else {
		i = s.tail
		s.unlink(i)
		delete(s.index, s.entries[i].key)
	}
	s.entries[i].key, s.entries[i].provider = k, provider
	s.index[k] = i
	s.pushFront(i)
}

// len is the number of entries (tests, metrics).
func (m *affinityMap) len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.index)
		s.mu.Unlock()
	}
	return n
}

func (s *affinityShard) touch(i int32) {
	if s.head == i {
		return
	}
	s.unlink(i)
	s.pushFront(i)
}

func (s *affinityShard) unlink(i int32) {
	e := &s.entries[i]
	if e.prev >= 0 {
		s.entries[e.prev].next = e.next
	} else {
		s.head = e.next
	}
	if e.next >= 0 {
		s.entries[e.next].prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (s *affinityShard) pushFront(i int32) {
	e := &s.entries[i]
	e.prev, e.next = -1, s.head
	if s.head >= 0 {
		s.entries[s.head].prev = i
	}
	s.head = i
	if s.tail < 0 {
		s.tail = i
	}
}
