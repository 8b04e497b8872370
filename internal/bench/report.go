package bench

import (
	"cmp"
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
	RunNATS  = "nats"  // the same load through an embedded nats-server (--compare nats)
	// RunSingle is the same load with the providers on the requesters'
	// daemon (--compare single-node, beside a --provider-target run).
	RunSingle = "single-node"

	// LoadConfig.Compare's values.
	CompareNATS       = "nats"
	CompareSingleNode = "single-node"
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
	// SendLagP50US and SendLagP99US (open loop only) say how late the load
	// generator sent its requests against their schedule. Latency counts
	// from the schedule, so that a target that falls behind cannot hide
	// its backlog; up to this much of it is the generator's own delay.
	SendLagP50US float64 `json:"send_lag_p50_us,omitempty"`
	SendLagP99US float64 `json:"send_lag_p99_us,omitempty"`

	Errors         int64            `json:"errors"`
	ErrorsByReason map[string]int64 `json:"errors_by_reason"`
	// ProviderErrors are failures the echo providers saw (notices, frames
	// that did not verify); they also show up as requester errors.
	ProviderErrors map[string]int64 `json:"provider_errors,omitempty"`
	// LateReplies arrived after their request had timed out.
	LateReplies int64 `json:"late_replies"`
	// WarmupErrors failed during the warm-up (not in Errors).
	WarmupErrors int64 `json:"warmup_errors"`
	// WarmupErrorsByReason splits WarmupErrors by reason.
	WarmupErrorsByReason map[string]int64 `json:"warmup_errors_by_reason,omitempty"`

	Process *ProcessStats `json:"process,omitempty"`
	// ProviderNode is the CPU and memory of the daemon the providers
	// connected to, when it is another node (--provider-target) read from
	// its metrics (--provider-daemon-metrics); Process is then the
	// requesters' node's.
	ProviderNode *ProcessStats `json:"provider_node,omitempty"`
	Timeline     []Sample      `json:"timeline"`
}

// Ratios compare the M2M run with the baseline run: the protocol's cost.
type Ratios struct {
	// RoundTrips is M2M round trips per second over the baseline's:
	// 0.5 means the protocol halves the throughput.
	RoundTrips float64 `json:"round_trips"`
	// RoundTripsPerCPU is M2M round trips per CPU second over the
	// baseline's (the baseline's CPU time per round trip over M2M's), for
	// runs whose process figures cover daemon and generator alike. On a
	// machine shared with other work, throughput follows the CPU share the
	// run happens to get while the CPU per round trip hardly moves, so this
	// is the steadier estimate of the throughput ratio on a dedicated
	// machine.
	RoundTripsPerCPU float64 `json:"round_trips_per_cpu,omitempty"`
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
	Target string `json:"target"`
	// ProviderTarget is the cluster node the providers used, if not Target.
	ProviderTarget string  `json:"provider_target,omitempty"`
	Repeat         int     `json:"repeat"`
	Transport      string  `json:"transport"`
	Security       string  `json:"security"`
	Algorithm      string  `json:"algorithm"`
	Encoding       string  `json:"encoding,omitempty"`
	Payloads       int     `json:"payloads"`
	PayloadName    string  `json:"payload"`
	JSONBytes      float64 `json:"json_bytes_mean"`
	FrameBytes     float64 `json:"frame_bytes_mean"`
	Mode           string  `json:"mode"` // closed or open
	Concurrency    int     `json:"concurrency,omitempty"`
	Rate           float64 `json:"rate,omitempty"`
	MaxInFlight    int     `json:"max_in_flight,omitempty"`
	Connections    int     `json:"connections"`
	Providers      int     `json:"providers"`
	DurationS      float64 `json:"duration_s"`
	WarmupS        float64 `json:"warmup_s"`
	ServiceTimeUS  float64 `json:"service_time_us"`
	TimeoutS       float64 `json:"timeout_s"`
	StartedAt      string  `json:"started_at"`
	// Model replaces the payloads' model for a running target.
	Model           string `json:"model,omitempty"`
	CommandLine     string `json:"command_line,omitempty"`
	InProcessDaemon bool   `json:"in_process_daemon"`
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
	// StealPct is the share of the machine's CPU time its host took
	// during the run (a virtual machine's steal, /proc/stat): the run
	// measured the host too when it is more than a few percent. Absent
	// where it is not known.
	StealPct *float64 `json:"steal_pct,omitempty"`
}

