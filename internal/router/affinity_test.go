package router

import (
	"errors"
	"testing"
)

func preferring(id uint64, model, prefer string, require bool) Request {
	r := byModel(id, model)
	r.Prefer, r.Require = prefer, require
	return r
}

// load gives provider p n outstanding deliveries from requester "load".
func load(t *testing.T, r *Router[string], from, p *Session[string], first uint64, n int) {
	t.Helper()
	for i := range n {
		mustRoute(t, r, from, toPeer(first+uint64(i), p.AgentID()))
	}
}

// A preferred provider takes the request while its outstanding deliveries
// are at most AffinityFactor × the least loaded's + 1, and not beyond.
func TestPreferWithinLoadFactor(t *testing.T) {
	tests := []struct {
		name          string
		preferLoad    int
		otherLoad     int
		want          string
		wantAffinity  Affinity
		preferModel   string
		preferMissing bool
	}{
		{name: "idle", want: "p1", wantAffinity: AffinityKept},
		{name: "one ahead of an idle one", preferLoad: 1, want: "p1", wantAffinity: AffinityKept},
		{name: "two ahead of an idle one", preferLoad: 2, want: "p2", wantAffinity: AffinitySpread},
		{name: "2x+1", preferLoad: 7, otherLoad: 3, want: "p1", wantAffinity: AffinityKept},
		{name: "beyond 2x+1", preferLoad: 8, otherLoad: 3, want: "p2", wantAffinity: AffinitySpread},
		{name: "gone", preferMissing: true, want: "p2", wantAffinity: AffinitySpread},
		{name: "serves another model", preferModel: "other", want: "p2", wantAffinity: AffinitySpread},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := tt.preferModel
			if model == "" {
				model = "m"
			}
			r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "load"},
				agentSpec{id: "p1", models: []string{model}}, agentSpec{id: "p2", models: []string{"m"}})
			load(t, r, ss["load"], ss["p1"], 1, tt.preferLoad)
			load(t, r, ss["load"], ss["p2"], 1000, tt.otherLoad)
			prefer := "p1"
			if tt.preferMissing {
				prefer = "gone"
			}
			d := mustRoute(t, r, ss["req"], preferring(1, "m", prefer, false))
			if d.Provider.AgentID() != tt.want || d.Affinity != tt.wantAffinity {
				t.Errorf("went to %s (affinity %d), want %s (%d)", d.Provider.AgentID(), d.Affinity, tt.want, tt.wantAffinity)
			}
		})
	}
}

func TestPreferNothing(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p1", models: []string{"m"}})
	if d := mustRoute(t, r, ss["req"], byModel(1, "m")); d.Affinity != AffinityNone {
		t.Errorf("affinity %d without Prefer", d.Affinity)
	}
	// The requester itself is never its own preferred provider.
	r, ss = setup(t, Config{}, agentSpec{id: "req", models: []string{"m"}}, agentSpec{id: "p1", models: []string{"m"}})
	if d := mustRoute(t, r, ss["req"], preferring(1, "m", "req", false)); d.Provider.AgentID() != "p1" {
		t.Errorf("went to %s", d.Provider.AgentID())
	}
	if _, err := r.RouteRequest(ss["req"], preferring(2, "m", "req", true)); !errors.Is(err, ErrBaseMissing) {
		t.Errorf("required self: %v", err)
	}
}

// A required provider (a delta's) takes the request at any load below the
// cap, busy at the cap, and base_missing when it is gone, serves another
// model or is in another org.
func TestRequire(t *testing.T) {
	r, ss := setup(t, Config{MaxDeliveries: 4}, agentSpec{id: "req"}, agentSpec{id: "load"},
		agentSpec{id: "p1", models: []string{"m"}}, agentSpec{id: "p2", models: []string{"m"}},
		agentSpec{id: "other", models: []string{"x"}})
	load(t, r, ss["load"], ss["p1"], 1, 3)
	d := mustRoute(t, r, ss["req"], preferring(1, "m", "p1", true))
	if d.Provider.AgentID() != "p1" || d.Affinity != AffinityKept {
		t.Fatalf("went to %s (affinity %d)", d.Provider.AgentID(), d.Affinity)
	}
	if _, err := r.RouteRequest(ss["req"], preferring(2, "m", "p1", true)); !errors.Is(err, ErrProviderBusy) {
		t.Errorf("at the cap: %v", err)
	}
	for _, prefer := range []string{"gone", "other", ""} {
		if _, err := r.RouteRequest(ss["req"], preferring(3, "m", prefer, true)); !errors.Is(err, ErrBaseMissing) {
			t.Errorf("prefer %q: %v, want base_missing", prefer, err)
		}
	}
	noHeader := preferring(4, "m", "p2", true)
	noHeader.HasRoutingHeader = false
	if _, err := r.RouteRequest(ss["req"], noHeader); !errors.Is(err, ErrBadFrame) {
		t.Errorf("no routing header: %v", err)
	}
	// Orgs stay apart: the same agent id in another org is not the base's provider.
	other, _, err := r.Register("acme", "req", nil, "req")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RouteRequest(other, preferring(5, "m", "p2", true)); !errors.Is(err, ErrBaseMissing) {
		t.Errorf("across orgs: %v", err)
	}
	// Refusals leave the request id free.
	if got := ss["req"].Requests(); got != 1 {
		t.Errorf("%d requests outstanding, want 1", got)
	}
}

func TestPreferAllocatesNothing(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"},
		agentSpec{id: "p1", models: []string{"m"}}, agentSpec{id: "p2", models: []string{"m"}})
	id := uint64(0)
	prefer, model := "p2", []byte("m")
	cycle := func() {
		for _, require := range []bool{false, true} {
			id++
			d, err := r.RouteRequest(ss["req"], Request{ID: id, Model: model, HasRoutingHeader: true, Prefer: prefer, Require: require})
			if err != nil || d.Provider.AgentID() != "p2" {
				t.Fatal(d.Provider, err)
			}
			if _, err := r.RouteReply(d.Provider, d.ID, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 100 {
		cycle()
	}
	if n := testing.AllocsPerRun(1000, cycle); n != 0 {
		t.Errorf("preferring allocates %.1f times", n)
	}
}
