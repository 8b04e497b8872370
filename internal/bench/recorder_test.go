package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestRecorderWindowAndPercentiles(t *testing.T) {
	rec := newRecorder(newClock())
	const ms = int64(time.Millisecond)
	rec.setWindow(10*ms, 1010*ms, 100*time.Millisecond)

	rec.success(5*ms, 5*ms, 6*ms, 100, 100)        // warm-up: not measured
	rec.failure(5*ms, "timeout")                   // warm-up failure: counted apart
	rec.success(1010*ms, 1010*ms, 1011*ms, 10, 10) // after the window
	// 1000 requests in the window with latencies 1 µs … 1000 µs.
	for i := int64(1); i <= 1000; i++ {
		at := 10*ms + i*ms - 1
		rec.success(at, at, at+i*1000, 600, 400)
	}
	rec.failure(20*ms, "queue_full")
	rec.failure(30*ms, "queue_full")
	rec.failure(40*ms, "timeout")

	res := rec.result()
	if res.RoundTrips != 1000 || res.Count != 1000 {
		t.Fatalf("round trips %d, latencies %d; want 1000", res.RoundTrips, res.Count)
	}
	if res.Errors != 3 || res.ErrorsByReason["queue_full"] != 2 || res.ErrorsByReason["timeout"] != 1 {
		t.Errorf("errors %d %v", res.Errors, res.ErrorsByReason)
	}
	if res.WarmupErrors != 1 {
		t.Errorf("warm-up errors %d, want 1", res.WarmupErrors)
	}
	if res.DurationS != 1 || res.RoundTripsPerSec != 1000 || res.FramesPerSec != 2000 {
		t.Errorf("duration %g s, %g rt/s, %g frames/s", res.DurationS, res.RoundTripsPerSec, res.FramesPerSec)
	}
	if res.MBPerSec != 1 { // 1000 × 1000 B in 1 s
		t.Errorf("MB/s %g, want 1", res.MBPerSec)
	}
	// HDR histograms with 3 significant digits: within 0.1%.
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"p50", res.P50US, 500}, {"p90", res.P90US, 900}, {"p99", res.P99US, 990},
		{"p99.9", res.P999US, 999}, {"max", res.MaxUS, 1000}, {"mean", res.MeanUS, 500.5},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %g µs, want %g", c.name, c.got, c.want)
		}
	}
	if res.Over1msPct != 0 || res.Over4msPct != 0 {
		t.Errorf("no latency passed 1 ms, yet %g%% over 1 ms and %g%% over 4 ms", res.Over1msPct, res.Over4msPct)
	}
	if res.SendLagP50US != 0 || res.SendLagP99US != 0 {
		t.Errorf("a closed loop has no schedule, yet sent late %g / %g µs", res.SendLagP50US, res.SendLagP99US)
	}
}

// TestRecorderSendLag: in an open loop the recorder keeps how late each
// measured request was sent against its schedule, apart from its latency.
func TestRecorderSendLag(t *testing.T) {
	rec := newRecorder(newClock())
	rec.open = true
	const ms = int64(time.Millisecond)
	rec.setWindow(10*ms, 1010*ms, 100*time.Millisecond)
	rec.success(5*ms, 9*ms, 9*ms, 1, 1) // warm-up: not measured
	for i := int64(1); i <= 1000; i++ {
		at := 10*ms + i*ms - 1
		rec.success(at, at+i*100, at+i*100+500_000, 1, 1) // sent i×0.1 µs late, answered 0.5 ms later
	}
	res := rec.result()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"sent late p50", res.SendLagP50US, 50}, {"sent late p99", res.SendLagP99US, 99},
		{"latency p50", res.P50US, 550}, {"latency p99", res.P99US, 599},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %g µs, want %g", c.name, c.got, c.want)
		}
	}
	med := medianResult([]*Result{{SendLagP99US: 1}, {SendLagP99US: 3}, {SendLagP99US: 2}})
	if med.SendLagP99US != 2 {
		t.Errorf("median sent late p99: %g", med.SendLagP99US)
	}
}

