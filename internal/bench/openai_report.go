package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// OpenAIReport is the outcome of RunOpenAI, written as JSON by WriteJSON
// (docs/benchmarks.md documents each field).
type OpenAIReport struct {
	Config  OpenAIRunInfo `json:"config"`
	Machine Machine       `json:"machine"`
	// Target is the endpoint at OpenAIConfig.URL.
	Target OpenAIResult `json:"target"`
	// Compare is the endpoint at OpenAIConfig.Compare, measured in the
	// same run; Ratios compares Target with it.
	Compare *OpenAIResult `json:"compare,omitempty"`
	Ratios  *OpenAIRatios `json:"ratios,omitempty"`
}

// OpenAIRunInfo records what was run.
type OpenAIRunInfo struct {
	URL        string `json:"url"`
	CompareURL string `json:"compare_url,omitempty"`
	Mode       string `json:"mode"` // closed or open
	// Connections: the closed loop's requests in flight, the open loop's
	// bound on connections per endpoint.
	Connections int     `json:"connections"`
	Rate        float64 `json:"rate,omitempty"`
	MaxInFlight int     `json:"max_in_flight,omitempty"`
	Stream      bool    `json:"stream"`
	Requests    int     `json:"requests"` // distinct request bodies, sent in turn
	// Request names the single request, or says how many there were.
	Request          string  `json:"request"`
	RequestBytesMean float64 `json:"request_bytes_mean"`
	Model            string  `json:"model,omitempty"`
	DurationS        float64 `json:"duration_s"`
	WarmupS          float64 `json:"warmup_s"`
	SliceS           float64 `json:"slice_s,omitempty"`
	TimeoutS         float64 `json:"timeout_s"`
	StartedAt        string  `json:"started_at"`
	CommandLine      string  `json:"command_line,omitempty"`
}

// OpenAIResult is one endpoint's figures over the measured time. Latency
// runs from each request's intended send time (the send time in a closed
// loop) to the end of its answer: the whole body, or data: [DONE].
type OpenAIResult struct {
	URL string `json:"url"`
	// DurationS is the measured time: the sum of the endpoint's slices,
	// each from its first request to the end of its last answer.
	DurationS      float64 `json:"duration_s"`
	Requests       int64   `json:"requests"` // answered in full and checked
	RequestsPerSec float64 `json:"requests_per_sec"`
	// MBPerSec is request and answer body bytes per second, in 10^6 bytes.
	MBPerSec float64 `json:"mb_per_sec"`
	Latency  Latency `json:"latency"`
	// FirstChunk (streamed answers only) runs from the same start to the
	// first data: event.
	FirstChunk *Latency `json:"first_chunk,omitempty"`
	// SendLagP50US and SendLagP99US (open loop only): how late the
	// generator sent against its schedule; up to this much of the latency
	// is the generator's own.
	SendLagP50US float64 `json:"send_lag_p50_us,omitempty"`
	SendLagP99US float64 `json:"send_lag_p99_us,omitempty"`
	// Errors are measured requests without a full, well-formed answer;
	// ErrorsByReason splits them: http_<status> for a non-2xx status, or
	// connection, timeout, canceled, malformed_body, malformed_chunk,
	// stream_truncated, body_too_large.
	Errors               int64            `json:"errors"`
	ErrorsByReason       map[string]int64 `json:"errors_by_reason"`
	WarmupErrors         int64            `json:"warmup_errors"`
	WarmupErrorsByReason map[string]int64 `json:"warmup_errors_by_reason,omitempty"`
}

// OpenAIRatios compare Target with Compare: ratios are Target's figure over
// Compare's, added latencies Target's minus Compare's (what a gateway at
// Target adds over a direct call to Compare).
type OpenAIRatios struct {
	RequestsPerSec float64 `json:"requests_per_sec"`
	P50            float64 `json:"p50"`
	P99            float64 `json:"p99"`
	P999           float64 `json:"p999"`
	AddedP50US     float64 `json:"added_p50_us"`
	AddedP99US     float64 `json:"added_p99_us"`
	// FirstChunk figures, for streamed answers.
	FirstChunkP50        float64 `json:"first_chunk_p50,omitempty"`
	FirstChunkP99        float64 `json:"first_chunk_p99,omitempty"`
	AddedFirstChunkP50US float64 `json:"added_first_chunk_p50_us,omitempty"`
}

