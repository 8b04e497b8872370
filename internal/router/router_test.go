package router

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// agentSpec describes a session a test registers; the router's value is the
// agent id, so tests can check what they get back.
type agentSpec struct {
	id     string
	models []string
}

func setup(t testing.TB, cfg Config, agents ...agentSpec) (*Router[string], map[string]*Session[string]) {
	t.Helper()
	r := New[string](cfg)
	sessions := make(map[string]*Session[string])
	for _, a := range agents {
		s, replaced, err := r.Register("", a.id, a.models, a.id)
		if err != nil {
			t.Fatalf("Register(%q): %v", a.id, err)
		}
		if replaced != nil {
			t.Fatalf("Register(%q) replaced %v", a.id, replaced)
		}
		sessions[a.id] = s
	}
	return r, sessions
}

func byModel(id uint64, model string) Request {
	return Request{ID: id, Channel: 4 * id, Model: []byte(model), HasRoutingHeader: true}
}

func toPeer(id uint64, peer string) Request {
	return Request{ID: id, Channel: 4 * id, Peer: []byte(peer), HasRoutingHeader: true}
}

func mustRoute(t testing.TB, r *Router[string], from *Session[string], req Request) Delivery[string] {
	t.Helper()
	d, err := r.RouteRequest(from, req)
	if err != nil {
		t.Fatalf("RouteRequest(%s, id %d): %v", from.AgentID(), req.ID, err)
	}
	return d
}

func mustReply(t testing.TB, r *Router[string], from *Session[string], id uint64, end bool) Reply[string] {
	t.Helper()
	rep, err := r.RouteReply(from, id, end)
	if err != nil {
		t.Fatalf("RouteReply(%s, %d, end=%v): %v", from.AgentID(), id, end, err)
	}
	return rep
}

func TestRegisterValidation(t *testing.T) {
	tests := []struct {
		name    string
		id      string
		models  []string
		wantErr error
		want    []string // cleaned models
	}{
		{name: "pure requester", id: "alice"},
		{name: "all id characters", id: "Az09_-", models: []string{"m"}, want: []string{"m"}},
		{name: "128 characters", id: strings.Repeat("a", 128)},
		{name: "repeated models kept once in order", id: "p", models: []string{"b", "a", "b"}, want: []string{"b", "a"}},
		{name: "255-byte model", id: "p", models: []string{strings.Repeat("m", 255)}, want: []string{strings.Repeat("m", 255)}},
		{name: "empty id", id: "", wantErr: ErrInvalidAgentID},
		{name: "129 characters", id: strings.Repeat("a", 129), wantErr: ErrInvalidAgentID},
		{name: "dot in id", id: "a.b", wantErr: ErrInvalidAgentID},
		{name: "space in id", id: "a b", wantErr: ErrInvalidAgentID},
		{name: "non-ASCII id", id: "é", wantErr: ErrInvalidAgentID},
		{name: "empty model", id: "p", models: []string{"a", ""}, wantErr: ErrInvalidModel},
		{name: "256-byte model", id: "p", models: []string{strings.Repeat("m", 256)}, wantErr: ErrInvalidModel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New[string](Config{})
			s, _, err := r.Register("", tt.id, tt.models, "v")
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if s != nil {
					t.Fatal("session returned with an error")
				}
				if st := r.Stats(); st.Sessions != 0 || st.Models != 0 {
					t.Fatalf("refused registration left state: %+v", st)
				}
				return
			}
			if s.AgentID() != tt.id || s.Value() != "v" || fmt.Sprint(s.Models()) != fmt.Sprint(tt.want) {
				t.Fatalf("session = %q %q %v, want %q v %v", s.AgentID(), s.Value(), s.Models(), tt.id, tt.want)
			}
			if got, ok := r.Lookup("", tt.id); !ok || got != s {
				t.Fatal("Lookup does not find the session")
			}
		})
	}
}

