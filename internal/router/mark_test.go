package router

import (
	"errors"
	"testing"
)

// The Marker sees the provider chosen and the index of the request's model
// among its models, and its mark comes back with every reply and with each
// way a delivery ends: END, Abort, Cancel, the provider's removal, and a
// requester that left.
func TestMarkFollowsTheDelivery(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p", models: []string{"a", "b"}})
	type call struct {
		provider string
		model    int
	}
	var calls []call
	r.SetMarker(func(requester, provider *Session[string], model int) uint32 {
		calls = append(calls, call{provider.AgentID(), model})
		return uint32(100 + len(calls))
	})
	req, p := ss["req"], ss["p"]

	d := mustRoute(t, r, req, byModel(1, "b"))
	if rep := mustReply(t, r, p, d.ID, false); rep.Mark != 101 {
		t.Errorf("first reply: Mark %d, want 101", rep.Mark)
	}
	if rep := mustReply(t, r, p, d.ID, true); rep.Mark != 101 {
		t.Errorf("END: Mark %d, want 101", rep.Mark)
	}
	d = mustRoute(t, r, req, byModel(2, "a"))
	if rep, err := r.Abort(p, d.ID); err != nil || rep.Mark != 102 {
		t.Errorf("Abort: Mark %d, %v; want 102", rep.Mark, err)
	}
	mustRoute(t, r, req, toPeer(3, "p")) // addressed: no model
	if c, err := r.Cancel(req, 3, 12); err != nil || c.Mark != 103 {
		t.Errorf("Cancel: Mark %d, %v; want 103", c.Mark, err)
	}
	// The slot of a finished delivery is reused: the new mark replaces the
	// old.
	mustRoute(t, r, req, byModel(4, "a"))
	if want := []call{{"p", 1}, {"p", 0}, {"p", -1}, {"p", 0}}; len(calls) != len(want) || calls[0] != want[0] || calls[1] != want[1] || calls[2] != want[2] || calls[3] != want[3] {
		t.Errorf("Marker calls %v, want %v", calls, want)
	}
	orphans := r.Remove(p)
	if len(orphans) != 1 || orphans[0].Mark != 104 {
		t.Errorf("orphans %+v, want one with Mark 104", orphans)
	}

	// Remark changes what the delivery's later replies and end carry.
	r3, ss3 := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p", models: []string{"a"}})
	r3.SetMarker(func(_, _ *Session[string], _ int) uint32 { return 1 })
	d = mustRoute(t, r3, ss3["req"], byModel(1, "a"))
	mustReply(t, r3, ss3["p"], d.ID, false)
	r3.Remark(ss3["p"], d.ID, 9)
	if rep := mustReply(t, r3, ss3["p"], d.ID, true); rep.Mark != 9 {
		t.Errorf("after Remark: Mark %d, want 9", rep.Mark)
	}
	r3.Remark(ss3["p"], d.ID, 10) // ended: nothing to change, and no panic

	// A requester that left: the final reply is not routed, but says which
	// delivery it ended.
	r2, ss2 := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p", models: []string{"a"}})
	r2.SetMarker(func(_, _ *Session[string], _ int) uint32 { return 7 })
	d = mustRoute(t, r2, ss2["req"], byModel(1, "a"))
	r2.Remove(ss2["req"])
	rep, err := r2.RouteReply(ss2["p"], d.ID, true)
	if !errors.Is(err, ErrRequesterGone) || rep.Mark != 7 || !rep.End {
		t.Errorf("reply to a departed requester: %+v, %v; want Mark 7, End, ErrRequesterGone", rep, err)
	}
}
