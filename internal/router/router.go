package router

import (
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Router routes DATA messages between registered sessions. S is the daemon's
// own session type, handed back through Session.Value. All methods are safe
// for concurrent use.
type Router[S any] struct {
	cfg   Config
	shift uint      // delivery ids keep slot index+1 in their low shift bits
	epoch time.Time // carries a monotonic reading; start times are offsets from it

	mu sync.RWMutex
	// orgs holds one namespace per org: agent ids and models are looked up
	// only within the requester's org. Namespaces are never deleted; their
	// number is bounded by the daemon's configured orgs (one, "", in open
	// mode).
	orgs map[string]*namespace[S]
	// retiring holds sessions replaced by a newer registration, or leaving
	// (Unlink), and not yet removed: unreachable, but still answering their
	// deliveries.
	retiring map[*Session[S]]struct{}

	failures [numReasons]atomic.Uint64

	marker Marker[S]
}

// Marker tags a delivery as it is made, with the provider chosen: the tag
// (Mark) comes back with each of its replies and with its end (Reply,
// Orphan, Cancelled), so that the daemon can keep figures per delivery
// without a table of its own. model is the index of the request's model
// (its routing header's) in provider.Models(), -1 when the request names no
// model or one the provider did not register (an addressed request). It is
// called under the router's read lock, so it must be quick and must not
// call the router.
type Marker[S any] func(requester, provider *Session[S], model int) uint32

// SetMarker sets the Marker; call it before routing anything. Without one
// every Mark is 0.
func (r *Router[S]) SetMarker(m Marker[S]) { r.marker = m }

// Remark replaces the mark of provider's delivery deliveryID, if it is
// still open: its later replies and its end carry the new one.
func (r *Router[S]) Remark(provider *Session[S], deliveryID uint64, mark uint32) {
	provider.remark(deliveryID, mark, r.shift)
}

// New returns an empty router.
func New[S any](cfg Config) *Router[S] {
	cfg = cfg.effective()
	return &Router[S]{
		cfg:      cfg,
		shift:    uint(bits.Len(uint(cfg.MaxDeliveries))),
		epoch:    time.Now(),
		orgs:     make(map[string]*namespace[S]),
		retiring: make(map[*Session[S]]struct{}),
	}
}

// Request is what the router needs from a request (DATA without REPLY).
type Request struct {
	// ID is the request_id the requester chose (non-zero).
	ID uint64
	// Channel is the channel the request arrived on; its replies go back
	// there.
	Channel uint64
	// Peer is the addressed agent id; empty routes by Model.
	Peer []byte
	// Model is the model from the frame's routing header. Only read when
	// Peer is empty and HasRoutingHeader is set.
	Model []byte
	// HasRoutingHeader is set for M2M v1 frames of schema 01 (Request) or
	// 04 (EmbeddingRequest), the only frames that name a model; TokenNative
	// and other schemas travel only when addressed.
	HasRoutingHeader bool
	// Prefer is the agent id of the provider that holds this request's
	// conversation (the daemon's affinity map), empty if none; only read
	// when routing by model. See "Affinity" in the package doc.
	Prefer string
	// Require: only Prefer may take the request (a delta frame, which only
	// the holder of its base can read); ErrBaseMissing when Prefer is not
	// registered in the requester's org or does not serve the model.
	Require bool
}

// Affinity says how Prefer was used, for the daemon's metrics.
type Affinity uint8

const (
	// AffinityNone: the request preferred no provider.
	AffinityNone Affinity = iota
	// AffinityKept: the request went to the provider it preferred.
	AffinityKept
	// AffinitySpread: the preferred provider was gone, did not serve the
	// model, or was too loaded; the least loaded provider took the request.
	AffinitySpread
)

// Delivery is where a request goes: the daemon sends it to Provider with
// request_id = ID and peer = the requester's agent id.
type Delivery[S any] struct {
	Provider *Session[S]
	ID       uint64
	// Affinity is how the request's Prefer was used.
	Affinity Affinity
}

// Reply is where a provider's reply goes: to Requester on Channel, with
// request_id = RequestID and peer = the provider's agent id.
type Reply[S any] struct {
	Requester *Session[S]
	RequestID uint64
	Channel   uint64
	// Start is when the request was routed (with a monotonic reading, so
	// time.Since(Start) at End is the request's latency).
	Start time.Time
	// End repeats the END flag the reply was routed with: this was the
	// request's last reply and its mapping is gone.
	End bool
	// Ext is what SetProviderChannel recorded: the request reached the
	// provider with its extension block.
	Ext bool
	// N is the reply's place among the delivery's replies, from 0: a
	// cluster node forwarding them says it, so that the requester's node
	// sees one lost on the way (daemon/clusterinbound.go).
	N uint32
	// Mark is what the Marker said of the delivery.
	Mark uint32
}

// Orphan is a request whose provider left before its final reply: the
// daemon sends Requester an agent_gone error reply with RequestID on
// Channel, or routes the request again (failover) when Kept holds it. The
// request id is already free for reuse.
type Orphan[S any] struct {
	Requester *Session[S]
	RequestID uint64
	Channel   uint64
	// Replies is how many replies to the request were routed before its
	// provider left.
	Replies uint32
	// Kept is what the daemon attached with Keep, nil if nothing or if a
	// reply was routed: the caller owns it now and must Drop it.
	Kept Kept
	// Mark is what the Marker said of the delivery.
	Mark uint32
}

// Kept is what the daemon keeps beside a delivery to deliver its request
// again if the provider is lost before replying (Keep).
type Kept interface {
	// Drop lets go of it. The router calls it, under a lock, when the
	// delivery's first reply is routed or the delivery ends otherwise
	// (END, Abort, Cancel); it must be quick and must not call the router.
	Drop()
}

// namespace is one org's agents and models.
type namespace[S any] struct {
	agents map[string]*Session[S]
	models map[string]*modelRoute[S]
}

// Register adds a session under (org, agentID), serving models (may be
// empty: a pure requester), carrying the daemon's value. org is the org the
// agent authenticated as, "" for the open namespace of a daemon without org
// secrets. An identity is the pair: the session is reachable only from
// sessions of the same org, by agent id or by model, and it replaces only a
// session of the same org and agent id.
//
// If another session held (org, agentID), it is returned as replaced: from now on
// nothing is routed to it, by agent id or by model, and its requests are
// refused with ErrSessionClosed, but replies to the deliveries it already
// has are still routed until the daemon calls Remove(replaced), which
// returns them as orphans (agent_gone). The daemon sends replaced CLOSE
// REPLACED and removes it like any departing session (see Remove).
func (r *Router[S]) Register(org, agentID string, models []string, value S) (sess, replaced *Session[S], err error) {
	return r.RegisterIf(org, agentID, models, value, nil)
}

// RegisterIf is Register with a replacement policy: when (org, agentID) is
// held, mayReplace (called under the registry lock, so it must be quick and
// must not call the router) decides from the holder whether the new session
// takes the id; if not, nothing changes and the error is ErrAgentIDTaken.
// A nil mayReplace always replaces.
func (r *Router[S]) RegisterIf(org, agentID string, models []string, value S, mayReplace func(holder *Session[S]) bool) (sess, replaced *Session[S], err error) {
	if err := validAgentID(agentID); err != nil {
		return nil, nil, err
	}
	if org != "" {
		if err := validOrg(org); err != nil {
			return nil, nil, err
		}
	}
	models, err = cleanModels(models)
	if err != nil {
		return nil, nil, err
	}
	sess = &Session[S]{
		value:    value,
		org:      org,
		agentID:  agentID,
		models:   models,
		requests: make(map[uint64]pending[S]),
	}

	r.mu.Lock()
	ns := r.namespaceLocked(org)
	sess.ns = ns
	if old := ns.agents[agentID]; old != nil && mayReplace != nil && !mayReplace(old) {
		r.mu.Unlock()
		return nil, nil, ErrAgentIDTaken
	}
	if old := ns.agents[agentID]; old != nil {
		r.unlinkLocked(old)
		r.retiring[old] = struct{}{}
		replaced = old
	}
	ns.agents[agentID] = sess
	for _, m := range models {
		route := ns.models[m]
		if route == nil {
			route = &modelRoute[S]{}
			ns.models[m] = route
		}
		route.providers = append(route.providers, sess)
	}
	r.mu.Unlock()
	return sess, replaced, nil
}

// Attach adds a session of org that makes requests but cannot be reached:
// it has no place among the org's agents or models, so nothing is routed to
// it except replies to its own requests. The daemon uses one per other
// cluster node and org, for the requests that node forwards; agentID only
// names it. maxRequests bounds its outstanding requests (0:
// Config.MaxRequests). Remove it like any session; it has no orphans, and
// its requests are forgotten.
func (r *Router[S]) Attach(org, agentID string, value S, maxRequests int) *Session[S] {
	s := &Session[S]{
		value:       value,
		org:         org,
		agentID:     agentID,
		requests:    make(map[uint64]pending[S]),
		maxRequests: maxRequests,
	}
	r.mu.Lock()
	s.ns = r.namespaceLocked(org)
	r.mu.Unlock()
	return s
}

func (r *Router[S]) namespaceLocked(org string) *namespace[S] {
	ns := r.orgs[org]
	if ns == nil {
		ns = &namespace[S]{agents: make(map[string]*Session[S]), models: make(map[string]*modelRoute[S])}
		r.orgs[org] = ns
	}
	return ns
}

// Remove unregisters s when its session ends (or after it was replaced):
// nothing can be routed to or from it any more, its outstanding deliveries
// are returned as orphans (send each requester agent_gone), and the
// requests it made are forgotten (their replies will be dropped as
// ErrRequesterGone). Removing a session twice returns nil.
//
// Call Remove from the goroutine that routes s's messages, after it has
// stopped routing them and has handed on the last reply it routed. Then
// every reply routed from s reaches its requester before the agent_gone for
// that request, never after it (the requester may reuse the id as soon as
// it sees agent_gone). Called from elsewhere, the router's tables stay
// consistent but that ordering is lost.
func (r *Router[S]) Remove(s *Session[S]) []Orphan[S] {
	r.mu.Lock()
	if s.ns.agents[s.agentID] == s {
		r.unlinkLocked(s)
	}
	delete(r.retiring, s)
	r.mu.Unlock()
	return r.close(s)
}

// Unlink makes s unreachable, as Remove does, while its outstanding
// deliveries go on: their replies are routed, and Remove later returns
// those still open as orphans. The daemon calls it when an agent says it
// is leaving (CLOSE), so that no new request is routed to a session that
// can no longer take it; such a request finds another provider, or the
// error it would get once the agent had gone. Unlinking a session that is
// not registered (already unlinked, replaced, removed, or attached) does
// nothing.
func (r *Router[S]) Unlink(s *Session[S]) {
	r.mu.Lock()
	if s.ns.agents[s.agentID] == s {
		r.unlinkLocked(s)
		r.retiring[s] = struct{}{}
	}
	r.mu.Unlock()
}

// unlinkLocked makes s unreachable by agent id and by model and refuses
// its further requests.
func (r *Router[S]) unlinkLocked(s *Session[S]) {
	s.unlinked.Store(true)
	delete(s.ns.agents, s.agentID)
	for _, m := range s.models {
		if route := s.ns.models[m]; route != nil && route.remove(s) {
			delete(s.ns.models, m)
		}
	}
}

// close marks an unlinked session removed and collects its orphans.
func (r *Router[S]) close(s *Session[S]) []Orphan[S] {
	if s.closed.Swap(true) {
		return nil
	}
	s.closeRequester()
	open := s.closeProvider()
	var orphans []Orphan[S]
	for _, sl := range open {
		// A requester that left too has nobody to tell; its request ids
		// are gone with it.
		sl.endSpan(OutcomeProviderGone)
		if sl.requester.closed.Load() {
			sl.dropKept()
			continue
		}
		sl.requester.release(sl.requestID)
		orphans = append(orphans, Orphan[S]{Requester: sl.requester, RequestID: sl.requestID, Channel: sl.channel, Replies: sl.replies, Kept: sl.kept, Mark: sl.mark})
	}
	r.failures[ErrAgentGone].Add(uint64(len(orphans)))
	return orphans
}

// RouteRequest chooses the provider of a request from requester and records
// the delivery. On error, the daemon answers the requester with an error
// reply of code reason.Code() (see the package doc), except for
// ErrSessionClosed.
func (r *Router[S]) RouteRequest(requester *Session[S], req Request) (Delivery[S], error) {
	d, err := r.routeRequest(requester, &req)
	if err != nil {
		r.count(err)
	}
	return d, err
}

func (r *Router[S]) routeRequest(requester *Session[S], req *Request) (Delivery[S], error) {
	if req.ID == 0 || len(req.Peer) == 0 && !req.HasRoutingHeader {
		return Delivery[S]{}, ErrBadFrame
	}
	maxReq := r.cfg.MaxRequests
	if requester.maxRequests > 0 {
		maxReq = requester.maxRequests
	}
	if err := requester.reserve(req.ID, req.Channel, maxReq); err != nil {
		return Delivery[S]{}, err
	}
	start := time.Since(r.epoch)

	// The read lock is held until the delivery is recorded: Remove unlinks
	// a session under the write lock before closing it, so a provider found
	// here cannot be closed under us and its orphans will include this
	// delivery.
	r.mu.RLock()
	var provider *Session[S]
	var err error
	aff := AffinityNone
	ns := requester.ns // the requester's org: no route leaves it
	if len(req.Peer) > 0 {
		if provider = ns.agents[string(req.Peer)]; provider == nil {
			err = ErrUnknownAgent
		}
	} else if req.Require {
		provider, err = ns.required(requester, req, r.cfg.MaxDeliveries)
		aff = AffinityKept
	} else if route := ns.models[string(req.Model)]; route == nil {
		err = ErrNoRoute
	} else {
		var prefer *Session[S]
		if req.Prefer != "" {
			prefer = ns.agents[req.Prefer]
			aff = AffinitySpread
		}
		provider, err = route.pick(requester, r.cfg.MaxDeliveries, prefer)
		if prefer != nil && provider == prefer {
			aff = AffinityKept
		}
	}
	var id uint64
	if err == nil {
		var mark uint32
		if r.marker != nil {
			model := -1
			if req.HasRoutingHeader {
				model = provider.modelIndex(req.Model)
			}
			mark = r.marker(requester, provider, model)
		}
		id, err = provider.deliver(requester, req.ID, req.Channel, mark, start, r.cfg.MaxDeliveries, r.shift)
	}
	r.mu.RUnlock()

	if err != nil {
		requester.release(req.ID)
		return Delivery[S]{}, err
	}
	requester.bind(req.ID, provider, id)
	return Delivery[S]{Provider: provider, ID: id, Affinity: aff}, nil
}

// required returns the provider a Require request must go to: the
// registered session req.Prefer, serving req.Model, not the requester.
func (ns *namespace[S]) required(requester *Session[S], req *Request, max int) (*Session[S], error) {
	p := ns.agents[req.Prefer]
	if p == nil || p == requester || !req.HasRoutingHeader || !p.serves(req.Model) {
		return nil, ErrBaseMissing
	}
	if p.outstanding.Load() >= int64(max) {
		return nil, ErrProviderBusy
	}
	return p, nil
}

// SetProviderChannel records the channel the daemon sends delivery
// deliveryID on, so that Cancel can say where its CANCEL goes (behind the
// request, on the same channel), and ext: the request goes to the provider
// with its extension block (feature delta), so its final reply may be a
// reply delta (Reply.Ext).
func (r *Router[S]) SetProviderChannel(provider *Session[S], deliveryID, channel uint64, ext bool) {
	provider.setProviderChannel(deliveryID, channel, ext, r.shift)
}

// Keep attaches k to delivery deliveryID of provider until the delivery's
// first reply is routed or it ends (then k.Drop is called), or until the
// provider is removed (then the Orphan carries it). It reports false, and
// keeps nothing, when the delivery has ended, already has a reply, or
// already keeps something: the caller then drops k itself.
func (r *Router[S]) Keep(provider *Session[S], deliveryID uint64, k Kept) bool {
	return provider.keep(deliveryID, k, r.shift)
}

// Span is the daemon's span of a traced delivery (Trace).
type Span interface {
	// End ends it with how the delivery ended. The router calls it once,
	// under a lock: it must be quick and must not call the router.
	End(how Outcome)
}

// Outcome is how a delivery ended, for its Span.
type Outcome uint8

const (
	// OutcomeEnd: its provider's final reply was routed (RouteReply).
	OutcomeEnd Outcome = iota
	// OutcomeAborted: the daemon ended it with an error (Abort).
	OutcomeAborted
	// OutcomeCancelled: its requester cancelled it (Cancel).
	OutcomeCancelled
	// OutcomeProviderGone: its provider was removed before its final
	// reply (Remove, Lose; the request may be delivered again elsewhere).
	OutcomeProviderGone
)

// Trace attaches sp to delivery deliveryID of provider: the router ends it
// when the delivery ends, however it ends. It reports false, and keeps
// nothing, when the delivery has already ended: the caller ends sp itself.
func (r *Router[S]) Trace(provider *Session[S], deliveryID uint64, sp Span) bool {
	return provider.trace(deliveryID, sp, r.shift)
}

// Cancelled is a request that Cancel ended: the daemon sends Provider a
// CANCEL for DeliveryID on ProviderChannel, if the provider negotiated the
// feature.
type Cancelled[S any] struct {
	Provider        *Session[S]
	DeliveryID      uint64
	ProviderChannel uint64
	// Mark is what the Marker said of the delivery.
	Mark uint32
}

// Cancel ends the requester's outstanding request requestID, which must
// have arrived on channel (docs/protocol.md §4.1): both the requester's
// request and the provider's delivery are freed at once, and the provider's
// later replies to it are unknown (dropped as ErrUnknownRequest). It
// returns ErrUnknownRequest when there is no such request on that channel,
// or when its END or its provider's departure ended it first: then the
// requester gets (or has got) that END, and the CANCEL is ignored.
func (r *Router[S]) Cancel(requester *Session[S], requestID, channel uint64) (Cancelled[S], error) {
	p, ok := requester.take(requestID, channel)
	if !ok {
		return Cancelled[S]{}, ErrUnknownRequest
	}
	pch, mark, ok := p.provider.cancel(p.delivery, r.shift)
	if !ok {
		return Cancelled[S]{}, ErrUnknownRequest
	}
	return Cancelled[S]{Provider: p.provider, DeliveryID: p.delivery, ProviderChannel: pch, Mark: mark}, nil
}

// RouteReply maps a reply from provider, whose request_id is deliveryID,
// back to its requester. end is the reply's END flag: the mapping is removed
// with it. On error the reply is dropped (and counted), never answered.
func (r *Router[S]) RouteReply(provider *Session[S], deliveryID uint64, end bool) (Reply[S], error) {
	return r.routeReply(provider, deliveryID, end, OutcomeEnd)
}

func (r *Router[S]) routeReply(provider *Session[S], deliveryID uint64, end bool, how Outcome) (Reply[S], error) {
	rep, start, err := provider.lookup(deliveryID, end, how, r.shift)
	if err != nil {
		r.count(err)
		return Reply[S]{}, err
	}
	rep.Start = r.epoch.Add(start)
	if end {
		rep.Requester.release(rep.RequestID)
	}
	if rep.Requester.closed.Load() {
		// rep still says which delivery it was (Mark, End), though there is
		// nobody to send it to.
		r.count(ErrRequesterGone)
		return rep, ErrRequesterGone
	}
	return rep, nil
}

// Abort removes a delivery the daemon could not hand to its provider (the
// provider's send queue was full, or sending failed), as if its END had
// arrived, and returns where to send the requester the error. Errors are
// those of RouteReply and mean there is nobody to tell: the requester left,
// or the provider was removed and the request is already among its orphans.
func (r *Router[S]) Abort(provider *Session[S], deliveryID uint64) (Reply[S], error) {
	return r.routeReply(provider, deliveryID, true, OutcomeAborted)
}

// Lose ends delivery deliveryID of provider as lost before any reply to
// it was routed (its provider's node says so, before the provider's
// removal reaches this node): the request is handed back as an orphan,
// with what was kept for it (the caller owns Kept and must Drop it), as
// Remove would hand it back. False when the delivery has already ended,
// a reply to it was routed, or its requester left: then nothing changes.
func (r *Router[S]) Lose(provider *Session[S], deliveryID uint64) (Orphan[S], bool) {
	o, ok := provider.lose(deliveryID, r.shift)
	if !ok {
		return Orphan[S]{}, false
	}
	o.Requester.release(o.RequestID)
	r.failures[ErrAgentGone].Add(1)
	return o, true
}

// Lookup returns the session registered under (org, agentID), if any.
func (r *Router[S]) Lookup(org, agentID string) (*Session[S], bool) {
	r.mu.RLock()
	var s *Session[S]
	if ns := r.orgs[org]; ns != nil {
		s = ns.agents[agentID]
	}
	r.mu.RUnlock()
	return s, s != nil
}

// Models returns the models that sessions of org serve now, sorted. A
// session's models disappear with its Remove (or its replacement).
func (r *Router[S]) Models(org string) []string {
	r.mu.RLock()
	var out []string
	if ns := r.orgs[org]; ns != nil {
		out = make([]string, 0, len(ns.models))
		for m := range ns.models {
			out = append(out, m)
		}
	}
	r.mu.RUnlock()
	slices.Sort(out)
	return out
}

// empty reports whether no session is registered or retiring (tests).
func (r *Router[S]) empty() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, ns := range r.orgs {
		if len(ns.agents) != 0 || len(ns.models) != 0 {
			return false
		}
	}
	return len(r.retiring) == 0
}

func (r *Router[S]) count(err error) {
	if reason, ok := err.(Reason); ok && reason < numReasons {
		r.failures[reason].Add(1)
	}
}