// finish records the machine at the run's end; start is machineCPU's
// reading at its start.
func (m *Machine) finish(start statCPU, startOK bool) {
	m.LoadAvgEnd = loadAvg()
	if now, ok := machineCPU(); ok && startOK {
		pct := stolenShare(start, now)
		m.StealPct = &pct
	}
}

// stolen is ", N % of the CPU time stolen by the host" when that is known.
func (m *Machine) stolen() string {
	if m.StealPct == nil {
		return ""
	}
	return fmt.Sprintf(", %.0f %% of the CPU time stolen by the host", *m.StealPct)
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
	// NATS is the same load through an embedded nats-server (--compare
	// nats); NATSRatios compares the M2M run with it, RelayNATSRatios the
	// bare relay.
	NATS            *Result `json:"nats,omitempty"`
	NATSRatios      *Ratios `json:"nats_ratios,omitempty"`
	RelayNATSRatios *Ratios `json:"relay_nats_ratios,omitempty"`
	// SingleNode is the same load with the providers on the requesters'
	// node (--compare single-node); SingleNodeRatios compares the
	// cross-node run with it. NodeCPURatio, when both daemons' metrics
	// were read, is the single-node daemon's CPU per round trip over that
	// of the busier node of the cross-node run (median over repetitions):
	// the cross/single ratio of round trips when each node has a machine
	// of its own and the daemons' CPU is what limits them.
	SingleNode       *Result `json:"single_node,omitempty"`
	SingleNodeRatios *Ratios `json:"single_node_ratios,omitempty"`
	NodeCPURatio     float64 `json:"node_cpu_ratio,omitempty"`
	// Repetitions lists each repetition's headline figures when the runs
	// were repeated (the figures above are then medians).
	Repetitions []Repetition `json:"repetitions,omitempty"`
}

// Repetition is one repetition of a repeated load benchmark: the M2M run
// and the runs compared with it, made seconds apart.
type Repetition struct {
	M2M             RunSummary  `json:"m2m"`
	Baseline        *RunSummary `json:"baseline,omitempty"`
	RoundTripsRatio float64     `json:"round_trips_ratio,omitempty"`
	P99Ratio        float64     `json:"p99_ratio,omitempty"`
	// NATS is the --compare nats run of this repetition, and the M2M run
	// over it.
	NATS                *RunSummary `json:"nats,omitempty"`
	NATSRoundTripsRatio float64     `json:"nats_round_trips_ratio,omitempty"`
	NATSP99Ratio        float64     `json:"nats_p99_ratio,omitempty"`
}

// repetitionsOf pairs each M2M run with the relay and NATS runs of its
// repetition. The medians above them hide how far apart repetitions were,
// which on a machine whose scheduler is erratic is most of the story.
func repetitionsOf(m2m, relay, nats []*Result) []Repetition {
	reps := make([]Repetition, 0, len(m2m))
	for i, m := range m2m {
		// against is run i of others beside m: its summary and m's round
		// trips and p99 over it; nothing when that run was not made.
		against := func(others []*Result) (*RunSummary, float64, float64) {
			if i >= len(others) {
				return nil, 0, 0
			}
			o := summaryOf(others[i])
			return &o, ratio(m.RoundTripsPerSec, o.RoundTripsPerSec), ratio(m.P99US, o.P99US)
		}
		r := Repetition{M2M: summaryOf(m)}
		r.Baseline, r.RoundTripsRatio, r.P99Ratio = against(relay)
		r.NATS, r.NATSRoundTripsRatio, r.NATSP99Ratio = against(nats)
		reps = append(reps, r)
	}
	return reps
}

// RunSummary is a run's headline figures.
type RunSummary struct {
	RoundTripsPerSec float64 `json:"round_trips_per_sec"`
	P50US            float64 `json:"p50_us"`
	P99US            float64 `json:"p99_us"`
	P999US           float64 `json:"p999_us"`
	Errors           int64   `json:"errors"`
	AllocsPerFrame   float64 `json:"allocs_per_frame,omitempty"`
	CPUPerRoundTrip  float64 `json:"cpu_us_per_round_trip,omitempty"`
	// CPUWait is this process's (ProcessStats.CPUWait); nil when the run's
	// figures came from a daemon's metrics, which do not have it.
	CPUWait *float64 `json:"cpu_wait,omitempty"`
}