func TestRouteRequestChoosesProvider(t *testing.T) {
	agents := []agentSpec{
		{id: "req"},
		{id: "p1", models: []string{"gpt-4o"}},
		{id: "self", models: []string{"solo", "shared"}},
		{id: "p2", models: []string{"shared"}},
	}
	tests := []struct {
		name    string
		from    string
		req     Request
		want    string // provider agent id
		wantErr error
	}{
		{name: "addressed", from: "req", req: toPeer(1, "p1"), want: "p1"},
		{name: "addressed agent serving nothing", from: "p1", req: toPeer(1, "req"), want: "req"},
		{name: "addressed self", from: "p1", req: toPeer(1, "p1"), want: "p1"},
		{name: "peer wins over model", from: "req", req: Request{ID: 1, Peer: []byte("p2"), Model: []byte("gpt-4o"), HasRoutingHeader: true}, want: "p2"},
		{name: "unknown agent", from: "req", req: toPeer(1, "nobody"), wantErr: ErrUnknownAgent},
		{name: "agent ids are case-sensitive", from: "req", req: toPeer(1, "P1"), wantErr: ErrUnknownAgent},
		{name: "by model", from: "req", req: byModel(1, "gpt-4o"), want: "p1"},
		{name: "unserved model", from: "req", req: byModel(1, "gpt-5"), wantErr: ErrNoRoute},
		{name: "models are exact", from: "req", req: byModel(1, "GPT-4o"), wantErr: ErrNoRoute},
		{name: "empty model", from: "req", req: byModel(1, ""), wantErr: ErrNoRoute},
		{name: "self is never chosen by model", from: "self", req: byModel(1, "solo"), wantErr: ErrNoRoute},
		{name: "self skipped for another provider", from: "self", req: byModel(1, "shared"), want: "p2"},
		{name: "TokenNative addressed", from: "req", req: Request{ID: 1, Peer: []byte("p1")}, want: "p1"},
		{name: "TokenNative unaddressed", from: "req", req: Request{ID: 1, Model: []byte("gpt-4o")}, wantErr: ErrBadFrame},
		{name: "request id 0", from: "req", req: toPeer(0, "p1"), wantErr: ErrBadFrame},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ss := setup(t, Config{}, agents...)
			from := ss[tt.from]
			d, err := r.RouteRequest(from, tt.req)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			st := r.Stats()
			if err != nil {
				reason := err.(Reason)
				if st.Failures[reason] != 1 {
					t.Fatalf("Failures[%s] = %d, want 1", reason, st.Failures[reason])
				}
				if st.Pending != 0 || from.Requests() != 0 {
					t.Fatalf("refused request left state: pending %d, requests %d", st.Pending, from.Requests())
				}
				// The refused id is free again.
				if _, err := r.RouteRequest(from, toPeer(tt.req.ID|1, "p1")); err != nil {
					t.Fatalf("reusing the refused id: %v", err)
				}
				return
			}
			if d.Provider != ss[tt.want] || d.Provider.Value() != tt.want {
				t.Fatalf("provider = %s, want %s", d.Provider.AgentID(), tt.want)
			}
			if d.ID == 0 {
				t.Fatal("delivery id 0")
			}
			if st.Pending != 1 || d.Provider.Outstanding() != 1 || from.Requests() != 1 {
				t.Fatalf("pending %d, outstanding %d, requests %d; want 1, 1, 1", st.Pending, d.Provider.Outstanding(), from.Requests())
			}
			rep := mustReply(t, r, d.Provider, d.ID, true)
			if rep.Requester != from || rep.RequestID != tt.req.ID || rep.Channel != tt.req.Channel || !rep.End {
				t.Fatalf("reply = %+v, want requester %s id %d channel %d", rep, tt.from, tt.req.ID, tt.req.Channel)
			}
		})
	}
}

