package bench

import (
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	const tick = 10 * time.Millisecond
	for _, tc := range []struct {
		name, stat string
		want       statCPU
		ok         bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice:
		// idle+iowait = 1,117,954+2,346 ticks of 10 ms; guest time is
		// already in user's, so the total stops at steal.
		{"linux", "cpu  1090163 0 291660 1117954 2346 0 73389 412 7 0\ncpu0 546786 0 145065 558293 673 0 36714 203 0 0\n",
			statCPU{total: 2575924 * tick, idle: 1120300 * tick, steal: 412 * tick}, true},
		{"no steal (before 2.6.11)", "cpu 1 2 3 4 5 6 7\n", statCPU{total: 28 * tick, idle: 9 * tick}, true},
		{"per-cpu line first", "cpu0 1 2 3 4 5\n", statCPU{}, false},
		{"short", "cpu 1 2 3 4\n", statCPU{}, false},
		{"not a number", "cpu 1 2 3 x 5 6\n", statCPU{}, false},
		{"negative", "cpu 1 2 3 -4 5 6\n", statCPU{}, false},
		{"overflowing", "cpu 1 2 3 99999999999999999 5 6\n", statCPU{}, false},
		{"empty", "", statCPU{}, false},
	} {
		got, ok := parseStat(tc.stat)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := machineCPU(); !ok {
		t.Log("no /proc/stat here: idle CPUs and stolen time are not reported")
	}
}

// The share of CPU time stolen is the steal ticks over all ticks between
// two readings; counters that did not move read 0.
func TestStolenShare(t *testing.T) {
	a := statCPU{total: 1000, idle: 500, steal: 10}
	for _, tc := range []struct {
		to   statCPU
		want float64
	}{
		{statCPU{total: 1200, idle: 550, steal: 60}, 25},
		{statCPU{total: 1200, idle: 700, steal: 10}, 0},
		{a, 0},
	} {
		if got := stolenShare(a, tc.to); got != tc.want {
			t.Errorf("%+v → %+v: %v %%, want %v %%", a, tc.to, got, tc.want)
		}
	}
}

// TestPackedThreadsNote: a run whose threads waited while CPUs idled gets
// a note under the table; a run on a busy or a quiet machine does not.
func TestPackedThreadsNote(t *testing.T) {
	for _, tc := range []struct {
		name       string
		wait, idle float64
		note       bool
	}{
		{"packed", 0.6, 0.55, true},
		{"busy machine", 0.6, 0.05, false},
		{"quiet", 0.02, 0.6, false},
	} {
		rep := &LoadReport{Result: Result{RoundTripsPerSec: 1000,
			Process: &ProcessStats{Source: "process", CPUWait: tc.wait, IdleCPUs: tc.idle}}}
		var out strings.Builder
		if err := rep.WriteTable(&out); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "threads waited for a CPU while"); got != tc.note {
			t.Errorf("%s: note %v, want %v:\n%s", tc.name, got, tc.note, out.String())
		}
		if !strings.Contains(out.String(), "idle CPUs (machine)") {
			t.Errorf("%s: no idle CPUs row:\n%s", tc.name, out.String())
		}
	}
}

// FuzzParseStat: any text gives a reading or "not available", never a
// panic, a negative time or parts larger than the whole. Seeds:
// testdata/fuzz/FuzzParseStat.
func FuzzParseStat(f *testing.F) {
	f.Fuzz(func(t *testing.T, stat string) {
		c, ok := parseStat(stat)
		if !ok && c != (statCPU{}) || c.idle < 0 || c.steal < 0 || c.idle+c.steal > c.total {
			t.Fatalf("%+v, %v", c, ok)
		}
	})
}