func summaryOf(r *Result) RunSummary {
	s := RunSummary{RoundTripsPerSec: r.RoundTripsPerSec, P50US: r.P50US, P99US: r.P99US, P999US: r.P999US, Errors: r.Errors}
	if r.Process != nil {
		s.AllocsPerFrame, s.CPUPerRoundTrip = r.Process.AllocsPerFrame, r.Process.CPUPerRoundTripUS
		if r.Process.Source == "process" {
			w := r.Process.CPUWait
			s.CPUWait = &w
		}
	}
	return s
}

// median of vs (the mean of the middle two for an even count); 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianResult combines repetitions of one run: the median of every figure,
// the sum of every error count, and the timeline of the repetition whose
// throughput is the median.
func medianResult(rs []*Result) *Result {
	if len(rs) == 1 {
		return rs[0]
	}
	med := func(f func(*Result) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = f(r)
		}
		return median(vs)
	}
	out := &Result{
		Run:              rs[0].Run,
		Target:           rs[0].Target,
		DurationS:        med(func(r *Result) float64 { return r.DurationS }),
		RoundTrips:       int64(med(func(r *Result) float64 { return float64(r.RoundTrips) })),
		RoundTripsPerSec: med(func(r *Result) float64 { return r.RoundTripsPerSec }),
		FramesPerSec:     med(func(r *Result) float64 { return r.FramesPerSec }),
		MBPerSec:         med(func(r *Result) float64 { return r.MBPerSec }),
		Latency: Latency{
			Count:  int64(med(func(r *Result) float64 { return float64(r.Count) })),
			MeanUS: med(func(r *Result) float64 { return r.MeanUS }),
			P50US:  med(func(r *Result) float64 { return r.P50US }),
			P90US:  med(func(r *Result) float64 { return r.P90US }),
			P99US:  med(func(r *Result) float64 { return r.P99US }),
			P999US: med(func(r *Result) float64 { return r.P999US }),
			MaxUS:  med(func(r *Result) float64 { return r.MaxUS }),

			Over1msPct: med(func(r *Result) float64 { return r.Over1msPct }),
			Over4msPct: med(func(r *Result) float64 { return r.Over4msPct }),
		},
		SendLagP50US:   med(func(r *Result) float64 { return r.SendLagP50US }),
		SendLagP99US:   med(func(r *Result) float64 { return r.SendLagP99US }),
		ErrorsByReason: map[string]int64{},
	}
	for _, r := range rs {
		out.Errors += r.Errors
		out.WarmupErrors += r.WarmupErrors
		for k, v := range r.WarmupErrorsByReason {
			if out.WarmupErrorsByReason == nil {
				out.WarmupErrorsByReason = map[string]int64{}
			}
			out.WarmupErrorsByReason[k] += v
		}
		out.LateReplies += r.LateReplies
		for k, v := range r.ErrorsByReason {
			out.ErrorsByReason[k] += v
		}
		for k, v := range r.ProviderErrors {
			if out.ProviderErrors == nil {
				out.ProviderErrors = map[string]int64{}
			}
			out.ProviderErrors[k] += v
		}
	}
	byRate := slices.Clone(rs)
	slices.SortFunc(byRate, func(a, b *Result) int { return cmp.Compare(a.RoundTripsPerSec, b.RoundTripsPerSec) })
	out.Timeline = byRate[len(byRate)/2].Timeline
	out.Process = medianProcess(rs, func(r *Result) *ProcessStats { return r.Process })
	out.ProviderNode = medianProcess(rs, func(r *Result) *ProcessStats { return r.ProviderNode })
	return out
}

// medianProcess is the median of each figure of the runs' process stats
// that of picks; nil when the first run has none.
func medianProcess(rs []*Result, of func(*Result) *ProcessStats) *ProcessStats {
	if of(rs[0]) == nil {
		return nil
	}
	p := *of(rs[0])
	pm := func(f func(*ProcessStats) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			if s := of(r); s != nil {
				vs[i] = f(s)
			}
		}
		return median(vs)
	}
	p.CPUSeconds = pm(func(s *ProcessStats) float64 { return s.CPUSeconds })
	p.CPUCores = pm(func(s *ProcessStats) float64 { return s.CPUCores })
	p.CPUPerRoundTripUS = pm(func(s *ProcessStats) float64 { return s.CPUPerRoundTripUS })
	p.HeapInuseBytes = uint64(pm(func(s *ProcessStats) float64 { return float64(s.HeapInuseBytes) }))
	p.Allocs = uint64(pm(func(s *ProcessStats) float64 { return float64(s.Allocs) }))
	p.AllocsPerFrame = pm(func(s *ProcessStats) float64 { return s.AllocsPerFrame })
	p.AllocBytesPerFrame = pm(func(s *ProcessStats) float64 { return s.AllocBytesPerFrame })
	p.GCCycles = uint32(pm(func(s *ProcessStats) float64 { return float64(s.GCCycles) }))
	p.CPUWait = pm(func(s *ProcessStats) float64 { return s.CPUWait })
	p.IdleCPUs = pm(func(s *ProcessStats) float64 { return s.IdleCPUs })
	return &p
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