func TestLeastOutstanding(t *testing.T) {
	tests := []struct {
		name string
		load []int    // preset outstanding deliveries of p0, p1, ...
		want []string // successive picks; each pick is ended before the next
	}{
		{name: "single idle", load: []int{0}, want: []string{"p0", "p0"}},
		{name: "fewest wins", load: []int{3, 1, 2}, want: []string{"p1", "p1", "p1"}},
		{name: "ties take turns", load: []int{0, 0, 0}, want: []string{"p1", "p2", "p0", "p1", "p2", "p0"}},
		{name: "turns among the least loaded only", load: []int{1, 0, 2, 0}, want: []string{"p1", "p3", "p1", "p3"}},
		{name: "turns however far apart", load: []int{0, 5, 5, 5, 0}, want: []string{"p4", "p0", "p4", "p0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agents := []agentSpec{{id: "req"}, {id: "loader"}}
			for i := range tt.load {
				agents = append(agents, agentSpec{id: fmt.Sprintf("p%d", i), models: []string{"m"}})
			}
			r, ss := setup(t, Config{}, agents...)
			id := uint64(1)
			for i, n := range tt.load {
				for range n {
					mustRoute(t, r, ss["loader"], toPeer(id, fmt.Sprintf("p%d", i)))
					id++
				}
			}
			var got []string
			for range tt.want {
				d := mustRoute(t, r, ss["req"], byModel(id, "m"))
				got = append(got, d.Provider.AgentID())
				mustReply(t, r, d.Provider, d.ID, true)
				id++
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("picks = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLeastOutstandingFollowsLoad(t *testing.T) {
	// Requests that stay outstanding spread evenly: each new one goes to a
	// provider with the fewest.
	r, ss := setup(t, Config{}, agentSpec{id: "req"},
		agentSpec{id: "a", models: []string{"m"}}, agentSpec{id: "b", models: []string{"m"}}, agentSpec{id: "c", models: []string{"m"}})
	for id := uint64(1); id <= 30; id++ {
		mustRoute(t, r, ss["req"], byModel(id, "m"))
		lo, hi := 1<<30, 0
		for _, p := range []string{"a", "b", "c"} {
			lo, hi = min(lo, ss[p].Outstanding()), max(hi, ss[p].Outstanding())
		}
		if hi-lo > 1 {
			t.Fatalf("after %d requests loads differ by %d", id, hi-lo)
		}
	}
	if st := r.Stats(); st.Pending != 30 {
		t.Fatalf("pending = %d, want 30", st.Pending)
	}
}

func TestReplyMapping(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "prov", models: []string{"m"}})
	req, prov := ss["req"], ss["prov"]
	before := time.Now()
	d := mustRoute(t, r, req, Request{ID: 77, Channel: 8, Model: []byte("m"), HasRoutingHeader: true})
	after := time.Now()

	// Stream chunks keep the mapping; END removes it.
	for i, end := range []bool{false, false, false, true} {
		rep := mustReply(t, r, prov, d.ID, end)
		if rep.Requester != req || rep.RequestID != 77 || rep.Channel != 8 || rep.End != end || rep.N != uint32(i) {
			t.Fatalf("reply %d = %+v", i, rep)
		}
		if rep.Start.Before(before) || rep.Start.After(after) || time.Since(rep.Start) < 0 {
			t.Fatalf("reply %d: Start %v not within the routing call [%v, %v]", i, rep.Start, before, after)
		}
		wantOut := 1
		if end {
			wantOut = 0
		}
		if prov.Outstanding() != wantOut || req.Requests() != wantOut {
			t.Fatalf("after reply %d: outstanding %d requests %d, want %d", i, prov.Outstanding(), req.Requests(), wantOut)
		}
	}
	for _, end := range []bool{false, true} {
		if _, err := r.RouteReply(prov, d.ID, end); !errors.Is(err, ErrUnknownRequest) {
			t.Fatalf("reply after END: err = %v, want ErrUnknownRequest", err)
		}
	}
	// The requester may reuse its id once the request ended.
	d2 := mustRoute(t, r, req, byModel(77, "m"))
	if d2.ID == d.ID {
		t.Fatal("a new delivery reused the ended delivery's id")
	}
	if _, err := r.RouteReply(prov, d.ID, false); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("stale id after slot reuse: err = %v, want ErrUnknownRequest", err)
	}
	if rep := mustReply(t, r, prov, d2.ID, true); rep.N != 0 {
		t.Fatalf("first reply of a reused slot numbered %d", rep.N)
	}
	if got := r.Failures(ErrUnknownRequest); got != 3 {
		t.Fatalf("unknown_request count = %d, want 3", got)
	}
}

func TestDeliveryIDs(t *testing.T) {
	r, ss := setup(t, Config{MaxDeliveries: 8}, agentSpec{id: "req"}, agentSpec{id: "prov"})
	req, prov := ss["req"], ss["prov"]
	seen := make(map[uint64]bool)
	live := []uint64{}
	next := uint64(1)
	// Fill, drain half, refill, many times: every id is non-zero and
	// distinct from every id ever handed out on this provider.
	for round := range 50 {
		for len(live) < 8 {
			d := mustRoute(t, r, req, toPeer(next, "prov"))
			next++
			if d.ID == 0 || seen[d.ID] {
				t.Fatalf("round %d: delivery id %d is zero or reused", round, d.ID)
			}
			seen[d.ID] = true
			live = append(live, d.ID)
		}
		for _, id := range live[:4] {
			mustReply(t, r, prov, id, true)
		}
		live = live[4:]
	}
	if len(prov.slots) > 8 {
		t.Fatalf("slot table grew to %d, cap 8", len(prov.slots))
	}
}

func TestUnknownDeliveryIDs(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "prov"})
	d := mustRoute(t, r, ss["req"], toPeer(1, "prov"))
	for _, id := range []uint64{0, d.ID + 1, d.ID | 1<<40, ^uint64(0), 1 << 11} {
		if _, err := r.RouteReply(ss["prov"], id, true); !errors.Is(err, ErrUnknownRequest) {
			t.Errorf("RouteReply(%#x): err = %v, want ErrUnknownRequest", id, err)
		}
	}
	// A session that was sent nothing cannot reply to another's delivery.
	if _, err := r.RouteReply(ss["req"], d.ID, true); !errors.Is(err, ErrUnknownRequest) {
		t.Errorf("reply from the wrong session: err = %v, want ErrUnknownRequest", err)
	}
	if ss["prov"].Outstanding() != 1 {
		t.Fatal("unknown replies disturbed the real delivery")
	}
}

