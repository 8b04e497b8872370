package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestIntendedTime(t *testing.T) {
	for _, tc := range []struct {
		start, k int64
		rate     float64
		want     int64
	}{
		{0, 0, 1000, 0},
		{0, 1, 1000, 1_000_000},
		{500, 7, 1000, 7_000_500},
		{0, 1, 3, 333_333_333},
		{0, 3, 3, 1_000_000_000},
		{0, 1_000_000, 50_000, 20_000_000_000},
	} {
		if got := intendedTime(tc.start, tc.k, tc.rate); got != tc.want {
			t.Errorf("intendedTime(%d, %d, %g) = %d, want %d", tc.start, tc.k, tc.rate, got, tc.want)
		}
	}
}

// TestOpenLoopMeasuresFromIntendedTime is the coordinated-omission test:
// a target that can take a request only every 2 ms is driven at one
// request per millisecond. The loop must still issue every request with
// its scheduled time (no request skipped, none rescheduled), and the
// recorded latency must include the time each request waited to be sent,
// so it grows with the backlog instead of staying at the target's service
// time.
func TestOpenLoopMeasuresFromIntendedTime(t *testing.T) {
	const (
		rate = 1000.0 // one per ms
		n    = 25
		wait = 2 * time.Millisecond // per request, before it can go
	)
	clk := newClock()
	rec := newRecorder(clk)
	rec.open = true
	start := clk.now()
	stop := intendedTime(start, n, rate)
	rec.setWindow(start, stop, time.Millisecond)

	var intended []int64
	acquire := func(ctx context.Context) error {
		time.Sleep(wait) // no room in flight until the target frees some
		return nil
	}
	issued := openLoop(context.Background(), clk, newPacer(false), start, stop, rate, acquire, func(due int64) {
		intended = append(intended, due)
		now := clk.now()
		rec.success(due, now, now, 1, 1) // answered the moment it is sent
	})
	if issued != n || len(intended) != n {
		t.Fatalf("issued %d requests (%d recorded), want %d", issued, len(intended), n)
	}
	for k, due := range intended {
		if want := intendedTime(start, int64(k), rate); due != want {
			t.Fatalf("request %d intended at %d, want %d", k, due, want)
		}
	}
	res := rec.result()
	if res.RoundTrips != n {
		t.Fatalf("recorded %d round trips, want %d", res.RoundTrips, n)
	}
	// Request k cannot have been sent before (k+1) waits had passed, but was
	// due at k ms: its latency is at least (k+1)*2 - k ms. For the last one
	// that is n+1 ms, far above the zero the target itself took.
	floor := float64(n+1) * 1e3
	if res.MaxUS < floor {
		t.Errorf("max latency %.0f µs, want ≥ %.0f µs: the wait before sending was not measured", res.MaxUS, floor)
	}
	if res.P50US < float64(n/2)*1e3 {
		t.Errorf("p50 %.0f µs: latency must grow with the backlog", res.P50US)
	}
	// Answered the moment they were sent, these requests' latency is all
	// the generator's lateness, and the table must say so.
	if res.SendLagP99US < float64(n-2)*1e3 || res.SendLagP50US < float64(n/2)*1e3 {
		t.Errorf("sent late p50 %.0f µs, p99 %.0f µs: the generator's own delay was not reported", res.SendLagP50US, res.SendLagP99US)
	}
}

// TestOpenLoopStopsOnContext: once its context ends, openLoop issues
// nothing more, whether it is on schedule (it would wait for the next
// request) or behind it (every request is already due, as on a loaded
// machine: it must not go on issuing those without looking at the context).
func TestOpenLoopStopsOnContext(t *testing.T) {
	for name, lag := range map[string]time.Duration{"on schedule": 0, "behind schedule": time.Hour} {
		for _, precise := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/precise=%v", name, precise), func(t *testing.T) {
				clk := newClock()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				start := clk.now() - int64(lag)
				var count int
				done := make(chan int64)
				go runPaced(100, func(canPrecise bool) {
					done <- openLoop(ctx, clk, newPacer(precise && canPrecise), start, start+2*int64(time.Hour), 100, func(context.Context) error { return nil }, func(int64) {
						count++
						if count == 3 {
							cancel()
						}
					})
				})
				select {
				case k := <-done:
					if k != 3 {
						t.Errorf("issued %d after cancel, want 3", k)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("openLoop did not stop when its context ended")
				}
			})
		}
	}
}

// TestOpenLoopNeverEarly: the precise pacer sends no request before it is
// due, at rates whose waits it sleeps itself (under preciseMin, between
// preciseMin and preciseMax, and above preciseMax). A request sent early
// would have its latency, counted from the schedule, understated.
func TestOpenLoopNeverEarly(t *testing.T) {
	for _, rate := range []float64{40_000, 4_000, 300} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			clk := newClock()
			n := int64(min(200, rate/10)) // at most 100 ms of schedule
			start := clk.now() + int64(time.Millisecond)
			stop := intendedTime(start, n, rate)
			var early []time.Duration
			var issued int64
			runPaced(rate, func(precise bool) {
				if wantPrecise := runtime.GOOS == "linux" && rate < 1e9/float64(preciseMin); precise != wantPrecise {
					t.Errorf("precise sleeps: %v, want %v", precise, wantPrecise)
				}
				p := newPacer(precise)
				defer p.stop()
				issued = openLoop(context.Background(), clk, p, start, stop, rate, func(context.Context) error { return nil }, func(due int64) {
					if now := clk.now(); now < due {
						early = append(early, time.Duration(due-now))
					}
				})
			})
			if issued != n {
				t.Errorf("issued %d requests, want %d", issued, n)
			}
			if len(early) > 0 {
				t.Errorf("%d requests sent before they were due, by up to %v", len(early), slices.Max(early))
			}
		})
	}
}

func TestClosedLoopStopsAtDeadline(t *testing.T) {
	clk := newClock()
	stop := clk.now() + int64(50*time.Millisecond)
	var mu sync.Mutex
	last := map[int]int64{}
	calls := 0
	closedLoop(context.Background(), clk, 4, stop, func(_ context.Context, w int, at int64) bool {
		mu.Lock()
		defer mu.Unlock()
		if at >= stop {
			t.Errorf("worker %d sent at %d, after the stop %d", w, at, stop)
		}
		if at < last[w] {
			t.Errorf("worker %d went back in time", w)
		}
		last[w] = at
		calls++
		time.Sleep(time.Millisecond) // hold the worker like a round trip would
		return true
	})
	if len(last) != 4 || calls < 4 {
		t.Errorf("%d workers made %d calls", len(last), calls)
	}
	if now := clk.now(); now < stop {
		t.Errorf("closedLoop returned %v before its stop", time.Duration(stop-now))
	}
}

// TestClosedLoopStopsOnDeadConnection: a worker whose round trip reports a
// dead connection stops at once instead of failing requests in a loop.
func TestClosedLoopStopsOnDeadConnection(t *testing.T) {
	clk := newClock()
	stop := clk.now() + int64(time.Hour)
	var calls atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		closedLoop(context.Background(), clk, 3, stop, func(context.Context, int, int64) bool {
			calls.Add(1)
			return false
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("closedLoop went on after every worker's connection was gone")
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d round trips, want 3 (one per worker)", n)
	}
}