// computeRatios compares each repetition's M2M run with the baseline run
// made right after it, and keeps the median of each ratio: a drift in the
// machine's load between repetitions then cancels out.
func (r *LoadReport) computeRatios(m2m, base []*Result) {
	r.Ratios = ratiosOf(m2m, base)
}

// ratiosOf compares each repetition of one run with the other run's of the
// same repetition (made seconds apart) and keeps the median of each ratio.
func ratiosOf(m2m, base []*Result) *Ratios {
	n := min(len(m2m), len(base))
	if n == 0 {
		return nil
	}
	var rt, perCPU, p50, p99, p999, allocs []float64
	for i := range n {
		a, b := m2m[i], base[i]
		rt = append(rt, ratio(a.RoundTripsPerSec, b.RoundTripsPerSec))
		p50 = append(p50, ratio(a.P50US, b.P50US))
		p99 = append(p99, ratio(a.P99US, b.P99US))
		p999 = append(p999, ratio(a.P999US, b.P999US))
		if a.Process != nil && b.Process != nil && a.Process.Source == "process" && b.Process.Source == "process" &&
			a.Process.IncludesDaemon == b.Process.IncludesDaemon {
			allocs = append(allocs, a.Process.AllocsPerFrame-b.Process.AllocsPerFrame)
			perCPU = append(perCPU, ratio(b.Process.CPUPerRoundTripUS, a.Process.CPUPerRoundTripUS))
		}
	}
	q := &Ratios{RoundTrips: median(rt), P50: median(p50), P99: median(p99), P999: median(p999)}
	if len(allocs) == n {
		d := median(allocs)
		q.AllocsPerFrameExtra = &d
		q.RoundTripsPerCPU = median(perCPU)
	}
	return q
}

// nodeCPURatio is the median, over repetitions, of the single-node
// daemon's CPU per round trip over the busier node's of the cross-node
// run; 0 unless every run has both nodes' figures from their metrics.
func nodeCPURatio(cross, single []*Result) float64 {
	n := min(len(cross), len(single))
	var rs []float64
	for i := range n {
		c, s := cross[i], single[i]
		if c.Process == nil || c.ProviderNode == nil || s.Process == nil || c.Process.Source != "metrics" || s.Process.Source != "metrics" {
			return 0
		}
		rs = append(rs, ratio(s.Process.CPUPerRoundTripUS, max(c.Process.CPUPerRoundTripUS, c.ProviderNode.CPUPerRoundTripUS)))
	}
	if len(rs) == 0 {
		return 0
	}
	return median(rs)
}

// WriteJSON writes the report as indented JSON.
func (r *LoadReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes a readable summary: one column per run and one per
// ratio, then the notes a reader needs to weigh them.
func (r *LoadReport) WriteTable(w io.Writer) error {
	r.writeHeading(w)
	runs, names := r.columns()
	t := &runTable{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight), runs: runs, cols: r.ratioColumns()}
	t.header(names)
	r.writeRateRows(t)
	r.writeProcessRows(t)
	if err := t.tw.Flush(); err != nil {
		return err
	}
	if line := repetitionLine(r.Repetitions); line != "" {
		fmt.Fprintf(w, "\nRound-trip ratios by repetition (the table gives their medians): %s\n", line)
	}
	writeRunErrors(w, runs, names)
	r.writeNotes(w, runs, names)
	return nil
}

// writeHeading says what load ran against what, and on what machine.
func (r *LoadReport) writeHeading(w io.Writer) {
	c := r.Config
	load := fmt.Sprintf("closed loop, %d in flight", c.Concurrency)
	if c.Mode == "open" {
		load = fmt.Sprintf("open loop at %s req/s (at most %d in flight)", thousands(c.Rate), c.MaxInFlight)
	}
	fmt.Fprintf(w, "\nm2md bench load: %s, security %s, %s, payload %s (%.0f B JSON, %.0f B frame), %s,\n",
		c.Transport, c.Security, c.Algorithm, c.PayloadName, c.JSONBytes, c.FrameBytes, load)
	fmt.Fprintf(w, "%d connections, %d providers, service time %s, %gs measured after %gs warm-up; %d CPUs, load %.2f → %.2f%s\n\n",
		c.Connections, c.Providers, time.Duration(c.ServiceTimeUS*1e3), c.DurationS, c.WarmupS, r.Machine.CPUs, r.Machine.LoadAvg1, r.Machine.LoadAvgEnd, r.Machine.stolen())
}