func TestDuplicateRequest(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "a", models: []string{"m"}}, agentSpec{id: "b"})
	req := ss["req"]
	d := mustRoute(t, r, req, byModel(5, "m"))
	for _, dup := range []Request{byModel(5, "m"), toPeer(5, "b"), toPeer(5, "nobody")} {
		if _, err := r.RouteRequest(req, dup); !errors.Is(err, ErrDuplicateRequest) {
			t.Fatalf("duplicate %+v: err = %v, want ErrDuplicateRequest", dup, err)
		}
	}
	// The original is untouched.
	if rep := mustReply(t, r, d.Provider, d.ID, true); rep.Requester != req || rep.RequestID != 5 {
		t.Fatalf("original reply = %+v", rep)
	}
	// Other sessions' ids are their own.
	mustRoute(t, r, ss["b"], byModel(5, "m"))
	if got := r.Failures(ErrDuplicateRequest); got != 3 {
		t.Fatalf("duplicate_request count = %d, want 3", got)
	}
}

func TestCaps(t *testing.T) {
	cfg := Config{MaxRequests: 3, MaxDeliveries: 2}
	t.Run("requester cap", func(t *testing.T) {
		r, ss := setup(t, cfg, agentSpec{id: "req"}, agentSpec{id: "a"}, agentSpec{id: "b"}, agentSpec{id: "c"})
		ds := []Delivery[string]{
			mustRoute(t, r, ss["req"], toPeer(1, "a")),
			mustRoute(t, r, ss["req"], toPeer(2, "b")),
			mustRoute(t, r, ss["req"], toPeer(3, "c")),
		}
		if _, err := r.RouteRequest(ss["req"], toPeer(4, "c")); !errors.Is(err, ErrTooManyRequests) {
			t.Fatalf("4th request: err = %v, want ErrTooManyRequests", err)
		}
		mustReply(t, r, ds[0].Provider, ds[0].ID, false)
		if _, err := r.RouteRequest(ss["req"], toPeer(4, "c")); !errors.Is(err, ErrTooManyRequests) {
			t.Fatal("a chunk freed a request slot")
		}
		mustReply(t, r, ds[0].Provider, ds[0].ID, true)
		mustRoute(t, r, ss["req"], toPeer(4, "c"))
	})
	t.Run("addressed provider at cap", func(t *testing.T) {
		r, ss := setup(t, cfg, agentSpec{id: "req"}, agentSpec{id: "p"})
		d := mustRoute(t, r, ss["req"], toPeer(1, "p"))
		mustRoute(t, r, ss["req"], toPeer(2, "p"))
		if _, err := r.RouteRequest(ss["req"], toPeer(3, "p")); !errors.Is(err, ErrProviderBusy) {
			t.Fatalf("err = %v, want ErrProviderBusy", err)
		}
		if ss["req"].Requests() != 2 {
			t.Fatal("refused request kept its id")
		}
		mustReply(t, r, ss["p"], d.ID, true)
		mustRoute(t, r, ss["req"], toPeer(3, "p"))
	})
	t.Run("model skips a saturated provider", func(t *testing.T) {
		r, ss := setup(t, cfg, agentSpec{id: "r1"}, agentSpec{id: "r2"},
			agentSpec{id: "a", models: []string{"m"}}, agentSpec{id: "b", models: []string{"m"}})
		mustRoute(t, r, ss["r1"], toPeer(1, "a"))
		mustRoute(t, r, ss["r1"], toPeer(2, "a"))
		for id := uint64(1); id <= 2; id++ {
			if d := mustRoute(t, r, ss["r2"], byModel(id, "m")); d.Provider != ss["b"] {
				t.Fatalf("request %d went to %s, want b", id, d.Provider.AgentID())
			}
		}
		if _, err := r.RouteRequest(ss["r2"], byModel(3, "m")); !errors.Is(err, ErrProviderBusy) {
			t.Fatalf("all saturated: err = %v, want ErrProviderBusy", err)
		}
	})
}