// TestLatencyShares: the shares over 1 and 4 ms tell a tail held by
// scheduler ticks from one spread over milliseconds, where p99 cannot.
func TestLatencyShares(t *testing.T) {
	h := newHistogram()
	for range 960 {
		recordLatency(h, 300*time.Microsecond)
	}
	for range 30 {
		recordLatency(h, 2*time.Millisecond)
	}
	for range 10 {
		recordLatency(h, 4300*time.Microsecond)
	}
	recordLatency(h, 1000*time.Microsecond) // exactly 1 ms is not over it
	l := summarize(h)
	if want := 100 * 40.0 / 1001; math.Abs(l.Over1msPct-want) > 1e-9 {
		t.Errorf("over 1 ms: %g%%, want %g%%", l.Over1msPct, want)
	}
	if want := 100 * 10.0 / 1001; math.Abs(l.Over4msPct-want) > 1e-9 {
		t.Errorf("over 4 ms: %g%%, want %g%%", l.Over4msPct, want)
	}
	med := medianResult([]*Result{{Latency: Latency{Over4msPct: 1}}, {Latency: Latency{Over4msPct: 3}}, {Latency: Latency{Over4msPct: 2}}})
	if med.Over4msPct != 2 {
		t.Errorf("median over 4 ms: %g", med.Over4msPct)
	}
}

// near reports whether an HDR histogram value is within its 0.1% precision.
func near(got, want float64) bool { return math.Abs(got-want) <= want*0.001+0.001 }

func TestRecorderTimeline(t *testing.T) {
	rec := newRecorder(newClock())
	const ms = int64(time.Millisecond)
	rec.setWindow(0, 300*ms, 50*time.Millisecond)
	for i := int64(0); i < 100; i++ { // 100 in the first 100 ms, 1 ms each
		rec.success(i*ms, i*ms, i*ms+ms, 1, 1)
	}
	rec.tick(10*ms, 0) // too short: folded into the next interval
	rec.tick(100*ms, 0)
	rec.success(150*ms, 150*ms, 160*ms, 1, 1)
	rec.failure(160*ms, "timeout")
	rec.tick(200*ms, 0)
	rec.tick(290*ms, 0)
	rec.tick(400*ms, 0) // after the window: nothing left to close
	tl := rec.result().Timeline
	if len(tl) != 3 {
		t.Fatalf("timeline %+v, want 3 intervals", tl)
	}
	if tl[0].TimeS != 0.1 || tl[0].RoundTripsPerSec != 1000 || !near(tl[0].P50US, 1000) {
		t.Errorf("first interval %+v", tl[0])
	}
	if tl[1].RoundTripsPerSec != 10 || tl[1].Errors != 1 || !near(tl[1].P99US, 10000) {
		t.Errorf("second interval %+v", tl[1])
	}
	if tl[2].RoundTripsPerSec != 0 || tl[2].P50US != 0 {
		t.Errorf("third interval %+v", tl[2])
	}
}