// columns returns the runs the report holds, the M2M run first, and their
// column names.
func (r *LoadReport) columns() ([]*Result, []string) {
	runs := []*Result{&r.Result}
	names := []string{"M2M daemon"}
	if r.Config.ProviderTarget != "" {
		names[0] = "M2M cross-node"
	}
	for _, o := range []struct {
		res  *Result
		name string
	}{{r.SingleNode, "M2M single-node"}, {r.Baseline, "bare relay"}, {r.Echo, "echo target"}} {
		if o.res != nil {
			runs = append(runs, o.res)
			names = append(names, o.name)
		}
	}
	if r.NATS != nil {
		runs = append(runs, r.NATS)
		names = append(names, natsName(r.NATS.Target))
	}
	return runs, names
}

// ratioCol is a column of ratios between two of the runs.
type ratioCol struct {
	name string
	q    *Ratios
}

// ratioColumns are M2M over the bare relay, over NATS, the bare relay over
// NATS, and cross-node over single-node: those the report has.
func (r *LoadReport) ratioColumns() []ratioCol {
	var cols []ratioCol
	for _, rc := range []ratioCol{{"M2M/relay", r.Ratios}, {"M2M/NATS", r.NATSRatios}, {"relay/NATS", r.RelayNATSRatios}, {"cross/single", r.SingleNodeRatios}} {
		if rc.q != nil {
			cols = append(cols, rc)
		}
	}
	return cols
}

// runTable writes rows of one figure per run, then its ratio per ratio
// column.
type runTable struct {
	tw   *tabwriter.Writer
	runs []*Result
	cols []ratioCol
}

func (t *runTable) header(names []string) {
	hdr := append([]string{""}, names...)
	for _, col := range t.cols {
		hdr = append(hdr, col.name)
	}
	fmt.Fprintln(t.tw, strings.Join(hdr, "\t")+"\t")
}

// row writes label, f of each run, and rf of each ratio column (empty
// cells where rf is nil).
func (t *runTable) row(label string, f func(*Result) string, rf func(*Ratios) string) {
	fmt.Fprintf(t.tw, "%s\t", label)
	for _, res := range t.runs {
		fmt.Fprintf(t.tw, "%s\t", f(res))
	}
	for _, col := range t.cols {
		v := ""
		if rf != nil {
			v = rf(col.q)
		}
		fmt.Fprintf(t.tw, "%s\t", v)
	}
	fmt.Fprintln(t.tw)
}

// ratioCell formats the ratio f picks, "-" where there is none.
func ratioCell(f func(*Ratios) float64) func(*Ratios) string {
	return func(q *Ratios) string {
		if v := f(q); v != 0 {
			return fmt.Sprintf("%.2fx", v)
		}
		return "-"
	}
}

// writeRateRows writes throughput, latency and errors.
func (r *LoadReport) writeRateRows(t *runTable) {
	t.row("round trips/s", func(x *Result) string { return thousands(x.RoundTripsPerSec) }, ratioCell(func(q *Ratios) float64 { return q.RoundTrips }))
	perCPU := false
	for _, col := range t.cols {
		perCPU = perCPU || col.q.RoundTripsPerCPU != 0
	}
	if perCPU {
		t.row("round trips/CPU-s", func(x *Result) string {
			if x.Process == nil || x.Process.CPUPerRoundTripUS == 0 {
				return "-"
			}
			return thousands(1e6 / x.Process.CPUPerRoundTripUS)
		}, ratioCell(func(q *Ratios) float64 { return q.RoundTripsPerCPU }))
	}
	t.row("frames/s", func(x *Result) string { return thousands(x.FramesPerSec) }, nil)
	t.row("MB/s", func(x *Result) string { return fmt.Sprintf("%.1f", x.MBPerSec) }, nil)
	t.row("mean", func(x *Result) string { return micros(x.MeanUS) }, nil)
	t.row("p50", func(x *Result) string { return micros(x.P50US) }, ratioCell(func(q *Ratios) float64 { return q.P50 }))
	t.row("p90", func(x *Result) string { return micros(x.P90US) }, nil)
	t.row("p99", func(x *Result) string { return micros(x.P99US) }, ratioCell(func(q *Ratios) float64 { return q.P99 }))
	t.row("p99.9", func(x *Result) string { return micros(x.P999US) }, ratioCell(func(q *Ratios) float64 { return q.P999 }))
	t.row("max", func(x *Result) string { return micros(x.MaxUS) }, nil)
	t.row("over 1 ms", func(x *Result) string { return fmt.Sprintf("%.2f%%", x.Over1msPct) }, nil)
	t.row("over 4 ms", func(x *Result) string { return fmt.Sprintf("%.2f%%", x.Over4msPct) }, nil)
	if r.Config.Mode == "open" {
		t.row("sent late p50/p99", func(x *Result) string {
			return micros(x.SendLagP50US) + " / " + micros(x.SendLagP99US)
		}, nil)
	}
	t.row("errors", func(x *Result) string { return fmt.Sprint(x.Errors) }, nil)
}