func TestRemoveProvider(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "r1"}, agentSpec{id: "r2"}, agentSpec{id: "p", models: []string{"m"}})
	r1, r2, p := ss["r1"], ss["r2"], ss["p"]
	d1 := mustRoute(t, r, r1, Request{ID: 10, Channel: 4, Model: []byte("m"), HasRoutingHeader: true})
	d2 := mustRoute(t, r, r2, Request{ID: 20, Channel: 8, Peer: []byte("p")})
	d3 := mustRoute(t, r, r1, Request{ID: 11, Channel: 12, Model: []byte("m"), HasRoutingHeader: true})
	mustReply(t, r, p, d3.ID, false) // mid-stream
	d4 := mustRoute(t, r, r1, Request{ID: 12, Channel: 16, Peer: []byte("p")})
	mustReply(t, r, p, d4.ID, true) // finished: not an orphan

	orphans := r.Remove(p)
	got := map[string]bool{}
	for _, o := range orphans {
		got[fmt.Sprintf("%s/%d/%d", o.Requester.AgentID(), o.RequestID, o.Channel)] = true
	}
	want := map[string]bool{"r1/10/4": true, "r2/20/8": true, "r1/11/12": true}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(orphans) != 3 {
		t.Fatalf("orphans = %v, want %v", got, want)
	}
	if !p.Closed() || r.Failures(ErrAgentGone) != 3 {
		t.Fatalf("closed %v, agent_gone %d", p.Closed(), r.Failures(ErrAgentGone))
	}
	// The orphaned ids are free for the requesters to reuse, and the
	// provider's model and id are gone.
	if r1.Requests() != 0 || r2.Requests() != 0 {
		t.Fatalf("requests left: r1 %d, r2 %d", r1.Requests(), r2.Requests())
	}
	if _, err := r.RouteRequest(r1, byModel(10, "m")); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("model after removal: %v", err)
	}
	if _, err := r.RouteRequest(r2, toPeer(20, "p")); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("agent after removal: %v", err)
	}
	// Late messages of the removed session are discarded.
	for _, id := range []uint64{d1.ID, d2.ID} {
		if _, err := r.RouteReply(p, id, true); !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("late reply: err = %v, want ErrSessionClosed", err)
		}
	}
	if _, err := r.RouteRequest(p, toPeer(1, "r1")); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("late request: err = %v, want ErrSessionClosed", err)
	}
	if again := r.Remove(p); again != nil {
		t.Fatalf("second Remove returned %v", again)
	}
	if st := r.Stats(); st.Sessions != 2 || st.Models != 0 || st.Pending != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestRemoveRequester(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p", models: []string{"m"}})
	req, p := ss["req"], ss["p"]
	d := mustRoute(t, r, req, byModel(1, "m"))
	self := mustRoute(t, r, p, toPeer(2, "req")) // p requests from req
	if orphans := r.Remove(req); len(orphans) != 1 || orphans[0].Requester != p || orphans[0].RequestID != 2 {
		t.Fatalf("orphans = %+v, want p's request 2", orphans)
	}
	_ = self
	// The provider's replies to the departed requester are dropped; END
	// still clears the delivery so the provider's count falls.
	if _, err := r.RouteReply(p, d.ID, false); !errors.Is(err, ErrRequesterGone) {
		t.Fatalf("chunk: err = %v, want ErrRequesterGone", err)
	}
	if _, err := r.RouteReply(p, d.ID, true); !errors.Is(err, ErrRequesterGone) {
		t.Fatalf("END: err = %v, want ErrRequesterGone", err)
	}
	if p.Outstanding() != 0 || r.Stats().Pending != 0 {
		t.Fatal("END for a departed requester left the delivery pending")
	}
	if _, err := r.RouteReply(p, d.ID, true); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("after END: err = %v, want ErrUnknownRequest", err)
	}
	if got := r.Failures(ErrRequesterGone); got != 2 {
		t.Fatalf("requester_gone = %d, want 2", got)
	}
}

func TestReplace(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "other"}, agentSpec{id: "p", models: []string{"m", "old-only"}})
	req, other, old := ss["req"], ss["other"], ss["p"]
	d := mustRoute(t, r, req, byModel(1, "m"))
	own := mustRoute(t, r, old, toPeer(9, "other")) // old's own request
	od := mustRoute(t, r, other, toPeer(3, "p"))

	neu, replaced, err := r.Register("", "p", []string{"m"}, "p-new")
	if err != nil {
		t.Fatal(err)
	}
	if replaced != old || !old.Replaced() || old.Closed() || neu.Replaced() {
		t.Fatalf("replaced = %v (replaced %v, closed %v), new replaced %v", replaced, old.Replaced(), old.Closed(), neu.Replaced())
	}
	if st := r.Stats(); st.Sessions != 3 || st.Retiring != 1 || st.Models != 1 || st.Pending != 3 {
		t.Fatalf("stats while retiring = %+v", st)
	}
	// The agent id and the model now reach the new session; the old-only
	// model is gone.
	if s, _ := r.Lookup("", "p"); s != neu {
		t.Fatal("Lookup does not return the new session")
	}
	if d2 := mustRoute(t, r, req, byModel(2, "m")); d2.Provider != neu || d2.Provider.Value() != "p-new" {
		t.Fatal("model routes to the old session")
	}
	if _, err := r.RouteRequest(req, byModel(3, "old-only")); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("old-only model: %v", err)
	}
	// The replaced session may not start requests, but its replies in
	// flight still reach their requesters until it is removed.
	if _, err := r.RouteRequest(old, toPeer(10, "other")); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("request from the replaced session: %v", err)
	}
	if rep := mustReply(t, r, old, d.ID, false); rep.Requester != req || rep.RequestID != 1 {
		t.Fatalf("chunk from the replaced session = %+v", rep)
	}
	if rep := mustReply(t, r, other, own.ID, false); rep.Requester != old {
		t.Fatalf("reply to the replaced session = %+v", rep)
	}

	orphans := r.Remove(old)
	if len(orphans) != 2 || orphans[0].Requester == orphans[1].Requester {
		t.Fatalf("orphans = %+v, want req's 1 and other's 3", orphans)
	}
	for _, o := range orphans {
		if !(o.Requester == req && o.RequestID == 1 || o.Requester == other && o.RequestID == 3) {
			t.Fatalf("unexpected orphan %+v", o)
		}
	}
	if !old.Closed() {
		t.Fatal("removed session is not closed")
	}
	for _, id := range []uint64{d.ID, od.ID} {
		if _, err := r.RouteReply(old, id, true); !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("late reply from the removed session: %v", err)
		}
	}
	// The old session's own request at "other" is forgotten: its reply goes
	// nowhere.
	if _, err := r.RouteReply(other, own.ID, true); !errors.Is(err, ErrRequesterGone) {
		t.Fatalf("reply to the removed session's request: %v", err)
	}
	// Removing the old session did not touch the new one.
	if s, _ := r.Lookup("", "p"); s != neu || neu.Closed() {
		t.Fatal("Remove(old) unregistered the new session")
	}
	if again := r.Remove(old); again != nil {
		t.Fatalf("second Remove(old) = %v", again)
	}
	if st := r.Stats(); st.Sessions != 3 || st.Retiring != 0 || st.Models != 1 || st.Pending != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestAbort(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p"})
	d := mustRoute(t, r, ss["req"], Request{ID: 3, Channel: 7, Peer: []byte("p")})
	rep, err := r.Abort(d.Provider, d.ID)
	if err != nil || rep.Requester != ss["req"] || rep.RequestID != 3 || rep.Channel != 7 {
		t.Fatalf("Abort = %+v, %v", rep, err)
	}
	if ss["p"].Outstanding() != 0 || ss["req"].Requests() != 0 {
		t.Fatal("Abort left state")
	}
	if _, err := r.RouteReply(ss["p"], d.ID, true); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("reply after Abort: %v", err)
	}
	if _, err := r.Abort(d.Provider, d.ID); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("second Abort: %v", err)
	}
}