func openAIRatiosOf(t, c *OpenAIResult) *OpenAIRatios {
	r := &OpenAIRatios{
		RequestsPerSec: ratio(t.RequestsPerSec, c.RequestsPerSec),
		P50:            ratio(t.Latency.P50US, c.Latency.P50US),
		P99:            ratio(t.Latency.P99US, c.Latency.P99US),
		P999:           ratio(t.Latency.P999US, c.Latency.P999US),
		AddedP50US:     t.Latency.P50US - c.Latency.P50US,
		AddedP99US:     t.Latency.P99US - c.Latency.P99US,
	}
	if t.FirstChunk != nil && c.FirstChunk != nil {
		r.FirstChunkP50 = ratio(t.FirstChunk.P50US, c.FirstChunk.P50US)
		r.FirstChunkP99 = ratio(t.FirstChunk.P99US, c.FirstChunk.P99US)
		r.AddedFirstChunkP50US = t.FirstChunk.P50US - c.FirstChunk.P50US
	}
	return r
}

func openAIRunInfo(cfg *OpenAIConfig, bodies [][]byte) OpenAIRunInfo {
	info := OpenAIRunInfo{
		URL: cfg.URL, CompareURL: cfg.Compare, Mode: "closed", Connections: cfg.Connections,
		Stream: cfg.Stream, Requests: len(bodies), Request: cfg.Requests[0].Name, Model: cfg.Model,
		DurationS: cfg.Duration.Seconds(), WarmupS: cfg.Warmup.Seconds(), TimeoutS: cfg.Timeout.Seconds(),
		StartedAt: time.Now().UTC().Format(time.RFC3339), CommandLine: cfg.CommandLine,
	}
	if cfg.Rate > 0 {
		info.Mode, info.Rate, info.MaxInFlight = "open", cfg.Rate, cfg.MaxInFlight
	}
	if cfg.Compare != "" {
		info.SliceS = cfg.Slice.Seconds()
	}
	if len(bodies) > 1 {
		info.Request = fmt.Sprintf("%d requests", len(bodies))
	}
	var n float64
	for _, b := range bodies {
		n += float64(len(b))
	}
	info.RequestBytesMean = n / float64(len(bodies))
	return info
}

// WriteJSON writes the report as indented JSON.
func (r *OpenAIReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadOpenAIReport reads a report written by WriteJSON.
func ReadOpenAIReport(rd io.Reader) (*OpenAIReport, error) {
	var r OpenAIReport
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("bench: not an OpenAI benchmark report: %w", err)
	}
	return &r, nil
}

