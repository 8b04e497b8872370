package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// The property test drives the router with random operations from a few
// sessions and checks every answer against a plain reference model: who may
// be chosen, which reason is returned, where replies go, what Remove
// orphans. At the end every session is removed and nothing may be left:
// no pending delivery, no outstanding request, no agent, no model.

type refDelivery struct {
	req     *refSession
	reqID   uint64
	channel uint64
}

type refSession struct {
	s          *Session[string]
	agent      string
	models     []string
	unlinked   bool // replaced or removed
	closed     bool // removed
	requests   map[uint64]bool
	deliveries map[uint64]refDelivery
	ended      []uint64 // delivery ids that got their END: never handed out again
}

type refModel struct {
	t       *testing.T
	cfg     Config
	r       *Router[string]
	rng     *rand.Rand
	all     []*refSession
	byAgent map[string]*refSession
	want    map[Reason]uint64 // expected failure counters
}

var (
	propAgents = []string{"a", "b", "c", "d", "e"}
	propModels = []string{"m1", "m2", "m3"}
)

func TestPropertyAgainstReference(t *testing.T) {
	seeds := 120
	if testing.Short() {
		seeds = 50
	}
	for seed := range uint64(seeds) {
		m := &refModel{
			t:       t,
			cfg:     Config{MaxRequests: 4, MaxDeliveries: 3},
			rng:     rand.New(rand.NewPCG(seed, 42)),
			byAgent: make(map[string]*refSession),
			want:    make(map[Reason]uint64),
		}
		m.r = New[string](m.cfg)
		for step := range 400 {
			m.step()
			m.checkCounts(fmt.Sprintf("seed %d step %d", seed, step))
			if t.Failed() {
				t.Fatalf("seed %d failed at step %d", seed, step)
			}
		}
		m.finish()
		if t.Failed() {
			t.Fatalf("seed %d failed at the end", seed)
		}
	}
}

func (m *refModel) step() {
	switch n := m.rng.IntN(100); {
	case n < 8 || len(m.all) == 0:
		m.register()
	case n < 12:
		m.remove(m.all[m.rng.IntN(len(m.all))])
	case n < 60:
		m.request()
	default:
		m.reply()
	}
}

func (m *refModel) register() {
	agent := propAgents[m.rng.IntN(len(propAgents))]
	var models []string
	for _, mod := range propModels {
		if m.rng.IntN(2) == 0 {
			models = append(models, mod)
		}
	}
	s, replaced, err := m.r.Register("", agent, models, agent)
	if err != nil {
		m.t.Fatalf("Register: %v", err)
	}
	old := m.byAgent[agent]
	if (old == nil) != (replaced == nil) || old != nil && old.s != replaced {
		m.t.Fatalf("Register(%s) replaced %v, want %v", agent, replaced, old)
	}
	if old != nil {
		old.unlinked = true
		if !old.s.Replaced() || old.s.Closed() {
			m.t.Fatal("replaced session's state is wrong")
		}
	}
	rs := &refSession{s: s, agent: agent, models: models, requests: map[uint64]bool{}, deliveries: map[uint64]refDelivery{}}
	m.all = append(m.all, rs)
	m.byAgent[agent] = rs
}

func (m *refModel) remove(rs *refSession) {
	orphans := m.r.Remove(rs.s)
	if rs.closed {
		if orphans != nil {
			m.t.Fatalf("Remove of a closed session returned %v", orphans)
		}
		return
	}
	if m.byAgent[rs.agent] == rs {
		delete(m.byAgent, rs.agent)
	}
	rs.unlinked = true
	m.checkOrphans(rs, orphans)
}