func TestReasons(t *testing.T) {
	want := map[Reason]string{
		ErrNoRoute: "no_route", ErrUnknownAgent: "unknown_agent", ErrAgentGone: "agent_gone",
		ErrRequesterGone: "requester_gone", ErrUnknownRequest: "unknown_request",
		ErrDuplicateRequest: "duplicate_request", ErrTooManyRequests: "too_many_requests",
		ErrProviderBusy: "provider_busy", ErrBadFrame: "bad_frame", ErrSessionClosed: "session_closed",
		ErrBaseMissing: "base_missing",
	}
	all := Reasons()
	if len(all) != len(want) {
		t.Fatalf("Reasons() has %d, want %d", len(all), len(want))
	}
	for _, reason := range all {
		if string(reason.Code()) != want[reason] || reason.String() != want[reason] {
			t.Errorf("Code(%d) = %q, want %q", reason, reason.Code(), want[reason])
		}
		if !strings.HasPrefix(reason.Error(), "router: "+want[reason]+": ") {
			t.Errorf("Error() = %q", reason.Error())
		}
		var err error = fmt.Errorf("routing: %w", reason)
		var got Reason
		if !errors.Is(err, reason) || !errors.As(err, &got) || got != reason {
			t.Errorf("%s does not survive wrapping", reason)
		}
	}
	if r := New[int](Config{}); r.Failures(0) != 0 || r.Failures(200) != 0 {
		t.Error("Failures of an out-of-range reason")
	}
	if Reason(0).Code() != "unknown" || Reason(200).Code() != "unknown" || Reason(200).Error() != "router: unknown reason" {
		t.Error("out-of-range reason")
	}
	st := New[int](Config{}).Stats()
	if len(st.Failures) != len(want) {
		t.Errorf("Stats.Failures has %d reasons, want %d", len(st.Failures), len(want))
	}
}

