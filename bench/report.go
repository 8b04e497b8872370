package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Run names: what a Result measured.
const (
	RunM2M   = "m2m"   // routed through the M2M daemon
	RunRelay = "relay" // the same load through the bare relay (--baseline)
	RunEcho  = "echo"  // the generator against a target that echoes at once (--echo)
)

// Result is one run's figures. Latency is from each request's intended send
// time to its final reply.
type Result struct {
	Run    string `json:"run"`
	Target string `json:"target"`

	DurationS        float64 `json:"duration_s"`
	RoundTrips       int64   `json:"round_trips"`
	RoundTripsPerSec float64 `json:"round_trips_per_sec"`
	// FramesPerSec counts the frames a relay forwarded: each round trip is
	// a request and its reply.
	FramesPerSec float64 `json:"frames_per_sec"`
	// MBPerSec is the requests' and replies' message bytes (as handed to
	// the transport) per second, in 10^6 bytes.
	MBPerSec float64 `json:"mb_per_sec"`
	Latency

	Errors         int64            `json:"errors"`
	ErrorsByReason map[string]int64 `json:"errors_by_reason"`
	// ProviderErrors are failures the echo providers saw (notices, frames
	// that did not verify); they also show up as requester errors.
	ProviderErrors map[string]int64 `json:"provider_errors,omitempty"`
	// LateReplies arrived after their request had timed out.
	LateReplies int64 `json:"late_replies"`
	// WarmupErrors failed during the warm-up (not in Errors).
	WarmupErrors int64 `json:"warmup_errors"`

	Process  *ProcessStats `json:"process,omitempty"`
	Timeline []Sample      `json:"timeline"`
}

// Ratios compare the M2M run with the baseline run: the protocol's cost.
type Ratios struct {
	// RoundTrips is M2M round trips per second over the baseline's:
	// 0.5 means the protocol halves the throughput.
	RoundTrips float64 `json:"round_trips"`
	// P50, P99, P999: M2M latency over the baseline's.
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	// AllocsPerFrameExtra is the M2M run's process allocations per frame
	// minus the baseline's (same generator, same transport), when both
	// ran in this process.
	AllocsPerFrameExtra *float64 `json:"allocs_per_frame_extra,omitempty"`
}

// RunInfo records what was run.
type RunInfo struct {
	Target          string  `json:"target"`
	Transport       string  `json:"transport"`
	Security        string  `json:"security"`
	Algorithm       string  `json:"algorithm"`
	Encoding        string  `json:"encoding,omitempty"`
	Payloads        int     `json:"payloads"`
	PayloadName     string  `json:"payload"`
	JSONBytes       float64 `json:"json_bytes_mean"`
	FrameBytes      float64 `json:"frame_bytes_mean"`
	Mode            string  `json:"mode"` // closed or open
	Concurrency     int     `json:"concurrency,omitempty"`
	Rate            float64 `json:"rate,omitempty"`
	MaxInFlight     int     `json:"max_in_flight,omitempty"`
	Connections     int     `json:"connections"`
	Providers       int     `json:"providers"`
	DurationS       float64 `json:"duration_s"`
	WarmupS         float64 `json:"warmup_s"`
	ServiceTimeUS   float64 `json:"service_time_us"`
	TimeoutS        float64 `json:"timeout_s"`
	StartedAt       string  `json:"started_at"`
	CommandLine     string  `json:"command_line,omitempty"`
	InProcessDaemon bool    `json:"in_process_daemon"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs       int     `json:"cpus"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	CPUModel   string  `json:"cpu_model,omitempty"`
	OS         string  `json:"os"`
	Arch       string  `json:"arch"`
	GoVersion  string  `json:"go_version"`
	LoadAvg1   float64 `json:"load_avg_1m"`
	LoadAvgEnd float64 `json:"load_avg_1m_end"`
}

// LoadReport is the outcome of RunLoad. The M2M run's figures are at the
// top level; the baseline's (and the echo target's) have the same fields.
type LoadReport struct {
	Config  RunInfo `json:"config"`
	Machine Machine `json:"machine"`
	Result
	Baseline *Result `json:"baseline,omitempty"`
	Echo     *Result `json:"echo,omitempty"`
	Ratios   *Ratios `json:"ratios,omitempty"`
}

