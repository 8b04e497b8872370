package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// ProcessStats is what a run cost in CPU and memory: of this process when
// the daemon ran in it (daemon and generator together, IncludesDaemon), or
// of the daemon alone when it was read from its /metrics endpoint
// (--daemon-metrics, Source "metrics").
type ProcessStats struct {
	// Source is "process" (this process's rusage and runtime.MemStats) or
	// "metrics" (the daemon's Prometheus endpoint).
	Source         string `json:"source"`
	IncludesDaemon bool   `json:"includes_daemon"`
	IncludesLoad   bool   `json:"includes_load_generator"`
	// CPUSeconds is user+system CPU time over the measurement window;
	// CPUCores the same per wall-clock second.
	CPUSeconds        float64 `json:"cpu_seconds"`
	CPUCores          float64 `json:"cpu_cores"`
	CPUPerRoundTripUS float64 `json:"cpu_us_per_round_trip"`
	// HeapInuseBytes is the heap in use at the end of the window.
	HeapInuseBytes uint64 `json:"heap_inuse_bytes"`
	// Allocations over the window, per routed frame (a round trip is two
	// frames: the request and its reply).
	Allocs             uint64  `json:"allocs"`
	AllocsPerFrame     float64 `json:"allocs_per_frame"`
	AllocBytesPerFrame float64 `json:"alloc_bytes_per_frame"`
	GCCycles           uint32  `json:"gc_cycles,omitempty"`
	// CPUWait is how many of the process's threads were, on average,
	// ready to run but waiting for a CPU (Linux run-queue delay; this
	// process only). The CPU may be held by other work, or by this
	// process's own threads where the kernel queues them on one CPU while
	// another idles (docs/benchmarks.md, "Method notes"): either way the run
	// got less CPU than it could use, and its figures follow that share.
	CPUWait float64 `json:"cpu_wait"`
	// IdleCPUs is how many of the machine's CPUs were, on average, idle
	// over the window (Linux /proc/stat). Threads waiting (CPUWait) while
	// CPUs idle means the kernel queued them on busy CPUs instead of
	// waking idle ones, as some virtual machines' schedulers do; the
	// figures of such a run depend on where the kernel put the threads.
	IdleCPUs float64 `json:"idle_cpus,omitempty"`
}

// packed reports whether the run's threads waited for a CPU while the
// machine had CPUs idle: a quarter of a thread and of a CPU on average,
// well above what the scheduler's own latency accounts for.
func (s *ProcessStats) packed() bool {
	return s != nil && s.Source == "process" && s.CPUWait >= 0.25 && s.IdleCPUs >= 0.25
}

// maxStatTicks bounds each counter parseStat adds, so that a sum of eight
// in nanoseconds fits an int64.
const maxStatTicks = (1<<63 - 1) / uint64(10*time.Millisecond) / 8

// statCPU is the machine's CPU time, summed over its CPUs: all of it, the
// idle part (idle and iowait) and the part its host took (steal: a
// virtual machine's CPU that was ready to run and did not).
type statCPU struct{ total, idle, steal time.Duration }

// parseStat reads the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal, in USER_HZ ticks (1/100 s on Linux's every
// architecture); kernels before 2.6.11 have no steal, which reads 0.
func parseStat(stat string) (statCPU, bool) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return statCPU{}, false
	}
	// The kernel's counters are unsigned; more than 2^60 ticks each would
	// not fit a Duration together, and no machine has run that long.
	var c statCPU
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > maxStatTicks {
			return statCPU{}, false
		}
		d := time.Duration(n) * 10 * time.Millisecond
		c.total += d
		switch i {
		case 3, 4:
			c.idle += d
		case 7:
			c.steal = d
		}
	}
	return c, true
}

// stolenShare is the share of the machine's CPU time between two readings
// that its host took, in percent.
func stolenShare(from, to statCPU) float64 {
	if to.total <= from.total {
		return 0
	}
	return 100 * float64(to.steal-from.steal) / float64(to.total-from.total)
}

// usage is a point-in-time reading of the counters ProcessStats is the
// difference of.
type usage struct {
	at         time.Time
	cpu        time.Duration
	mallocs    uint64
	allocBytes uint64
	heapInuse  uint64
	numGC      uint32
	runDelay   time.Duration
	idle       time.Duration // the machine's, summed over its CPUs
	idleOK     bool
}

// processUsage reads this process's counters. ReadMemStats stops the world
// for a moment; it is called twice per run, at the window's edges.
func processUsage() usage {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	stat, idleOK := machineCPU()
	return usage{
		idle:       stat.idle,
		idleOK:     idleOK,
		at:         time.Now(),
		cpu:        processCPU(),
		mallocs:    ms.Mallocs,
		allocBytes: ms.TotalAlloc,
		heapInuse:  ms.HeapInuse,
		numGC:      ms.NumGC,
		runDelay:   runDelay(),
	}
}

// metricsUsage reads a daemon's counters from its Prometheus endpoint.
func metricsUsage(ctx context.Context, url string) (usage, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usage{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return usage{}, fmt.Errorf("bench: daemon metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return usage{}, fmt.Errorf("bench: daemon metrics: HTTP %d", resp.StatusCode)
	}
	v, err := parseMetrics(io.LimitReader(resp.Body, 16<<20), "process_cpu_seconds_total", "go_memstats_mallocs_total",
		"go_memstats_alloc_bytes_total", "go_memstats_heap_inuse_bytes")
	if err != nil {
		return usage{}, err
	}
	return usage{
		at:         time.Now(),
		cpu:        time.Duration(v[0] * 1e9),
		mallocs:    uint64(v[1]),
		allocBytes: uint64(v[2]),
		heapInuse:  uint64(v[3]),
	}, nil
}

// parseMetrics reads the values of unlabelled samples from the Prometheus
// text format; every name must be present.
func parseMetrics(r io.Reader, names ...string) ([]float64, error) {
	out := make([]float64, len(names))
	seen := make([]bool, len(names))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		for i, n := range names {
			if name != n {
				continue
			}
			f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
			if err != nil {
				return nil, fmt.Errorf("bench: daemon metrics: %s: %w", n, err)
			}
			out[i], seen[i] = f, true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: daemon metrics: %w", err)
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("bench: daemon metrics: no %s", names[i])
		}
	}
	return out, nil
}

// stats is the cost between two readings for roundTrips round trips.
func stats(a, b usage, roundTrips int64) *ProcessStats {
	wall := b.at.Sub(a.at).Seconds()
	s := &ProcessStats{
		CPUSeconds:     (b.cpu - a.cpu).Seconds(),
		HeapInuseBytes: b.heapInuse,
		Allocs:         b.mallocs - a.mallocs,
		GCCycles:       b.numGC - a.numGC,
	}
	if wall > 0 {
		s.CPUCores = s.CPUSeconds / wall
		s.CPUWait = (b.runDelay - a.runDelay).Seconds() / wall
		if a.idleOK && b.idleOK {
			s.IdleCPUs = (b.idle - a.idle).Seconds() / wall
		}
	}
	if roundTrips > 0 {
		frames := float64(2 * roundTrips)
		s.CPUPerRoundTripUS = s.CPUSeconds * 1e6 / float64(roundTrips)
		s.AllocsPerFrame = float64(s.Allocs) / frames
		s.AllocBytesPerFrame = float64(b.allocBytes-a.allocBytes) / frames
	}
	return s
}
