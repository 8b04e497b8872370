package bench

import (
	"context"
	"sync"
)

// intendedTime is when request k of an open-loop run at rate requests per
// second is meant to be sent: start + k/rate, in clock nanoseconds.
func intendedTime(start int64, k int64, rate float64) int64 {
	return start + int64(float64(k)*1e9/rate)
}

// slotOf is openLoop's acquire for the requests in flight bounded by
// sem's capacity: it takes a slot (the request's sender gives it back) or
// returns when ctx ends.
func slotOf(sem chan struct{}) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case sem <- struct{}{}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// openLoop sends requests at a fixed rate, as wrk2 does: request k is due
// at intendedTime(start, k, rate) whatever happened to the earlier ones.
// For each due request it waits for room (acquire; the number of requests
// in flight is bounded) and calls issue with the intended time, which the
// recorder measures latency from: a request that had to wait for room, or
// that the loop got to late, carries that wait in its latency.
//
// It returns when ctx ends or the next request would be due at or after
// stop, with the number of requests issued. issue must not block for long:
// it hands the request to a sender. p waits for each request's time
// (pace.go).
func openLoop(ctx context.Context, clk clock, p *pacer, start, stop int64, rate float64, acquire func(context.Context) error, issue func(intended int64)) int64 {
	var k int64
	for ctx.Err() == nil {
		due := intendedTime(start, k, rate)
		if due >= stop {
			return k
		}
		// Wait once, then send every request that has come due in the
		// meantime: at high rates the wait is longer than the interval.
		if !p.wait(ctx, clk, due) {
			return k
		}
		if err := acquire(ctx); err != nil {
			return k
		}
		issue(due)
		k++
	}
	// Behind schedule every request is due at once and no wait would
	// notice the end.
	return k
}

// closedLoop runs workers goroutines, each sending one request and waiting
// for its final reply before sending the next, until ctx ends, the clock
// passes stop or roundTrip reports that the worker's connection is gone (a
// worker on a dead connection would otherwise fail requests as fast as it
// can, and count millions of failures for one cause). roundTrip gets the
// worker's index and the send time.
func closedLoop(ctx context.Context, clk clock, workers int, stop int64, roundTrip func(ctx context.Context, worker int, intended int64) bool) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				now := clk.now()
				if now >= stop {
					return
				}
				if !roundTrip(ctx, w, now) {
					return
				}
			}
		})
	}
	wg.Wait()
}