// checkOrphans closes rs in the model and compares the orphans.
func (m *refModel) checkOrphans(rs *refSession, orphans []Orphan[string]) {
	rs.closed = true
	if !rs.s.Closed() {
		m.t.Fatal("removed session does not report Closed")
	}
	var want, got []string
	for _, d := range rs.deliveries {
		if !d.req.closed {
			want = append(want, fmt.Sprintf("%p/%d/%d", d.req.s, d.reqID, d.channel))
			delete(d.req.requests, d.reqID)
		}
	}
	for _, o := range orphans {
		got = append(got, fmt.Sprintf("%p/%d/%d", o.Requester, o.RequestID, o.Channel))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		m.t.Fatalf("orphans of %s = %v, want %v", rs.agent, got, want)
	}
	m.want[ErrAgentGone] += uint64(len(want))
	rs.deliveries = map[uint64]refDelivery{}
	rs.requests = map[uint64]bool{}
}

func (m *refModel) request() {
	from := m.all[m.rng.IntN(len(m.all))]
	req := Request{ID: uint64(m.rng.IntN(7)), Channel: m.rng.Uint64N(1 << 20), HasRoutingHeader: m.rng.IntN(8) != 0}
	if m.rng.IntN(2) == 0 {
		req.Peer = []byte(propAgents[m.rng.IntN(len(propAgents))] + []string{"", "", "", "x"}[m.rng.IntN(4)])
	}
	req.Model = []byte(propModels[m.rng.IntN(len(propModels))] + []string{"", "", "", "x"}[m.rng.IntN(4)])

	// What the reference says may happen.
	var wantErr Reason
	var allowed []*refSession
	switch {
	case req.ID == 0 || len(req.Peer) == 0 && !req.HasRoutingHeader:
		wantErr = ErrBadFrame
	case from.unlinked:
		wantErr = ErrSessionClosed
	case len(from.requests) >= m.cfg.MaxRequests:
		wantErr = ErrTooManyRequests
	case from.requests[req.ID]:
		wantErr = ErrDuplicateRequest
	case len(req.Peer) > 0:
		p := m.byAgent[string(req.Peer)]
		switch {
		case p == nil:
			wantErr = ErrUnknownAgent
		case len(p.deliveries) >= m.cfg.MaxDeliveries:
			wantErr = ErrProviderBusy
		default:
			allowed = []*refSession{p}
		}
	default:
		least := -1
		for _, agent := range propAgents {
			p := m.byAgent[agent]
			if p == nil || p == from || !slices.Contains(p.models, string(req.Model)) {
				continue
			}
			switch load := len(p.deliveries); {
			case least < 0 || load < least:
				least, allowed = load, []*refSession{p}
			case load == least:
				allowed = append(allowed, p)
			}
		}
		switch {
		case least < 0:
			wantErr = ErrNoRoute
		case least >= m.cfg.MaxDeliveries:
			wantErr, allowed = ErrProviderBusy, nil
		}
	}

	d, err := m.r.RouteRequest(from.s, req)
	if wantErr != 0 {
		if !errors.Is(err, wantErr) {
			m.t.Fatalf("RouteRequest(%s, %+v) err = %v, want %v", from.agent, req, err, wantErr)
		}
		m.want[wantErr]++
		return
	}
	if err != nil {
		m.t.Fatalf("RouteRequest(%s, %+v): %v", from.agent, req, err)
	}
	i := slices.IndexFunc(allowed, func(p *refSession) bool { return p.s == d.Provider })
	if i < 0 {
		m.t.Fatalf("RouteRequest chose %s, allowed %d candidates", d.Provider.AgentID(), len(allowed))
	}
	p := allowed[i]
	if _, dup := p.deliveries[d.ID]; dup || d.ID == 0 || slices.Contains(p.ended, d.ID) {
		m.t.Fatalf("delivery id %d is zero or was handed out before", d.ID)
	}
	p.deliveries[d.ID] = refDelivery{req: from, reqID: req.ID, channel: req.Channel}
	from.requests[req.ID] = true
}

