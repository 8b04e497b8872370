package router

// Stats is a snapshot for /metrics.
type Stats struct {
	// Sessions is the number of registered sessions (gauge).
	Sessions int
	// Retiring is the number of replaced or unlinked sessions not yet
	// removed (gauge). It stays above zero only if the daemon forgets a
	// Remove.
	Retiring int
	// Models is the number of distinct (org, model) pairs served (gauge).
	Models int
	// Pending is the number of deliveries awaiting their END, over all
	// providers (gauge).
	Pending int
	// Failures counts, per Reason, the messages the router refused or
	// dropped and, for ErrAgentGone, the orphans it returned (counters,
	// since New). Every Reason is present.
	Failures map[Reason]uint64
}

// Stats takes a snapshot. It costs one pass over the registered sessions;
// call it at scrape time, not per message.
func (r *Router[S]) Stats() Stats {
	st := Stats{Failures: make(map[Reason]uint64, numReasons-1)}
	for reason := Reason(1); reason < numReasons; reason++ {
		st.Failures[reason] = r.failures[reason].Load()
	}
	r.mu.RLock()
	st.Retiring = len(r.retiring)
	for _, ns := range r.orgs {
		st.Sessions += len(ns.agents)
		st.Models += len(ns.models)
		for _, s := range ns.agents {
			st.Pending += int(s.outstanding.Load())
		}
	}
	for s := range r.retiring {
		st.Pending += int(s.outstanding.Load())
	}
	r.mu.RUnlock()
	return st
}

// Failures returns one failure counter; cheap enough for a Prometheus
// CounterFunc per reason.
func (r *Router[S]) Failures(reason Reason) uint64 {
	if reason == 0 || reason >= numReasons {
		return 0
	}
	return r.failures[reason].Load()
}
