package router

import (
	"slices"
	"testing"
)

// spanLog records how each traced delivery ended.
type spanLog struct{ ended *[]Outcome }

func (s spanLog) End(how Outcome) { *s.ended = append(*s.ended, how) }

// A delivery's span ends once, with how the delivery ended, whichever way
// that is; a delivery that has ended takes no span.
func TestTraceOutcomes(t *testing.T) {
	r, ss := setup(t, Config{}, agentSpec{id: "req"}, agentSpec{id: "p", models: []string{"m"}})
	req, p := ss["req"], ss["p"]
	var ended []Outcome
	route := func(id uint64) Delivery[string] {
		d := mustRoute(t, r, req, Request{ID: id, Channel: 4, Model: []byte("m"), HasRoutingHeader: true})
		if !r.Trace(p, d.ID, spanLog{&ended}) {
			t.Fatalf("Trace of outstanding delivery %d refused", d.ID)
		}
		if r.Trace(p, d.ID, spanLog{&ended}) {
			t.Fatal("a second span taken")
		}
		return d
	}
	d := route(1)
	mustReply(t, r, p, d.ID, false) // a chunk ends nothing
	mustReply(t, r, p, d.ID, true)
	if r.Trace(p, d.ID, spanLog{&ended}) {
		t.Fatal("an ended delivery took a span")
	}
	d = route(2)
	if _, err := r.Abort(p, d.ID); err != nil {
		t.Fatal(err)
	}
	route(3)
	if _, err := r.Cancel(req, 3, 4); err != nil {
		t.Fatal(err)
	}
	route(4)
	r.Remove(p)
	want := []Outcome{OutcomeEnd, OutcomeAborted, OutcomeCancelled, OutcomeProviderGone}
	if !slices.Equal(ended, want) {
		t.Fatalf("spans ended %v, want %v", ended, want)
	}
}