// WriteTable writes a readable summary: one column per endpoint, and the
// ratios when there are two.
func (r *OpenAIReport) WriteTable(w io.Writer) error {
	c := r.Config
	load := fmt.Sprintf("closed loop, %d connections", c.Connections)
	if c.Mode == "open" {
		load = fmt.Sprintf("open loop, %s req/s (at most %d in flight, %d connections)", thousands(c.Rate), c.MaxInFlight, c.Connections)
	}
	answers := "answers not streamed"
	if c.Stream {
		answers = "answers streamed"
	}
	fmt.Fprintf(w, "%s; %s; request %s (%.0f B); %s measured per endpoint after %s warm-up",
		load, answers, c.Request, c.RequestBytesMean, secs(c.DurationS), secs(c.WarmupS))
	if c.SliceS > 0 {
		fmt.Fprintf(w, ", in alternating slices of %s", secs(c.SliceS))
	}
	fmt.Fprintf(w, "\nmachine: %d CPUs, load %.2f at start, %.2f at end%s\n\n", r.Machine.CPUs, r.Machine.LoadAvg1, r.Machine.LoadAvgEnd, r.Machine.stolen())

	res := []*OpenAIResult{&r.Target}
	head := []string{"", "target"}
	if r.Compare != nil {
		res = append(res, r.Compare)
		head = append(head, "compare", "target/compare")
	}
	var t table
	t.add(head...)
	row := func(name string, f func(*OpenAIResult) string, ratio string) {
		cells := []string{name}
		for _, x := range res {
			cells = append(cells, f(x))
		}
		if r.Ratios != nil {
			cells = append(cells, ratio)
		}
		t.add(cells...)
	}
	rt := func(v float64) string { return ratioOrDash(v) }
	var q OpenAIRatios // zeros print as "-"
	if r.Ratios != nil {
		q = *r.Ratios
	}
	row("requests/s", func(x *OpenAIResult) string { return thousands(x.RequestsPerSec) }, rt(q.RequestsPerSec))
	row("MB/s", func(x *OpenAIResult) string { return fmt.Sprintf("%.1f", x.MBPerSec) }, "")
	lat := func(name string, of func(*OpenAIResult) *Latency, ratios map[string]float64) {
		for _, p := range []struct {
			name string
			v    func(*Latency) float64
		}{
			{"p50", func(l *Latency) float64 { return l.P50US }},
			{"p90", func(l *Latency) float64 { return l.P90US }},
			{"p99", func(l *Latency) float64 { return l.P99US }},
			{"p99.9", func(l *Latency) float64 { return l.P999US }},
			{"max", func(l *Latency) float64 { return l.MaxUS }},
		} {
			ratio := ""
			if v, ok := ratios[p.name]; ok {
				ratio = rt(v)
			}
			row(name+" "+p.name, func(x *OpenAIResult) string {
				if l := of(x); l != nil && l.Count > 0 {
					return micros(p.v(l))
				}
				return "-"
			}, ratio)
		}
	}
	last := "latency"
	if c.Stream {
		lat("first chunk", func(x *OpenAIResult) *Latency { return x.FirstChunk },
			map[string]float64{"p50": q.FirstChunkP50, "p99": q.FirstChunkP99})
		last = "last chunk"
	}
	lat(last, func(x *OpenAIResult) *Latency { return &x.Latency },
		map[string]float64{"p50": q.P50, "p99": q.P99, "p99.9": q.P999})
	if c.Mode == "open" {
		row("send lag p99", func(x *OpenAIResult) string { return micros(x.SendLagP99US) }, "")
	}
	row("errors", func(x *OpenAIResult) string { return errorsCell(x.Errors, x.ErrorsByReason) }, "")
	row("warm-up errors", func(x *OpenAIResult) string { return errorsCell(x.WarmupErrors, x.WarmupErrorsByReason) }, "")
	if err := t.text(w); err != nil {
		return err
	}
	if r.Ratios != nil {
		fmt.Fprintf(w, "\ntarget adds %s at p50 and %s at p99 over compare", micros(q.AddedP50US), micros(q.AddedP99US))
		if c.Stream {
			fmt.Fprintf(w, ", %s to the first chunk at p50", micros(q.AddedFirstChunkP50US))
		}
		fmt.Fprintln(w)
	}
	return nil
}

func secs(s float64) string { return time.Duration(s * float64(time.Second)).String() }

// errorsCell is a count and its reasons: "3 (http_500 2, timeout 1)".
func errorsCell(n int64, byReason map[string]int64) string {
	if n == 0 {
		return "0"
	}
	var parts []string
	for _, k := range sortedKeys(byReason) {
		parts = append(parts, fmt.Sprintf("%s %d", k, byReason[k]))
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
}

// Check returns an error wrapping ErrMostlyFailed when, for either
// endpoint, failed requests are at least as many as answered ones, or none
// was answered: the figures then describe the failure. It names the most
// frequent reason and its likely cause.
func (r *OpenAIReport) Check() error {
	for _, res := range []*OpenAIResult{&r.Target, r.Compare} {
		if res == nil {
			continue
		}
		if res.Requests > 0 && res.Errors < res.Requests {
			continue
		}
		why, errs := res.ErrorsByReason, res.Errors
		if errs == 0 {
			why, errs = res.WarmupErrorsByReason, res.WarmupErrors
		}
		if reason, n := mostFrequent(why); n > 0 {
			return fmt.Errorf("%w: %s: %d of %d requests failed, most (%d) with %s: %s",
				ErrMostlyFailed, res.URL, errs, errs+res.Requests, n, reason, openAICauseOf(reason))
		}
		return fmt.Errorf("%w: %s: no request was answered in the measured time", ErrMostlyFailed, res.URL)
	}
	return nil
}

func openAICauseOf(reason string) string {
	if cause := openAICause[reason]; cause != "" {
		return cause
	}
	if strings.HasPrefix(reason, "http_5") {
		return "the endpoint failed them: see its log"
	}
	return "see the errors row of the table"
}
