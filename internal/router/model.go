package router

import "sync/atomic"

// modelRoute is the set of sessions serving one model. providers is written
// only under the registry's write lock and read under its read lock.
type modelRoute[S any] struct {
	providers []*Session[S]
	last      atomic.Int32 // index of the previous pick: round robin among ties
}

// pick returns the provider with the fewest outstanding deliveries, skipping
// self, or nil with the reason: ErrNoRoute when self is the only provider,
// ErrProviderBusy when every candidate has max deliveries outstanding.
//
// Ties go round robin: the scan starts just after the previous pick and keeps
// the first minimum it meets, so among equally loaded providers the next one
// after the last chosen wins, however the others are loaded. Concurrent picks
// may start from the same place and choose the same provider; that only
// makes the loads differ for the next pick.
//
// prefer, when it is among the providers (and not self), wins over the least
// loaded while its outstanding deliveries are at most AffinityFactor times
// the least loaded's plus one, and below max (package doc, "Affinity").
func (m *modelRoute[S]) pick(self *Session[S], max int, prefer *Session[S]) (*Session[S], error) {
	n := len(m.providers)
	j := int(m.last.Load()) + 1
	best := -1
	var bestLoad int64
	preferLoad := int64(-1)
	for range n {
		if j >= n {
			j = 0
		}
		if p := m.providers[j]; p != self {
			load := p.outstanding.Load()
			if best < 0 || load < bestLoad {
				best, bestLoad = j, load
			}
			if p == prefer {
				preferLoad = load
			}
		}
		j++
	}
	switch {
	case best < 0:
		return nil, ErrNoRoute
	case preferLoad >= 0 && preferLoad < int64(max) && preferLoad <= AffinityFactor*bestLoad+1:
		// The round robin position stays: the preferred provider's
		// conversation is not a turn taken from the others.
		return prefer, nil
	case bestLoad >= int64(max):
		return nil, ErrProviderBusy
	}
	m.last.Store(int32(best))
	return m.providers[best], nil
}

// AffinityFactor bounds how much busier than the least loaded provider the
// provider holding a conversation may be and still take its next request:
// it does while outstanding(preferred) ≤ AffinityFactor × outstanding(least
// loaded) + 1. Beyond that, reusing its cache is not worth the queueing.
const AffinityFactor = 2

// remove drops s from the providers, keeping the others' order, and reports
// whether none remain.
func (m *modelRoute[S]) remove(s *Session[S]) (empty bool) {
	for i, p := range m.providers {
		if p == s {
			last := len(m.providers) - 1
			copy(m.providers[i:], m.providers[i+1:])
			m.providers[last] = nil
			m.providers = m.providers[:last]
			break
		}
	}
	return len(m.providers) == 0
}