func machine() Machine {
	m := Machine{
		CPUs:       runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		GoVersion:  runtime.Version(),
		LoadAvg1:   loadAvg(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// loadAvg is the 1-minute load average (Linux), 0 elsewhere.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var v float64
	fmt.Sscan(string(b), &v)
	return v
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (r *LoadReport) computeRatios() {
	if r.Baseline == nil {
		return
	}
	b := r.Baseline
	r.Ratios = &Ratios{
		RoundTrips: ratio(r.RoundTripsPerSec, b.RoundTripsPerSec),
		P50:        ratio(r.P50US, b.P50US),
		P99:        ratio(r.P99US, b.P99US),
		P999:       ratio(r.P999US, b.P999US),
	}
	if r.Process != nil && b.Process != nil && r.Process.Source == "process" && b.Process.Source == "process" {
		d := r.Process.AllocsPerFrame - b.Process.AllocsPerFrame
		r.Ratios.AllocsPerFrameExtra = &d
	}
}

// WriteJSON writes the report as indented JSON.
func (r *LoadReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes a readable summary: one column per run.
func (r *LoadReport) WriteTable(w io.Writer) error {
	c := r.Config
	load := fmt.Sprintf("closed loop, %d in flight", c.Concurrency)
	if c.Mode == "open" {
		load = fmt.Sprintf("open loop at %s req/s (at most %d in flight)", thousands(c.Rate), c.MaxInFlight)
	}
	fmt.Fprintf(w, "\nm2md bench load: %s, security %s, %s, payload %s (%.0f B JSON, %.0f B frame), %s,\n",
		c.Transport, c.Security, c.Algorithm, c.PayloadName, c.JSONBytes, c.FrameBytes, load)
	fmt.Fprintf(w, "%d connections, %d providers, service time %s, %gs measured after %gs warm-up; %d CPUs, load %.2f → %.2f\n\n",
		c.Connections, c.Providers, time.Duration(c.ServiceTimeUS*1e3), c.DurationS, c.WarmupS, r.Machine.CPUs, r.Machine.LoadAvg1, r.Machine.LoadAvgEnd)

	runs := []*Result{&r.Result}
	names := []string{"M2M daemon"}
	if r.Baseline != nil {
		runs = append(runs, r.Baseline)
		names = append(names, "bare relay")
	}
	if r.Echo != nil {
		runs = append(runs, r.Echo)
		names = append(names, "echo target")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(label string, f func(*Result) string, ratio string) {
		fmt.Fprintf(tw, "%s\t", label)
		for _, res := range runs {
			fmt.Fprintf(tw, "%s\t", f(res))
		}
		if r.Ratios != nil {
			fmt.Fprintf(tw, "%s\t", ratio)
		}
		fmt.Fprintln(tw)
	}
	hdr := append([]string{""}, names...)
	if r.Ratios != nil {
		hdr = append(hdr, "M2M/relay")
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
	rt := func(v float64) string { return fmt.Sprintf("%.2fx", v) }
	var q Ratios
	if r.Ratios != nil {
		q = *r.Ratios
	}
	row("round trips/s", func(x *Result) string { return thousands(x.RoundTripsPerSec) }, rt(q.RoundTrips))
	row("frames/s", func(x *Result) string { return thousands(x.FramesPerSec) }, "")
	row("MB/s", func(x *Result) string { return fmt.Sprintf("%.1f", x.MBPerSec) }, "")
	row("p50", func(x *Result) string { return micros(x.P50US) }, rt(q.P50))
	row("p90", func(x *Result) string { return micros(x.P90US) }, "")
	row("p99", func(x *Result) string { return micros(x.P99US) }, rt(q.P99))
	row("p99.9", func(x *Result) string { return micros(x.P999US) }, rt(q.P999))
	row("max", func(x *Result) string { return micros(x.MaxUS) }, "")
	row("errors", func(x *Result) string { return fmt.Sprint(x.Errors) }, "")
	if r.Process != nil {
		label := "process"
		if r.Process.Source == "metrics" {
			label = "daemon"
		}
		proc := func(f func(*ProcessStats) string) func(*Result) string {
			return func(x *Result) string {
				if x.Process == nil {
					return "-"
				}
				return f(x.Process)
			}
		}
		row("CPU ("+label+")", proc(func(p *ProcessStats) string { return fmt.Sprintf("%.2f cores", p.CPUCores) }), "")
		row("CPU/round trip", proc(func(p *ProcessStats) string { return micros(p.CPUPerRoundTripUS) }), "")
		extra := ""
		if q.AllocsPerFrameExtra != nil {
			extra = fmt.Sprintf("%+.1f", *q.AllocsPerFrameExtra)
		}
		row("allocs/frame", proc(func(p *ProcessStats) string { return fmt.Sprintf("%.1f", p.AllocsPerFrame) }), extra)
		row("alloc B/frame", proc(func(p *ProcessStats) string { return thousands(p.AllocBytesPerFrame) }), "")
		row("heap in use", proc(func(p *ProcessStats) string { return fmt.Sprintf("%.1f MB", float64(p.HeapInuseBytes)/1e6) }), "")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, res := range runs {
		if len(res.ErrorsByReason) == 0 && len(res.ProviderErrors) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s errors:", names[i])
		for _, k := range sortedKeys(res.ErrorsByReason) {
			fmt.Fprintf(w, " %s=%d", k, res.ErrorsByReason[k])
		}
		for _, k := range sortedKeys(res.ProviderErrors) {
			fmt.Fprintf(w, " %s=%d", k, res.ProviderErrors[k])
		}
		fmt.Fprintln(w)
	}
	if r.Process != nil && r.Process.Source == "process" {
		fmt.Fprintln(w, "\nCPU and allocations are this process's: daemon (or relay) and load generator together.")
	}
	return nil
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// micros formats microseconds readably.
func micros(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2f s", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.2f ms", us/1e3)
	default:
		return fmt.Sprintf("%.1f µs", us)
	}
}

// thousands formats v rounded, with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