// writeProcessRows writes CPU and memory, when the M2M run has them.
func (r *LoadReport) writeProcessRows(t *runTable) {
	if r.Process == nil {
		return
	}
	label := "process"
	if r.Process.Source == "metrics" {
		label = "daemon"
	}
	proc := func(f func(*ProcessStats) string) func(*Result) string {
		return func(x *Result) string {
			// A column measured otherwise than the row's label says
			// (the generator alone beside a daemon's own figures) is
			// left out rather than compared.
			if p := x.Process; p == nil || p.Source != r.Process.Source || p.IncludesDaemon != r.Process.IncludesDaemon {
				return "-"
			}
			return f(x.Process)
		}
	}
	t.row("CPU ("+label+")", proc(func(p *ProcessStats) string { return fmt.Sprintf("%.2f cores", p.CPUCores) }), nil)
	t.row("CPU/round trip", proc(func(p *ProcessStats) string { return micros(p.CPUPerRoundTripUS) }), nil)
	if r.ProviderNode != nil {
		t.row("provider node CPU/rt", func(x *Result) string {
			if x.ProviderNode == nil {
				return "-"
			}
			return micros(x.ProviderNode.CPUPerRoundTripUS)
		}, nil)
	}
	t.row("allocs/frame", proc(func(p *ProcessStats) string { return fmt.Sprintf("%.1f", p.AllocsPerFrame) }), func(q *Ratios) string {
		if q.AllocsPerFrameExtra == nil {
			return ""
		}
		return fmt.Sprintf("%+.1f", *q.AllocsPerFrameExtra)
	})
	t.row("alloc B/frame", proc(func(p *ProcessStats) string { return thousands(p.AllocBytesPerFrame) }), nil)
	t.row("heap in use", proc(func(p *ProcessStats) string { return fmt.Sprintf("%.1f MB", float64(p.HeapInuseBytes)/1e6) }), nil)
	if r.Process.Source == "process" {
		t.row("CPU wait", proc(func(p *ProcessStats) string { return fmt.Sprintf("%.2f threads", p.CPUWait) }), nil)
		t.row("idle CPUs (machine)", proc(func(p *ProcessStats) string { return fmt.Sprintf("%.2f", p.IdleCPUs) }), nil)
	}
}

// writeRunErrors lists each run's errors by reason, the requesters' and
// the providers'.
func writeRunErrors(w io.Writer, runs []*Result, names []string) {
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
}

