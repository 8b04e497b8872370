package bench

import (
	"context"
	"runtime"
	"time"
)

// The open loop's pacing. Go's timers fire late by up to a millisecond when
// the process has nothing else to do: a thread with nothing to run waits in
// epoll, whose timeout counts whole milliseconds. At 1,000 requests a
// second that made the generator send half a millisecond late at p50, which
// the latency (counted from the schedule) then charged to the target. So
// waits that an idle process would get wrong go to the kernel's
// high-resolution sleep, on a thread of their own (precisePace); short
// waits, at rates that keep the process busy, stay with Go's timer, which
// is then on time and costs no system call.
const (
	// preciseMin: shorter waits use Go's timer, and rates whose requests
	// come closer than this run without precise sleeps at all. Such rates
	// keep the process busy, and its timers then fire within
	// microseconds. On the reference machine the two ways are even at
	// 12,000-20,000 requests a second (docs/benchmarks.md, "Method notes").
	preciseMin = 100 * time.Microsecond
	// preciseMax: the longest single sleep. Longer waits sleep on Go's
	// timer (which watches the context) until this much is left.
	preciseMax = 2 * time.Millisecond
)

// pacer waits until requests are due.
type pacer struct {
	timer   *time.Timer
	precise bool // the calling thread may sleep precisely (precisePace)
}

func newPacer(precise bool) *pacer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pacer{timer: t, precise: precise}
}

// wait returns once clk reaches due, or false if ctx ends first. It never
// returns early: a request sent before its time would have its latency
// understated.
func (p *pacer) wait(ctx context.Context, clk clock, due int64) bool {
	for {
		left := time.Duration(due - clk.now())
		switch {
		case left <= 0:
			return true
		case p.precise && left >= preciseMin && left <= preciseMax:
			sleepPrecisely(left)
			continue
		case p.precise && left > preciseMax:
			left -= preciseMax / 2 // the rest is slept precisely
		}
		p.timer.Reset(left)
		select {
		case <-p.timer.C:
		case <-ctx.Done():
			p.timer.Stop()
			return false
		}
	}
}

func (p *pacer) stop() { p.timer.Stop() }

// runPaced runs f, paced for rate requests a second, and waits for it.
// Where requests are far enough apart for precise sleeps (preciseMin), f
// runs on a goroutine locked to a thread of its own, made ready for them
// where the system allows. Faster rates keep the process busy, and a
// locked goroutine would cost a thread switch each time its timer fires
// (at 37,000 requests a second it made the generator 250 µs late at p50
// instead of 5 µs). The thread is not unlocked: it ends with the
// goroutine, so its changed timer slack never reaches other goroutines.
func runPaced(rate float64, f func(precise bool)) {
	if time.Duration(1e9/rate) < preciseMin {
		f(false)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		f(precisePace())
	}()
	<-done
}
