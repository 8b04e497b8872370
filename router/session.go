package router

import (
	"sync"
	"sync/atomic"
	"time"
)

// Session is the router's handle for one registered session. The daemon
// keeps it beside its own session and passes it to every route call; the
// router hands sessions back in Delivery, Reply and Orphan so the daemon
// reaches its own value through Value.
//
// A session plays two roles at once: requester (the requests it sent and
// that are not yet ended) and provider (the deliveries sent to it and not
// yet ended). Each role has its own lock so that a session's own traffic and
// the traffic of others towards it do not contend.
type Session[S any] struct {
	value   S
	org     string
	agentID string
	models  []string
	ns      *namespace[S] // the org's namespace; set by Register

	// unlinked is set when the session leaves the registry (replaced or
	// removed): its own requests are refused from then on.
	unlinked atomic.Bool
	// closed is set (first) when the session is removed; read without a
	// lock on the reply path to spot a departed requester.
	closed atomic.Bool

	// Requester side.
	reqMu    sync.Mutex
	reqDone  bool                // removed: requests is nil and stays so
	requests map[uint64]struct{} // outstanding request ids chosen by this session

	_ [64]byte // keep the provider side's hot fields off the requester's cache line

	// Provider side.
	// outstanding mirrors len(slots)-len(free); it is written under provMu
	// and read without a lock by the model picker.
	outstanding atomic.Int64
	provMu      sync.Mutex
	provDone    bool
	slots       []slot[S] // indexed by delivery id's low bits - 1
	free        []uint32  // indices of free slots, used as a stack
}

// slot is one delivery to a provider. id is 0 while the slot is free.
type slot[S any] struct {
	id        uint64 // gen<<shift | index+1
	gen       uint64 // bumped each time the slot is freed
	requester *Session[S]
	requestID uint64
	channel   uint64
	start     time.Duration // since the router's epoch: one clock read, not time.Now's two
}

// Value returns the value the daemon registered the session with.
func (s *Session[S]) Value() S { return s.value }

// Org returns the org the session registered under ("" in open mode).
func (s *Session[S]) Org() string { return s.org }

// AgentID returns the agent id the session registered under.
func (s *Session[S]) AgentID() string { return s.agentID }

// Models returns the models the session serves (deduplicated, in
// registration order). The slice is shared; do not modify it.
func (s *Session[S]) Models() []string { return s.models }

// Closed reports whether the session was removed.
func (s *Session[S]) Closed() bool { return s.closed.Load() }

// Replaced reports whether a newer session took the agent id (or the session
// was removed): nothing is routed to it and its requests are refused.
func (s *Session[S]) Replaced() bool { return s.unlinked.Load() }

// Outstanding returns the number of deliveries sent to this session as a
// provider whose END has not arrived.
func (s *Session[S]) Outstanding() int { return int(s.outstanding.Load()) }

// Requests returns the number of requests this session made whose END (or
// failure) has not arrived.
func (s *Session[S]) Requests() int {
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	return len(s.requests)
}

// reserve claims id among s's outstanding requests.
func (s *Session[S]) reserve(id uint64, max int) error {
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	switch {
	case s.reqDone || s.unlinked.Load():
		return ErrSessionClosed
	case len(s.requests) >= max:
		// Checked before the duplicate: both refuse, and the cap is the
		// cheaper test.
		return ErrTooManyRequests
	}
	if _, dup := s.requests[id]; dup {
		return ErrDuplicateRequest
	}
	s.requests[id] = struct{}{}
	return nil
}

// release forgets id among s's outstanding requests (END, failure, orphan).
func (s *Session[S]) release(id uint64) {
	s.reqMu.Lock()
	if !s.reqDone {
		delete(s.requests, id)
	}
	s.reqMu.Unlock()
}

// deliver records a delivery to s (as provider) and returns its id.
func (s *Session[S]) deliver(req *Session[S], requestID, channel uint64, start time.Duration, max int, shift uint) (uint64, error) {
	s.provMu.Lock()
	defer s.provMu.Unlock()
	if s.provDone {
		// Unreachable while the caller holds the registry read lock and
		// found s registered; kept so that a future caller cannot insert
		// into a removed session's table.
		return 0, ErrAgentGone
	}
	var i uint32
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
	} else if len(s.slots) < max {
		i = uint32(len(s.slots))
		s.slots = append(s.slots, slot[S]{})
	} else {
		return 0, ErrProviderBusy
	}
	sl := &s.slots[i]
	sl.id = sl.gen<<shift | uint64(i+1)
	sl.requester = req
	sl.requestID = requestID
	sl.channel = channel
	sl.start = start
	s.outstanding.Add(1)
	return sl.id, nil
}

// lookup finds delivery id and, if end, frees it. The caller releases the
// request on the requester's side and turns Reply.Start into a time.
func (s *Session[S]) lookup(id uint64, end bool, shift uint) (Reply[S], time.Duration, error) {
	mask := uint64(1)<<shift - 1
	s.provMu.Lock()
	defer s.provMu.Unlock()
	if s.provDone {
		return Reply[S]{}, 0, ErrSessionClosed
	}
	i := id & mask
	if i == 0 || i > uint64(len(s.slots)) {
		return Reply[S]{}, 0, ErrUnknownRequest
	}
	sl := &s.slots[i-1]
	if sl.id != id {
		return Reply[S]{}, 0, ErrUnknownRequest
	}
	rep := Reply[S]{Requester: sl.requester, RequestID: sl.requestID, Channel: sl.channel, End: end}
	start := sl.start
	if end {
		sl.id = 0
		sl.requester = nil // let a departed requester be collected
		sl.gen = (sl.gen + 1) & (^uint64(0) >> shift)
		s.free = append(s.free, uint32(i-1))
		s.outstanding.Add(-1)
	}
	return rep, start, nil
}

// closeProvider marks s removed as a provider and returns the deliveries it
// will never answer. Called once, by Router.close.
func (s *Session[S]) closeProvider() []slot[S] {
	s.provMu.Lock()
	defer s.provMu.Unlock()
	s.provDone = true
	var open []slot[S]
	for _, sl := range s.slots {
		if sl.id != 0 {
			open = append(open, sl)
		}
	}
	s.slots, s.free = nil, nil
	s.outstanding.Store(0)
	return open
}

// closeRequester forgets every request s made.
func (s *Session[S]) closeRequester() {
	s.reqMu.Lock()
	s.reqDone = true
	s.requests = nil
	s.reqMu.Unlock()
}