// TestReportJSONFields pins the names scripts read: the M2M run's figures
// at the top level and the same under "baseline".
func TestReportJSONFields(t *testing.T) {
	res := Result{Run: RunM2M, RoundTripsPerSec: 100, Errors: 0, Latency: Latency{P50US: 1, P99US: 2, P999US: 3},
		Process: &ProcessStats{Source: "process", AllocsPerFrame: 12}}
	base := Result{Run: RunRelay, RoundTripsPerSec: 200, Latency: Latency{P50US: 1, P99US: 1, P999US: 1},
		Process: &ProcessStats{Source: "process", AllocsPerFrame: 2}}
	rep := &LoadReport{Result: res, Baseline: &base}
	rep.computeRatios([]*Result{&res}, []*Result{&base})
	var m map[string]any
	decodeReport(t, rep, &m)
	b, _ := m["baseline"].(map[string]any)
	for _, k := range []string{"round_trips_per_sec", "frames_per_sec", "mb_per_sec", "p50_us", "p90_us", "p99_us", "p999_us", "max_us", "errors", "errors_by_reason", "timeline", "process"} {
		if _, ok := m[k]; !ok {
			t.Errorf("top level has no %q", k)
		}
		if _, ok := b[k]; !ok {
			t.Errorf("baseline has no %q", k)
		}
	}
	ratios, _ := m["ratios"].(map[string]any)
	if ratios["round_trips"] != 0.5 || ratios["p99"] != 2.0 || ratios["allocs_per_frame_extra"] != 10.0 {
		t.Errorf("ratios %v", ratios)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "0.50x") {
		t.Errorf("table does not show the ratio:\n%s", table.String())
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
go_memstats_mallocs_total 1.234567e+06
go_gc_duration_seconds{quantile="0.5"} 0.0001
go_memstats_heap_inuse_bytes 4.2e+06
`
	v, err := parseMetrics(strings.NewReader(text), "process_cpu_seconds_total", "go_memstats_mallocs_total", "go_memstats_heap_inuse_bytes")
	if err != nil {
		t.Fatal(err)
	}
	if v[0] != 12.5 || v[1] != 1234567 || v[2] != 4.2e6 {
		t.Errorf("got %v", v)
	}
	if _, err := parseMetrics(strings.NewReader(text), "go_memstats_alloc_bytes_total"); err == nil {
		t.Error("a missing metric must be an error")
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567", -4200: "-4,200"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%g) = %q, want %q", in, got, want)
		}
	}
}

func TestMedianOfRepetitions(t *testing.T) {
	mk := func(rate, p99 float64, errs int64) *Result {
		return &Result{RoundTripsPerSec: rate, Latency: Latency{P99US: p99}, Errors: errs,
			ErrorsByReason: map[string]int64{"timeout": errs}, Timeline: []Sample{{RoundTripsPerSec: rate}},
			Process: &ProcessStats{Source: "process", AllocsPerFrame: rate / 100}}
	}
	m2m := []*Result{mk(100, 9, 0), mk(300, 1, 1), mk(200, 5, 2)}
	base := []*Result{mk(400, 2, 0), mk(400, 2, 0), mk(100, 2, 0)}
	med := medianResult(m2m)
	if med.RoundTripsPerSec != 200 || med.P99US != 5 || med.Errors != 3 || med.ErrorsByReason["timeout"] != 3 {
		t.Errorf("median %+v", med)
	}
	if med.Timeline[0].RoundTripsPerSec != 200 || med.Process.AllocsPerFrame != 2 {
		t.Errorf("timeline or process not from the median run: %+v %+v", med.Timeline, med.Process)
	}
	rep := &LoadReport{Result: *med, Baseline: medianResult(base)}
	rep.computeRatios(m2m, base)
	// Per-repetition ratios 0.25, 0.75, 2: the median is 0.75, not
	// median(m2m)/median(base) = 0.5.
	if rep.Ratios.RoundTrips != 0.75 || rep.Ratios.P99 != 2.5 {
		t.Errorf("ratios %+v", rep.Ratios)
	}
	if median([]float64{4, 1, 3, 2}) != 2.5 || median(nil) != 0 {
		t.Error("median of an even count is the mean of the middle two")
	}
}

// TestRepetitionsOf: each repetition pairs the M2M run with the relay and
// NATS runs made right after it, and the table and the per-repetition
// Markdown show every repetition's ratio, not only their median.
func TestRepetitionsOf(t *testing.T) {
	mk := func(rate, p99, wait float64) *Result {
		return &Result{RoundTripsPerSec: rate, Latency: Latency{P99US: p99}, Process: &ProcessStats{Source: "process", CPUWait: wait}}
	}
	m2m := []*Result{mk(100, 4000, 0.5), mk(300, 1000, 0.1), mk(200, 2000, 0.3)}
	relay := []*Result{mk(200, 1000, 0.2), mk(300, 1000, 0.2), mk(100, 1000, 0.2)}
	nats := []*Result{mk(400, 2000, 0.6), mk(150, 2000, 0.6), mk(200, 1000, 0.6)}
	reps := repetitionsOf(m2m, relay, nats)
	if len(reps) != 3 {
		t.Fatalf("%d repetitions", len(reps))
	}
	for i, want := range []struct{ relay, nats, natsP99 float64 }{{0.5, 0.25, 2}, {1, 2, 0.5}, {2, 1, 2}} {
		rp := reps[i]
		if rp.RoundTripsRatio != want.relay || rp.NATSRoundTripsRatio != want.nats || rp.NATSP99Ratio != want.natsP99 || rp.NATS.CPUWait == nil || *rp.NATS.CPUWait != 0.6 {
			t.Errorf("repetition %d: %+v, want ratios %+v", i+1, rp, want)
		}
	}
	if got := repetitionsOf(m2m[:1], nil, nil); got[0].Baseline != nil || got[0].NATS != nil || got[0].NATSRoundTripsRatio != 0 {
		t.Errorf("a lone M2M run has nothing beside it: %+v", got[0])
	}

	rep := &LoadReport{Result: *medianResult(m2m), Baseline: medianResult(relay), NATS: medianResult(nats), Repetitions: reps}
	rep.computeRatios(m2m, relay)
	rep.NATSRatios = ratiosOf(m2m, nats)
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if want := "M2M/relay 0.50x 1.00x 2.00x; M2M/NATS 0.25x 2.00x 1.00x"; !strings.Contains(table.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, table.String())
	}
	rep.Repetitions = reps[:1]
	table.Reset()
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(table.String(), "by repetition") {
		t.Errorf("one repetition has no spread to show:\n%s", table.String())
	}

	rep.Repetitions = append(reps[:1:1], repetitionsOf(m2m[1:2], relay[1:2], nil)...)
	var md strings.Builder
	if err := WriteRepetitionsMarkdown(&md, []*LoadReport{rep}); err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(md.String()), "\n")
	if len(rows) != 4 {
		t.Fatalf("markdown:\n%s", md.String())
	}
	for i, want := range []string{"| 400 | 0.25x | 4.00 ms / 1.00 ms / 2.00 ms | 0.50 / 0.20 / 0.60 |", "| - | - | 1.00 ms / 1.00 ms / - | 0.10 / 0.20 / - |"} {
		if !strings.HasSuffix(rows[2+i], want) {
			t.Errorf("row %d = %q, want it to end %q", i+1, rows[2+i], want)
		}
	}
	// A daemon at --url read through its metrics has no CPU wait, and its
	// CPU cannot be set against this process's: "-", not 0.
	remote := &Result{RoundTripsPerSec: 100, Latency: Latency{P99US: 4000}, Process: &ProcessStats{Source: "metrics", CPUPerRoundTripUS: 10}}
	rep = &LoadReport{Result: *remote, NATS: nats[0], Repetitions: repetitionsOf([]*Result{remote}, nil, nats[:1]),
		NATSRatios: ratiosOf([]*Result{remote}, nats[:1])}
	md.Reset()
	if err := WriteRepetitionsMarkdown(&md, []*LoadReport{rep}); err != nil {
		t.Fatal(err)
	}
	if want := "| - / - / 0.60 |"; !strings.Contains(md.String(), want) {
		t.Errorf("per-repetition markdown lacks %q:\n%s", want, md.String())
	}
	md.Reset()
	if err := WriteLoadMarkdown(&md, []*LoadReport{rep}); err != nil {
		t.Fatal(err)
	}
	if want := "| 0.25x | - |"; !strings.Contains(md.String(), want) {
		t.Errorf("markdown gives a per-CPU ratio between the daemon's CPU and this process's (want %q):\n%s", want, md.String())
	}
}