func TestConfigDefaults(t *testing.T) {
	tests := []struct{ in, want Config }{
		{Config{}, Config{DefaultMaxRequests, DefaultMaxDeliveries}},
		{Config{-1, -5}, Config{DefaultMaxRequests, DefaultMaxDeliveries}},
		{Config{1, 7}, Config{1, 7}},
		{Config{MaxLimit + 1, 1 << 40}, Config{MaxLimit, MaxLimit}},
	}
	for _, tt := range tests {
		if got := tt.in.effective(); got != tt.want {
			t.Errorf("%+v.effective() = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	// The largest cap still leaves room for a generation in the ids.
	r, ss := setup(t, Config{MaxDeliveries: MaxLimit}, agentSpec{id: "a"}, agentSpec{id: "b"})
	for range 3 {
		d := mustRoute(t, r, ss["a"], toPeer(1, "b"))
		mustReply(t, r, ss["b"], d.ID, true)
	}
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"},
		agentSpec{id: "p1", models: []string{"gpt-4o"}}, agentSpec{id: "p2", models: []string{"gpt-4o"}})
	req := ss["req"]
	model := []byte("gpt-4o")
	id := uint64(0)
	cycle := func() {
		id++
		d, err := r.RouteRequest(req, Request{ID: id, Channel: 4, Model: model, HasRoutingHeader: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RouteReply(d.Provider, d.ID, false); err != nil {
			t.Fatal(err)
		}
		if _, err := r.RouteReply(d.Provider, d.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // warm the tables
		cycle()
	}
	if n := testing.AllocsPerRun(1000, cycle); n != 0 {
		t.Errorf("request + chunk + END allocates %.1f times", n)
	}
	refused := func() {
		if _, err := r.RouteRequest(req, byModel(1, "nobody-serves-this")); !errors.Is(err, ErrNoRoute) {
			t.Fatal(err)
		}
		if _, err := r.RouteReply(ss["p1"], 12345, true); !errors.Is(err, ErrUnknownRequest) {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(1000, refused); n != 0 {
		t.Errorf("refusals allocate %.1f times", n)
	}
}

// An identity is (org, agent id): the same agent id in two orgs is two
// agents, neither replaces the other, and no request crosses orgs, by
// agent id or by model (security review finding 1).
func TestOrgsAreSeparateNamespaces(t *testing.T) {
	r := New[string](Config{})
	reg := func(org, id string, models ...string) *Session[string] {
		t.Helper()
		s, replaced, err := r.Register(org, id, models, org+"/"+id)
		if err != nil {
			t.Fatalf("Register(%q, %q): %v", org, id, err)
		}
		if replaced != nil {
			t.Fatalf("Register(%q, %q) replaced %s", org, id, replaced.Value())
		}
		return s
	}
	acmeAlice := reg("acme", "alice", "gpt-4o")
	acmeReq := reg("acme", "req")
	evilAlice := reg("evil", "alice", "gpt-4o")
	evilReq := reg("evil", "req")
	if acmeAlice.Replaced() || acmeAlice.Org() != "acme" || evilAlice.Org() != "evil" {
		t.Fatal("registering evil/alice touched acme/alice")
	}
	if s, _ := r.Lookup("acme", "alice"); s != acmeAlice {
		t.Fatal("Lookup(acme, alice) does not find acme's alice")
	}
	if _, ok := r.Lookup("other", "alice"); ok {
		t.Fatal("Lookup in an org with no agents found one")
	}
	tests := []struct {
		name string
		from *Session[string]
		req  Request
		want *Session[string]
	}{
		{"acme by id", acmeReq, toPeer(1, "alice"), acmeAlice},
		{"evil by id", evilReq, toPeer(1, "alice"), evilAlice},
		{"acme by model", acmeReq, byModel(2, "gpt-4o"), acmeAlice},
		{"evil by model", evilReq, byModel(2, "gpt-4o"), evilAlice},
	}
	for _, tt := range tests {
		for range 3 { // round robin must not wander into the other org
			d := mustRoute(t, r, tt.from, tt.req)
			if d.Provider != tt.want {
				t.Fatalf("%s: routed to %s", tt.name, d.Provider.Value())
			}
			mustReply(t, r, d.Provider, d.ID, true)
		}
	}
	if _, err := r.RouteRequest(evilReq, toPeer(3, "nobody-in-evil")); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("unknown agent: %v", err)
	}
	// An org whose only agent is the requester has no route by model, even
	// though another org serves the model.
	lone := reg("lone", "req")
	if _, err := r.RouteRequest(lone, byModel(4, "gpt-4o")); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("model served only in other orgs: %v", err)
	}
	if _, err := r.RouteRequest(lone, toPeer(5, "alice")); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("agent id of other orgs: %v", err)
	}
	// Replacement stays within the org.
	neu, replaced, err := r.Register("evil", "alice", nil, "evil/alice-2")
	if err != nil || replaced != evilAlice || acmeAlice.Replaced() {
		t.Fatalf("re-register evil/alice: replaced %v, err %v, acme replaced %v", replaced, err, acmeAlice.Replaced())
	}
	r.Remove(evilAlice)
	if st := r.Stats(); st.Sessions != 5 || st.Models != 1 {
		t.Fatalf("stats = %+v, want 5 sessions and acme's one model", st)
	}
	if _, _, err := r.Register("bad/org", "x", nil, ""); !errors.Is(err, ErrInvalidOrg) {
		t.Fatalf("invalid org: %v", err)
	}
	for _, s := range []*Session[string]{acmeAlice, acmeReq, evilReq, lone, neu} {
		r.Remove(s)
	}
	if !r.empty() {
		t.Fatal("registry not empty")
	}
}

// TestAttach: an attached session (the daemon's stand-in for another cluster
// node) makes requests within its org under its own cap, is never reachable
// by agent id or model, and its removal forgets its requests.
func TestAttach(t *testing.T) {
	r, s := setup(t, Config{MaxRequests: 2}, agentSpec{id: "prov", models: []string{"m"}})
	node := r.Attach("", "prov", "node-b", 3) // same id as a real agent: must not shadow it
	if got, _ := r.Lookup("", "prov"); got != s["prov"] {
		t.Fatal("Attach shadowed the registered agent")
	}
	var ds []Delivery[string]
	for id := uint64(1); id <= 3; id++ {
		ds = append(ds, mustRoute(t, r, node, toPeer(id, "prov")))
	}
	if _, err := r.RouteRequest(node, toPeer(4, "prov")); !errors.Is(err, ErrTooManyRequests) {
		t.Fatalf("4th request: %v, want ErrTooManyRequests (cap 3)", err)
	}
	if _, err := r.RouteRequest(s["prov"], byModel(9, "m")); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("by model with only the attached session besides the provider: %v", err)
	}
	other := r.Attach("acme", "x", "node-b/acme", 0)
	if _, err := r.RouteRequest(other, toPeer(1, "prov")); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("attached session of another org reached prov: %v", err)
	}
	rep := mustReply(t, r, s["prov"], ds[0].ID, true)
	if rep.Requester != node || rep.RequestID != 1 {
		t.Fatalf("reply went to %v id %d", rep.Requester.Value(), rep.RequestID)
	}
	if orphans := r.Remove(node); len(orphans) != 0 {
		t.Fatalf("attached session had orphans: %v", orphans)
	}
	if _, err := r.RouteReply(s["prov"], ds[1].ID, true); !errors.Is(err, ErrRequesterGone) {
		t.Fatalf("reply after removal: %v, want ErrRequesterGone", err)
	}
	if _, ok := r.Lookup("", "prov"); !ok {
		t.Fatal("removing the attached session unregistered the agent")
	}
	r.Remove(other)
}

// RegisterIf consults its policy only when the id is held, and a refusal
// changes nothing.
func TestRegisterIfPolicy(t *testing.T) {
	r := New[string](Config{})
	calls := 0
	no := func(*Session[string]) bool { calls++; return false }
	first, _, err := r.RegisterIf("", "p", []string{"m"}, "first", no)
	if err != nil || calls != 0 {
		t.Fatalf("free id: err %v, policy called %d times", err, calls)
	}
	if s, replaced, err := r.RegisterIf("", "p", []string{"other"}, "second", no); !errors.Is(err, ErrAgentIDTaken) || s != nil || replaced != nil || calls != 1 {
		t.Fatalf("refused replacement: %v %v %v, %d calls", s, replaced, err, calls)
	}
	if got, _ := r.Lookup("", "p"); got != first || first.Replaced() || r.Stats().Models != 1 {
		t.Fatal("a refused registration changed the registry")
	}
	neu, replaced, err := r.RegisterIf("", "p", nil, "third", func(h *Session[string]) bool { return h.Value() == "first" })
	if err != nil || replaced != first || neu == nil {
		t.Fatalf("allowed replacement: %v %v", replaced, err)
	}
}

// TestUnlink: a leaving provider (Unlink) gets no new request, by model or
// by id, while its deliveries go on: replies are routed and they count as
// pending until their END or Remove, which returns those still open as
// orphans. An agent of the same id that registers meanwhile is untouched.
func TestUnlink(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p", models: []string{"m"}}, agentSpec{id: "q", models: []string{"m"}})
	req, p := ss["req"], ss["p"]
	d1 := mustRoute(t, r, req, toPeer(1, "p"))
	mustRoute(t, r, req, toPeer(2, "p"))
	r.Unlink(p)
	r.Unlink(p) // twice: nothing more
	for id := uint64(3); id < 6; id++ {
		if d := mustRoute(t, r, req, byModel(id, "m")); d.Provider.AgentID() != "q" {
			t.Fatalf("request %d went to %s after p left", id, d.Provider.AgentID())
		}
	}
	if _, err := r.RouteRequest(req, toPeer(6, "p")); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("request to the leaving agent: %v, want ErrUnknownAgent", err)
	}
	if st := r.Stats(); st.Sessions != 2 || st.Retiring != 1 || st.Pending != 5 {
		t.Fatalf("stats while p leaves: %+v", st)
	}
	if rep := mustReply(t, r, p, d1.ID, true); rep.Requester != req || rep.RequestID != 1 {
		t.Fatalf("reply of the leaving agent went to %s/%d", rep.Requester.AgentID(), rep.RequestID)
	}
	back, _, err := r.Register("", "p", []string{"m"}, "p again")
	if err != nil {
		t.Fatal(err)
	}
	orphans := r.Remove(p)
	if len(orphans) != 1 || orphans[0].RequestID != 2 || orphans[0].Requester != req {
		t.Fatalf("orphans %+v, want request 2", orphans)
	}
	if st := r.Stats(); st.Retiring != 0 || st.Sessions != 3 {
		t.Fatalf("stats after Remove: %+v", st)
	}
	if d := mustRoute(t, r, req, toPeer(7, "p")); d.Provider != back {
		t.Fatal("the new session of p is not reachable after the old one was removed")
	}
}
