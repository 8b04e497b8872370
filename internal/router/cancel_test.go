package router

import (
	"errors"
	"slices"
	"sync"
	"testing"
)

func TestCancel(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p", models: []string{"m"}})
	req, p := ss["req"], ss["p"]
	d := mustRoute(t, r, req, Request{ID: 5, Channel: 8, Model: []byte("m"), HasRoutingHeader: true})
	r.SetProviderChannel(p, d.ID, 13, false)
	mustReply(t, r, p, d.ID, false) // a chunk: still outstanding

	// A CANCEL on another channel names another request (the id may have
	// been reused there after its END).
	if _, err := r.Cancel(req, 5, 4); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("cancel on another channel: %v", err)
	}
	if _, err := r.Cancel(req, 6, 8); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("cancel of an unknown id: %v", err)
	}
	c, err := r.Cancel(req, 5, 8)
	if err != nil || c.Provider != p || c.DeliveryID != d.ID || c.ProviderChannel != 13 {
		t.Fatalf("Cancel = %+v, %v", c, err)
	}
	// Both slots are free at once; the provider's late replies are unknown.
	if p.Outstanding() != 0 || req.Requests() != 0 {
		t.Fatalf("outstanding %d requests %d", p.Outstanding(), req.Requests())
	}
	for _, end := range []bool{false, true} {
		if _, err := r.RouteReply(p, d.ID, end); !errors.Is(err, ErrUnknownRequest) {
			t.Fatalf("late reply: %v", err)
		}
	}
	if _, err := r.Cancel(req, 5, 8); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("second cancel: %v", err)
	}
	// The id is free for reuse.
	mustRoute(t, r, req, Request{ID: 5, Channel: 8, Model: []byte("m"), HasRoutingHeader: true})

	// After the END, a CANCEL finds nothing.
	d3 := mustRoute(t, r, req, Request{ID: 9, Channel: 12, Model: []byte("m"), HasRoutingHeader: true})
	mustReply(t, r, p, d3.ID, true)
	if _, err := r.Cancel(req, 9, 12); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("cancel after END: %v", err)
	}
	// After the provider left, the request is an orphan, not cancellable.
	d4 := mustRoute(t, r, req, Request{ID: 10, Channel: 16, Model: []byte("m"), HasRoutingHeader: true})
	_ = d4
	if orphans := r.Remove(p); len(orphans) != 2 {
		t.Fatalf("orphans %+v", orphans)
	}
	if _, err := r.Cancel(req, 10, 16); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("cancel after the provider left: %v", err)
	}
}

// A CANCEL racing the END: exactly one of them ends the request.
func TestCancelRacesEnd(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p", models: []string{"m"}})
	req, p := ss["req"], ss["p"]
	for i := uint64(1); i <= 500; i++ {
		d := mustRoute(t, r, req, Request{ID: i, Channel: 4, Model: []byte("m"), HasRoutingHeader: true})
		var wg sync.WaitGroup
		var cancelErr, endErr error
		wg.Add(2)
		go func() { defer wg.Done(); _, cancelErr = r.Cancel(req, i, 4) }()
		go func() { defer wg.Done(); _, endErr = r.RouteReply(p, d.ID, true) }()
		wg.Wait()
		if (cancelErr == nil) == (endErr == nil) {
			t.Fatalf("request %d: cancel %v, END %v: want exactly one to succeed", i, cancelErr, endErr)
		}
		if p.Outstanding() != 0 || req.Requests() != 0 {
			t.Fatalf("request %d: outstanding %d requests %d", i, p.Outstanding(), req.Requests())
		}
	}
}

func TestModels(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "a", models: []string{"m2", "m1"}}, agentSpec{id: "b", models: []string{"m1", "m3"}})
	if got := r.Models(""); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("Models = %q", got)
	}
	r.Remove(ss["a"])
	if got := r.Models(""); !slices.Equal(got, []string{"m1", "m3"}) {
		t.Fatalf("after Remove: %q", got)
	}
	if got := r.Models("other-org"); len(got) != 0 {
		t.Fatalf("other org: %q", got)
	}
}

// A delivery remembers whether its request carried an extension block
// (reply deltas, docs/protocol.md §4.3) until its END, and a reused slot
// forgets it.
func TestDeliveryExt(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p", models: []string{"m"}})
	req, p := ss["req"], ss["p"]
	d := mustRoute(t, r, req, Request{ID: 1, Model: []byte("m"), HasRoutingHeader: true})
	r.SetProviderChannel(p, d.ID, 3, true)
	if rep := mustReply(t, r, p, d.ID, false); !rep.Ext {
		t.Fatalf("chunk: %+v", rep)
	}
	if rep := mustReply(t, r, p, d.ID, true); !rep.Ext || !rep.End {
		t.Fatalf("final: %+v", rep)
	}
	d = mustRoute(t, r, req, Request{ID: 2, Model: []byte("m"), HasRoutingHeader: true})
	if rep := mustReply(t, r, p, d.ID, true); rep.Ext {
		t.Fatalf("reused slot, no SetProviderChannel: %+v", rep)
	}
	d = mustRoute(t, r, req, Request{ID: 3, Model: []byte("m"), HasRoutingHeader: true})
	r.SetProviderChannel(p, d.ID, 3, false)
	if rep := mustReply(t, r, p, d.ID, true); rep.Ext {
		t.Fatalf("delivered without its block: %+v", rep)
	}
}
