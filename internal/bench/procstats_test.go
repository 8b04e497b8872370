package bench

import (
	"strings"
	"testing"
	"time"
)

func TestParseStatIdle(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		ok         bool
	}{
		// user nice system idle iowait irq softirq steal: idle+iowait = 1,117,954+2,346 ticks of 10 ms.
		{"linux", "cpu  1090163 0 291660 1117954 2346 0 73389 412 0 0\ncpu0 546786 0 145065 558293 673 0 36714 203 0 0\n", 11203 * time.Second, true},
		{"per-cpu line first", "cpu0 1 2 3 4 5\n", 0, false},
		{"short", "cpu 1 2 3 4\n", 0, false},
		{"not a number", "cpu 1 2 3 x 5 6\n", 0, false},
		{"negative", "cpu 1 2 3 -4 5 6\n", 0, false},
		{"overflowing", "cpu 1 2 3 99999999999999999 5 6\n", 0, false},
		{"empty", "", 0, false},
	} {
		got, ok := parseStatIdle(tc.stat)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := machineIdle(); !ok {
		t.Log("no /proc/stat here: idle CPUs are not reported")
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

// FuzzParseStatIdle: any text gives a reading or "not available", never a
// panic or a negative time. Seeds: testdata/fuzz/FuzzParseStatIdle.
func FuzzParseStatIdle(f *testing.F) {
	f.Fuzz(func(t *testing.T, stat string) {
		d, ok := parseStatIdle(stat)
		if !ok && d != 0 || d < 0 {
			t.Fatalf("%v, %v", d, ok)
		}
	})
}
