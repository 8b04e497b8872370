package bench

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// clock measures time as nanoseconds since its base, on the monotonic
// clock, so that intended send times and completion times compare exactly.
type clock struct{ base time.Time }

func newClock() clock { return clock{base: time.Now()} }

func (c clock) now() int64 { return int64(time.Since(c.base)) }

// Sample is one interval of a run's timeline.
type Sample struct {
	// TimeS is the end of the interval, in seconds since measurement began.
	TimeS            float64 `json:"t_s"`
	RoundTripsPerSec float64 `json:"round_trips_per_sec"`
	P50US            float64 `json:"p50_us"`
	P90US            float64 `json:"p90_us"`
	P99US            float64 `json:"p99_us"`
	Errors           int64   `json:"errors"`
	// CPUWait is how many of this process's threads were, on average,
	// ready to run but waiting for a CPU (Linux run-queue delay), whether
	// other work or the process's own threads held it (ProcessStats).
	// Stalls that coincide with it come from the scheduler, not from what
	// the threads were doing.
	CPUWait float64 `json:"cpu_wait"`
}

// recorder collects one run's outcomes. A request counts when its intended
// send time lies in the measurement window; its latency runs from that
// intended time to the arrival of its final reply, so a request that had
// to wait to be sent (open loop, target falling behind) carries the wait in
// its latency rather than hiding it (no coordinated omission).
type recorder struct {
	clk clock

	mu          sync.Mutex
	winStart    int64 // ns; no window while winEnd == 0
	winEnd      int64
	minInterval int64 // shortest timeline interval, ns
	total       *hdrhistogram.Histogram
	interval    *hdrhistogram.Histogram
	// open: an open loop, whose requests have a schedule; sendLag then
	// holds how late each measured request was sent against it.
	open        bool
	sendLag     *hdrhistogram.Histogram
	ok          int64
	errs        map[string]int64
	errCount    int64
	bytesOut    int64
	bytesIn     int64
	late        int64 // replies for requests already given up on
	warmupErrs  int64
	warmupWhy   map[string]int64
	ivStart     int64
	ivDelay     int64 // run-queue delay at the interval's start; -1 before the first tick
	ivOK, ivErr int64
	timeline    []Sample
	progressOK  int64 // every success, window or not, for the progress display
}

func newRecorder(clk clock) *recorder {
	return &recorder{
		clk:      clk,
		total:    newHistogram(),
		interval: newHistogram(),
		sendLag:  newHistogram(),
		errs:     make(map[string]int64),
		ivDelay:  -1,
	}
}

// setWindow sets the measurement window [start, end), in clock ns, and
// the shortest timeline interval worth a sample.
func (r *recorder) setWindow(start, end int64, minInterval time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.winStart, r.winEnd, r.ivStart = start, end, start
	r.minInterval = int64(minInterval)
}

// errorCount returns the failures recorded so far.
func (r *recorder) errorCount() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errCount
}

// inWindow reports whether a request intended at t is measured.
func (r *recorder) inWindow(t int64) bool {
	return r.winEnd != 0 && t >= r.winStart && t < r.winEnd
}

// success records a request intended at t, sent at sent, whose final reply
// arrived at now; out and in are the bytes it put on and took off the wire.
func (r *recorder) success(t, sent, now int64, out, in int) {
	r.mu.Lock()
	r.progressOK++
	if r.inWindow(t) {
		d := time.Duration(now - t)
		recordLatency(r.total, d)
		recordLatency(r.interval, d)
		if r.open {
			recordLatency(r.sendLag, time.Duration(sent-t))
		}
		r.ok++
		r.ivOK++
		r.bytesOut += int64(out)
		r.bytesIn += int64(in)
	}
	r.mu.Unlock()
}

// failure records a request intended at t that failed for reason.
func (r *recorder) failure(t int64, reason string) {
	r.mu.Lock()
	switch {
	case r.inWindow(t):
		r.errs[reason]++
		r.errCount++
		r.ivErr++
	case t < r.winStart:
		// Counted apart: a run whose warm-up failed should not look clean.
		r.warmupErrs++
		if r.warmupWhy == nil {
			r.warmupWhy = make(map[string]int64)
		}
		r.warmupWhy[reason]++
	}
	r.mu.Unlock()
}

// lateReply counts a reply for a request already completed (timed out).
func (r *recorder) lateReply() {
	r.mu.Lock()
	r.late++
	r.mu.Unlock()
}

// tick closes the current timeline interval at now; runDelay is the
// process's cumulative run-queue delay (ns) then. Intervals end at the
// window's end; ticks after it only finish the last one.
func (r *recorder) tick(now, runDelay int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.winEnd == 0 || now <= r.ivStart || r.ivStart >= r.winEnd {
		return
	}
	end := min(now, r.winEnd)
	if r.ivDelay < 0 || now <= r.winStart {
		r.ivDelay = runDelay
	}
	if end-r.ivStart < r.minInterval {
		// Too short to say anything (a tick just after the window opened,
		// or the last sliver at its end): fold it into the next interval.
		return
	}
	secs := float64(end-r.ivStart) / 1e9
	s := Sample{
		TimeS:            float64(end-r.winStart) / 1e9,
		RoundTripsPerSec: float64(r.ivOK) / secs,
		Errors:           r.ivErr,
		CPUWait:          float64(runDelay-r.ivDelay) / float64(end-r.ivStart),
	}
	r.ivDelay = runDelay
	if r.interval.TotalCount() > 0 {
		s.P50US = float64(r.interval.ValueAtQuantile(50)) / 1e3
		s.P90US = float64(r.interval.ValueAtQuantile(90)) / 1e3
		s.P99US = float64(r.interval.ValueAtQuantile(99)) / 1e3
	}
	r.timeline = append(r.timeline, s)
	r.interval.Reset()
	r.ivOK, r.ivErr = 0, 0
	r.ivStart = end
}

// successes returns every success so far (for progress display).
func (r *recorder) successes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.progressOK
}

// result summarises the window.
func (r *recorder) result() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	secs := float64(r.winEnd-r.winStart) / 1e9
	res := Result{
		Latency:        summarize(r.total),
		RoundTrips:     r.ok,
		Errors:         r.errCount,
		ErrorsByReason: make(map[string]int64, len(r.errs)),
		LateReplies:    r.late,
		WarmupErrors:   r.warmupErrs,
		Timeline:       append([]Sample(nil), r.timeline...),
	}
	for k, v := range r.errs {
		res.ErrorsByReason[k] = v
	}
	if r.open {
		lag := summarize(r.sendLag) // zero when nothing was measured
		res.SendLagP50US, res.SendLagP99US = lag.P50US, lag.P99US
	}
	if len(r.warmupWhy) > 0 {
		res.WarmupErrorsByReason = make(map[string]int64, len(r.warmupWhy))
		for k, v := range r.warmupWhy {
			res.WarmupErrorsByReason[k] = v
		}
	}
	if secs > 0 {
		res.DurationS = secs
		res.RoundTripsPerSec = float64(r.ok) / secs
		res.FramesPerSec = 2 * res.RoundTripsPerSec
		res.MBPerSec = float64(r.bytesOut+r.bytesIn) / secs / 1e6
	}
	return res
}