// writeNotes says what the figures mean where the table alone would
// mislead: a cluster's per-node ratio, runs placed unlike, threads packed
// on busy CPUs, the generator's lateness, whose CPU was counted.
func (r *LoadReport) writeNotes(w io.Writer, runs []*Result, names []string) {
	if r.NodeCPURatio != 0 && r.SingleNode != nil && r.SingleNode.Process != nil && r.Process != nil && r.ProviderNode != nil {
		fmt.Fprintf(w, "\nPer node: the single-node daemon spends %s of CPU per round trip, the busier node of the cross-node run %s:\n"+
			"with a machine per node, cross-node carries %.2fx the round trips of single-node (the rate ratio above is for this machine,\n"+
			"where both daemons and the generator share its CPUs).\n",
			micros(r.SingleNode.Process.CPUPerRoundTripUS), micros(max(r.Process.CPUPerRoundTripUS, r.ProviderNode.CPUPerRoundTripUS)), r.NodeCPURatio)
	}
	if note := placementNote(r); note != "" {
		fmt.Fprintf(w, "\n%s\n", note)
	}
	for i, res := range runs {
		if res.Process.packed() {
			fmt.Fprintf(w, "\n%s: on average %.2f threads waited for a CPU while %.2f of the machine's CPUs were idle. The kernel kept\n"+
				"threads queued on busy CPUs instead of moving them to idle ones (some virtual machines' schedulers pack threads so), unless\n"+
				"other work came in bursts. Ratios on such a machine swing from run to run: --repeat shows how far, and docs/benchmarks.md\n"+
				"(\"Method notes\") what it costs.\n", names[i], res.Process.CPUWait, res.Process.IdleCPUs)
			break
		}
	}
	if r.Config.Mode == "open" {
		fmt.Fprintln(w, "\nsent late: how late the load generator sent requests against their schedule; latencies count from the schedule,")
		fmt.Fprintln(w, "so up to this much of them is the generator's own delay, not the target's.")
	}
	if r.Process != nil && r.Process.Source == "process" {
		if r.Process.IncludesDaemon {
			fmt.Fprintln(w, "\nCPU and allocations are this process's: daemon (or relay, or nats-server) and load generator together.")
		} else {
			fmt.Fprintln(w, "\nCPU and allocations are this process's: the load generator's alone; a server in a process of its own is not\n"+
				"counted (--daemon-metrics reads the daemon's).")
		}
		fmt.Fprintln(w, "CPU wait: threads of this process ready to run but waiting for a CPU, held by other work or by this process's own threads.")
	}
}

// repetitionLine lists each repetition's round-trip ratios, so that a
// reader sees whether the median is a consensus or a coin toss.
func repetitionLine(reps []Repetition) string {
	if len(reps) < 2 {
		return ""
	}
	var parts []string
	for _, c := range []struct {
		name string
		f    func(Repetition) float64
	}{
		{"M2M/relay", func(rp Repetition) float64 { return rp.RoundTripsRatio }},
		{"M2M/NATS", func(rp Repetition) float64 { return rp.NATSRoundTripsRatio }},
	} {
		var vs []string
		for _, rp := range reps {
			if v := c.f(rp); v != 0 {
				vs = append(vs, fmt.Sprintf("%.2fx", v))
			}
		}
		if len(vs) > 0 {
			parts = append(parts, c.name+" "+strings.Join(vs, " "))
		}
	}
	return strings.Join(parts, "; ")
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

// WriteLoadMarkdown writes one Markdown table row per report, the M2M run
// beside its baseline: the matrix docs/benchmarks.md summarises.
func WriteLoadMarkdown(w io.Writer, reps []*LoadReport) error {
	var t table
	t.add("transport", "security", "payload", "load", "M2M rt/s", "relay rt/s", "ratio", "ratio per CPU",
		"M2M p50 / p99 / p99.9", "relay p50 / p99 / p99.9", "p99 ratio", "allocs/frame M2M / relay", "CPU µs/rt M2M / relay",
		"NATS rt/s", "M2M/NATS", "M2M/NATS per CPU", "NATS p50 / p99 / p99.9", "errors")
	lat := func(r *Result) string {
		return fmt.Sprintf("%s / %s / %s", micros(r.P50US), micros(r.P99US), micros(r.P999US))
	}
	for _, r := range reps {
		c := r.Config
		load := fmt.Sprintf("%d in flight", c.Concurrency)
		if c.Mode == "open" {
			load = thousands(c.Rate) + " req/s"
		}
		row := []string{c.Transport, c.Security, c.PayloadName, load, thousands(r.RoundTripsPerSec)}
		errs := r.Errors
		allocs, cpu := "-", "-"
		if r.Process != nil {
			allocs = fmt.Sprintf("%.1f", r.Process.AllocsPerFrame)
			cpu = fmt.Sprintf("%.0f", r.Process.CPUPerRoundTripUS)
		}
		if b := r.Baseline; b != nil && r.Ratios != nil {
			errs += b.Errors
			perCPU := perCPURatio(r)
			row = append(row, thousands(b.RoundTripsPerSec), fmt.Sprintf("%.2fx", r.Ratios.RoundTrips), ratioOrDash(perCPU),
				lat(&r.Result), lat(b), fmt.Sprintf("%.2fx", r.Ratios.P99))
			if b.Process != nil && r.Process != nil {
				allocs += fmt.Sprintf(" / %.1f", b.Process.AllocsPerFrame)
				cpu += fmt.Sprintf(" / %.0f", b.Process.CPUPerRoundTripUS)
			}
		} else {
			row = append(row, "-", "-", "-", lat(&r.Result), "-", "-")
		}
		row = append(row, allocs, cpu)
		if n, q := r.NATS, r.NATSRatios; n != nil && q != nil {
			errs += n.Errors
			row = append(row, natsName(n.Target)+" "+thousands(n.RoundTripsPerSec), fmt.Sprintf("%.2fx", q.RoundTrips),
				ratioOrDash(q.RoundTripsPerCPU), lat(n))
		} else {
			row = append(row, "-", "-", "-", "-")
		}
		row = append(row, fmt.Sprint(errs))
		t.add(row...)
	}
	return t.markdown(w)
}

// ReadLoadReport reads a report written by WriteJSON.
func ReadLoadReport(rd io.Reader) (*LoadReport, error) {
	var r LoadReport
	dec := json.NewDecoder(rd)
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("bench: load report: %w", err)
	}
	return &r, nil
}

