package negotiate

import (
	"errors"
	"sync"
	"time"
)

var (
	errProofReplayed  = errors.New("proof already used")
	errProofCacheFull = errors.New("too many recent proofs")
)

// proofCache remembers the proofs of accepted HELLOs so that a captured HELLO
// cannot be replayed while its timestamp is still inside the window.
//
// A proof whose timestamp is ts is acceptable until ts + ProofWindow, and ts
// may be up to ProofWindow ahead of the daemon's clock, so an entry must live
// 2·ProofWindow from the moment it is added. With one lifetime for all
// entries, insertion order is expiry order and a FIFO is enough to expire
// them. Memory is bounded by max entries; when the cache is full of live
// entries it refuses new proofs (failing closed: evicting one would reopen
// its replay window).
type proofCache struct {
	mu    sync.Mutex
	seen  map[[proofSize]byte]struct{}
	queue []proofEntry // FIFO from head; expiry non-decreasing
	head  int
	max   int
	ttl   time.Duration
}

type proofEntry struct {
	proof   [proofSize]byte
	expires time.Time
}

func newProofCache(max int, ttl time.Duration) *proofCache {
	return &proofCache{seen: make(map[[proofSize]byte]struct{}), max: max, ttl: ttl}
}

// add records proof, or reports it as replayed, or reports the cache full.
func (c *proofCache) add(now time.Time, proof [proofSize]byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(now)
	if _, ok := c.seen[proof]; ok {
		return errProofReplayed
	}
	if len(c.seen) >= c.max {
		return errProofCacheFull
	}
	c.seen[proof] = struct{}{}
	exp := now.Add(c.ttl)
	// A clock that stepped back must not break the FIFO order.
	if n := len(c.queue); n > c.head && exp.Before(c.queue[n-1].expires) {
		exp = c.queue[n-1].expires
	}
	c.queue = append(c.queue, proofEntry{proof: proof, expires: exp})
	return nil
}

func (c *proofCache) expire(now time.Time) {
	for c.head < len(c.queue) && !now.Before(c.queue[c.head].expires) {
		delete(c.seen, c.queue[c.head].proof)
		c.queue[c.head] = proofEntry{}
		c.head++
	}
	// Compact once the dead prefix dominates, so the slice does not grow
	// without bound under steady load.
	if c.head > 0 && c.head >= len(c.queue)/2 {
		n := copy(c.queue, c.queue[c.head:])
		clear(c.queue[n:])
		c.queue = c.queue[:n]
		c.head = 0
	}
}

func (c *proofCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}