func (m *refModel) reply() {
	from := m.all[m.rng.IntN(len(m.all))]
	var id uint64
	switch n := m.rng.IntN(10); {
	case n < 7 && len(from.deliveries) > 0:
		ids := make([]uint64, 0, len(from.deliveries))
		for id := range from.deliveries {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		id = ids[m.rng.IntN(len(ids))]
	case n < 8 && len(from.ended) > 0:
		id = from.ended[m.rng.IntN(len(from.ended))] // a late reply
	case n < 9:
		// Somebody else's delivery id, or a made-up one: unknown here
		// unless they happen to coincide with one of ours.
		other := m.all[m.rng.IntN(len(m.all))]
		for did := range other.deliveries {
			id = did
			break
		}
		if id == 0 {
			id = 1<<m.rng.IntN(16) | uint64(m.rng.IntN(4))
		}
	default:
		id = m.rng.Uint64()
	}
	end := m.rng.IntN(3) == 0
	abort := end && m.rng.IntN(4) == 0

	var rep Reply[string]
	var err error
	if abort {
		rep, err = m.r.Abort(from.s, id)
	} else {
		rep, err = m.r.RouteReply(from.s, id, end)
	}
	d, known := from.deliveries[id]
	var wantErr Reason
	switch {
	case from.closed:
		wantErr = ErrSessionClosed
	case !known:
		wantErr = ErrUnknownRequest
	case d.req.closed:
		wantErr = ErrRequesterGone
	}
	if wantErr != 0 {
		if !errors.Is(err, wantErr) {
			m.t.Fatalf("RouteReply(%s, %d) err = %v, want %v", from.agent, id, err, wantErr)
		}
		m.want[wantErr]++
	} else if err != nil {
		m.t.Fatalf("RouteReply(%s, %d): %v", from.agent, id, err)
	} else if rep.Requester != d.req.s || rep.RequestID != d.reqID || rep.Channel != d.channel || rep.End != end {
		m.t.Fatalf("RouteReply(%s, %d) = %+v, want %+v", from.agent, id, rep, d)
	}
	if known && end && !from.closed {
		delete(from.deliveries, id)
		from.ended = append(from.ended, id)
		if !d.req.closed {
			delete(d.req.requests, d.reqID)
		}
	}
}

func (m *refModel) checkCounts(where string) {
	pending, retiring := 0, 0
	for _, rs := range m.all {
		if rs.closed {
			continue
		}
		if rs.unlinked {
			retiring++
		}
		pending += len(rs.deliveries)
		if rs.s.Outstanding() != len(rs.deliveries) || rs.s.Requests() != len(rs.requests) {
			m.t.Fatalf("%s: %s outstanding %d requests %d, want %d %d", where, rs.agent,
				rs.s.Outstanding(), rs.s.Requests(), len(rs.deliveries), len(rs.requests))
		}
	}
	st := m.r.Stats()
	if st.Pending != pending || st.Sessions != len(m.byAgent) || st.Retiring != retiring {
		m.t.Fatalf("%s: stats %+v, want pending %d sessions %d retiring %d", where, st, pending, len(m.byAgent), retiring)
	}
	for _, reason := range Reasons() {
		if st.Failures[reason] != m.want[reason] {
			m.t.Fatalf("%s: Failures[%s] = %d, want %d", where, reason, st.Failures[reason], m.want[reason])
		}
	}
}

func (m *refModel) finish() {
	for _, rs := range m.all {
		m.remove(rs)
	}
	st := m.r.Stats()
	if st.Sessions != 0 || st.Retiring != 0 || st.Models != 0 || st.Pending != 0 {
		m.t.Fatalf("after removing every session: %+v", st)
	}
	if !m.r.empty() {
		m.t.Fatalf("registry not empty")
	}
	for _, rs := range m.all {
		if rs.s.slots != nil || rs.s.free != nil || rs.s.requests != nil || rs.s.Outstanding() != 0 {
			m.t.Fatalf("session %s kept tables after removal", rs.agent)
		}
	}
	m.checkCounts("end")
}