// WriteRepetitionsMarkdown writes one Markdown row per repetition of each
// report: the M2M run beside the relay and NATS runs made right after it,
// with the CPU wait of each, so that repetitions the machine's scheduler
// disturbed can be told from the others.
func WriteRepetitionsMarkdown(w io.Writer, reps []*LoadReport) error {
	var t table
	t.add("transport", "security", "payload", "load", "#", "M2M rt/s", "relay rt/s", "M2M/relay", "NATS rt/s", "M2M/NATS",
		"p99 M2M / relay / NATS", "CPU wait M2M / relay / NATS")
	dash := func(b *RunSummary, f func(*RunSummary) string) string {
		if b == nil {
			return "-"
		}
		return f(b)
	}
	ratioOf := func(b *RunSummary, v float64) string {
		if b == nil {
			return "-"
		}
		return fmt.Sprintf("%.2fx", v)
	}
	rate := func(b *RunSummary) string { return thousands(b.RoundTripsPerSec) }
	p99 := func(b *RunSummary) string { return micros(b.P99US) }
	wait := func(b *RunSummary) string {
		if b.CPUWait == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f", *b.CPUWait)
	}
	for _, r := range reps {
		c := r.Config
		load := fmt.Sprintf("%d in flight", c.Concurrency)
		if c.Mode == "open" {
			load = thousands(c.Rate) + " req/s"
		}
		for i, rp := range r.Repetitions {
			t.add(c.Transport, c.Security, c.PayloadName, load, fmt.Sprint(i+1), rate(&rp.M2M),
				dash(rp.Baseline, rate), ratioOf(rp.Baseline, rp.RoundTripsRatio),
				dash(rp.NATS, rate), ratioOf(rp.NATS, rp.NATSRoundTripsRatio),
				p99(&rp.M2M)+" / "+dash(rp.Baseline, p99)+" / "+dash(rp.NATS, p99),
				wait(&rp.M2M)+" / "+dash(rp.Baseline, wait)+" / "+dash(rp.NATS, wait))
		}
	}
	return t.markdown(w)
}

// ratioOrDash prints a ratio, or "-" for one that could not be taken (0):
// the two runs' CPU figures count different things.
func ratioOrDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v)
}

// placementNote warns when a comparison's two servers ran in different
// places, one in this process and the other in its own: the one in here
// shares the Go scheduler's Ps with the load generator, which on a small
// machine changes the ratio by more than the systems differ. The bare relay
// always runs here.
func placementNote(r *LoadReport) string {
	m2mHere := strings.HasPrefix(r.Target, "in-process")
	var notes []string
	if r.Baseline != nil && !m2mHere {
		notes = append(notes, "The bare relay ran in this process, beside the load generator, and the M2M daemon in its own: M2M/relay is\n"+
			"not like for like. Drop --url to compare them in one process.")
	}
	if r.NATS != nil {
		switch natsHere := strings.HasPrefix(r.NATS.Target, "in-process"); {
		case m2mHere && !natsHere:
			notes = append(notes, "The M2M daemon ran in this process, beside the load generator, and nats-server in its own: not like for like.\n"+
				"Give --url too (a daemon of its own), or drop --nats-url (both in this process).")
		case !m2mHere && natsHere:
			notes = append(notes, "The M2M daemon ran in its own process, and nats-server in this one, beside the load generator: not like for like.\n"+
				"Give --nats-url too (a nats-server of its own), or drop --url (both in this process).")
		}
	}
	return strings.Join(notes, "\n")
}

// natsName names a NATS run by the URL it went to (Result.Target).
func natsName(target string) string {
	if strings.Contains(target, "tls://") {
		return "NATS (TLS)"
	}
	return "NATS"
}
