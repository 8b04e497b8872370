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
	// maxRequests overrides Config.MaxRequests when non-zero (Attach).
	maxRequests int

	// unlinked is set when the session leaves the registry (replaced or
	// removed): its own requests are refused from then on.
	unlinked atomic.Bool
	// closed is set (first) when the session is removed; read without a
	// lock on the reply path to spot a departed requester.
	closed atomic.Bool

	// Requester side.
	reqMu    sync.Mutex
	reqDone  bool                  // removed: requests is nil and stays so
	requests map[uint64]pending[S] // outstanding requests, by the id this session chose

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

// pending is where an outstanding request went; provider is nil until the
// request is delivered.
type pending[S any] struct {
	provider *Session[S]
	delivery uint64
	channel  uint64
}

// slot is one delivery to a provider. id is 0 while the slot is free.
type slot[S any] struct {
	id        uint64 // gen<<shift | index+1
	gen       uint64 // bumped each time the slot is freed
	requester *Session[S]
	requestID uint64
	channel   uint64
	start     time.Duration // since the router's epoch: one clock read, not time.Now's two
	// provChannel is the channel the delivery travels on to the provider,
	// set by SetProviderChannel: a CANCEL follows the request there.
	provChannel uint64
	// ext: the request reached the provider with its extension block
	// (SetProviderChannel), so its final reply may be a reply delta.
	ext bool
	// replies counts the replies routed so far (Reply.N).
	replies uint32
	// kept is what the daemon keeps to deliver the request again (Keep),
	// until the first reply or the delivery's end.
	kept Kept
	mark uint32 // the Marker's
	// span is the daemon's span of a traced delivery (Trace), ended with
	// the delivery.
	span Span
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

// serves reports whether s serves model.
func (s *Session[S]) serves(model []byte) bool { return s.modelIndex(model) >= 0 }

// modelIndex is model's index in s.models, -1 if s does not serve it.
func (s *Session[S]) modelIndex(model []byte) int {
	for i, m := range s.models {
		if m == string(model) {
			return i
		}
	}
	return -1
}

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
func (s *Session[S]) reserve(id, channel uint64, max int) error {
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
	s.requests[id] = pending[S]{channel: channel}
	return nil
}

// bind records where the reserved request id was delivered.
func (s *Session[S]) bind(id uint64, provider *Session[S], delivery uint64) {
	s.reqMu.Lock()
	if p, ok := s.requests[id]; ok {
		p.provider, p.delivery = provider, delivery
		s.requests[id] = p
	}
	s.reqMu.Unlock()
}

// take forgets the delivered request id if it arrived on channel, and
// returns where it went.
func (s *Session[S]) take(id, channel uint64) (pending[S], bool) {
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	p, ok := s.requests[id]
	if !ok || p.provider == nil || p.channel != channel {
		return pending[S]{}, false
	}
	delete(s.requests, id)
	return p, true
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
func (s *Session[S]) deliver(req *Session[S], requestID, channel uint64, mark uint32, start time.Duration, max int, shift uint) (uint64, error) {
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
	sl.provChannel = 0
	sl.ext = false
	sl.replies = 0
	sl.kept = nil
	sl.mark = mark
	sl.span = nil
	s.outstanding.Add(1)
	return sl.id, nil
}

// lookup finds delivery id and, if end, frees it. The caller releases the
// request on the requester's side and turns Reply.Start into a time.
func (s *Session[S]) lookup(id uint64, end bool, how Outcome, shift uint) (Reply[S], time.Duration, error) {
	s.provMu.Lock()
	defer s.provMu.Unlock()
	if s.provDone {
		return Reply[S]{}, 0, ErrSessionClosed
	}
	sl, i := s.slotLocked(id, shift)
	if sl == nil {
		return Reply[S]{}, 0, ErrUnknownRequest
	}
	rep := Reply[S]{Requester: sl.requester, RequestID: sl.requestID, Channel: sl.channel, End: end, Ext: sl.ext, N: sl.replies, Mark: sl.mark}
	sl.replies++
	sl.dropKept() // a reply has reached the requester's way: never deliver it again
	start := sl.start
	if end {
		s.freeLocked(sl, i, how, shift)
	}
	return rep, start, nil
}

// lose frees delivery id, to which no reply was routed, and returns it
// as an orphan with its kept request (Router.Lose).
func (s *Session[S]) lose(id uint64, shift uint) (Orphan[S], bool) {
	s.provMu.Lock()
	defer s.provMu.Unlock()
	sl, i := s.slotLocked(id, shift)
	if sl == nil || sl.replies > 0 || sl.requester.closed.Load() {
		return Orphan[S]{}, false
	}
	o := Orphan[S]{Requester: sl.requester, RequestID: sl.requestID, Channel: sl.channel, Kept: sl.kept}
	sl.kept = nil // handed over, not dropped
	s.freeLocked(sl, i, OutcomeProviderGone, shift)
	return o, true
}

// slotLocked returns the slot of delivery id, or nil.
func (s *Session[S]) slotLocked(id uint64, shift uint) (*slot[S], uint32) {
	i := id & (uint64(1)<<shift - 1)
	if s.provDone || i == 0 || i > uint64(len(s.slots)) || s.slots[i-1].id != id {
		return nil, 0
	}
	return &s.slots[i-1], uint32(i - 1)
}

func (s *Session[S]) freeLocked(sl *slot[S], i uint32, how Outcome, shift uint) {
	sl.dropKept()
	sl.endSpan(how)
	sl.id = 0
	sl.requester = nil // let a departed requester be collected
	sl.gen = (sl.gen + 1) & (^uint64(0) >> shift)
	s.free = append(s.free, i)
	s.outstanding.Add(-1)
}

// dropKept lets go of what was kept for the delivery.
func (sl *slot[S]) dropKept() {
	if sl.kept != nil {
		sl.kept.Drop()
		sl.kept = nil
	}
}

// keep attaches k to delivery id if no reply has been routed for it yet.
func (s *Session[S]) keep(id uint64, k Kept, shift uint) bool {
	s.provMu.Lock()
	defer s.provMu.Unlock()
	sl, _ := s.slotLocked(id, shift)
	if sl == nil || sl.replies > 0 || sl.kept != nil {
		return false
	}
	sl.kept = k
	return true
}

// remark sets the mark of delivery id, if open.
func (s *Session[S]) remark(id uint64, mark uint32, shift uint) {
	s.provMu.Lock()
	if sl, _ := s.slotLocked(id, shift); sl != nil {
		sl.mark = mark
	}
	s.provMu.Unlock()
}

// endSpan ends the delivery's span, if any.
func (sl *slot[S]) endSpan(how Outcome) {
	if sl.span != nil {
		sl.span.End(how)
		sl.span = nil
	}
}

// trace attaches sp to delivery id if it is still outstanding.
func (s *Session[S]) trace(id uint64, sp Span, shift uint) bool {
	s.provMu.Lock()
	defer s.provMu.Unlock()
	sl, _ := s.slotLocked(id, shift)
	if sl == nil || sl.span != nil {
		return false
	}
	sl.span = sp
	return true
}

// setProviderChannel records the channel of delivery id and whether it
// carried an extension block.
func (s *Session[S]) setProviderChannel(id, ch uint64, ext bool, shift uint) {
	s.provMu.Lock()
	if sl, _ := s.slotLocked(id, shift); sl != nil {
		sl.provChannel, sl.ext = ch, ext
	}
	s.provMu.Unlock()
}

// cancel frees delivery id and returns its channel and mark; false when it
// already ended (its END won the race) or the session was removed.
func (s *Session[S]) cancel(id uint64, shift uint) (uint64, uint32, bool) {
	s.provMu.Lock()
	defer s.provMu.Unlock()
	sl, i := s.slotLocked(id, shift)
	if sl == nil {
		return 0, 0, false
	}
	ch, mark := sl.provChannel, sl.mark
	s.freeLocked(sl, i, OutcomeCancelled, shift)
	return ch, mark, true
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
