package ingress

import (
	"testing"
	"time"
)

// The token bucket refunds what a request did not use, owes what it used
// beyond its reservation, and refills at its rate.
func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBucket(600, t0) // 10 a second
	steps := []struct {
		name string
		do   func() bool
	}{
		{"take 500 of 600", func() bool { _, ok := b.take(500, t0); return ok }},
		{"200 more refused", func() bool { d, ok := b.take(200, t0); return !ok && d == 10*time.Second }},
		{"settle 500 reserved to 100 used", func() bool { b.settle(500, 100, t0); return true }},
		{"take 500 after the refund", func() bool { _, ok := b.take(500, t0); return ok }},
		{"settle 500 reserved to 700 used: 200 owed", func() bool { b.settle(500, 700, t0); return true }},
		{"200 owed: 1 refused for 20.1 s", func() bool { d, ok := b.take(1, t0); return !ok && d == 20100*time.Millisecond }},
		{"after 40 s, 200 there", func() bool { _, ok := b.take(200, t0.Add(40*time.Second)); return ok }},
		{"refill capped at the minute's allowance", func() bool {
			_, ok := b.take(601, t0.Add(time.Hour))
			return !ok
		}},
		{"a lower limit counts the use so far", func() bool {
			// 500 taken of the 600 in hand: under 60, 440 would be
			// owed; the debt is capped at a minute's allowance.
			b.take(500, t0.Add(time.Hour))
			b.setLimit(60, t0.Add(time.Hour))
			_, ok := b.take(1, t0.Add(time.Hour))
			return !ok && b.size() == 60 && b.tokens == -60
		}},
		{"a higher limit gives the difference at once", func() bool {
			b.setLimit(1000, t0.Add(time.Hour))
			_, ok := b.take(500, t0.Add(time.Hour))
			return ok
		}},
		{"the 120 used before still count: 380 left", func() bool {
			_, more := b.take(381, t0.Add(time.Hour))
			_, ok := b.take(380, t0.Add(time.Hour))
			return !more && ok
		}},
	}
	for _, s := range steps {
		if !s.do() {
			t.Fatalf("%s: tokens %v", s.name, b.tokens)
		}
	}
}

// A usage far beyond any reservation (a provider may report anything)
// owes at most a minute's allowance, and the wait take reports stays a
// positive duration of at most two minutes: Retry-After is never wrong.
func TestBucketDebtCapped(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, used := range []int{1200, maxLimit, 1 << 62} {
		b := newBucket(600, t0)
		b.settle(0, used, t0)
		d, ok := b.take(600, t0)
		if ok || d <= 0 || d > 2*time.Minute {
			t.Fatalf("after a usage of %d: wait %v (ok %v), want (0, 2 min]", used, d, ok)
		}
		if _, ok := b.take(600, t0.Add(2*time.Minute)); !ok {
			t.Fatalf("after a usage of %d: still refused two minutes later", used)
		}
	}
}
