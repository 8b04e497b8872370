package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/m2md/m2md/openai/ingress"
)

// Defaults of OpenAIConfig.
const (
	// DefaultOpenAIURL is where `m2md serve` answers OpenAI requests.
	DefaultOpenAIURL = "http://" + ingress.DefaultAddr + "/v1"
	// DefaultOpenAIConnections is the closed loop's requests in flight: the
	// 32 connections gateway benchmarks commonly use.
	DefaultOpenAIConnections = 32
	// DefaultOpenAITimeout is long enough for a real model's answer, which
	// can take tens of seconds; a mock answers in microseconds either way.
	DefaultOpenAITimeout = 60 * time.Second
	// DefaultSlice is how long each endpoint of a comparison is loaded
	// before the other takes its turn.
	DefaultSlice = time.Second
	// DefaultMaxResponseBytes bounds a response body, streamed or not.
	DefaultMaxResponseBytes = 16 << 20
)

// OpenAIConfig describes a load benchmark of an OpenAI-compatible chat
// completions endpoint. The zero value is a working default: `m2md serve`'s
// endpoint on this machine, the built-in 1 KB chat request, a closed loop of
// 32 connections, answers not streamed, 10 s measured after 2 s of warm-up.
type OpenAIConfig struct {
	// URL is the endpoint's base URL as the SDKs take it
	// (http://host:port/v1); requests go to URL/chat/completions. A URL
	// that already ends in /chat/completions is used as it is. Default
	// DefaultOpenAIURL.
	URL string
	// Compare is a second base URL measured in the same run: the two take
	// turns, Slice at a time, so that both see the same machine conditions
	// and never load it together. Empty: none.
	Compare string
	// APIKey, when set, is sent as a bearer token to URL, and to Compare
	// unless CompareAPIKey is set.
	APIKey        string
	CompareAPIKey string

	// Requests are chat completion requests (JSON objects with
	// "messages"), sent in turn; default the built-in 1 KB request.
	Requests []Payload
	// Model, when set, replaces each request's top-level "model".
	Model string
	// Stream asks for streamed answers ("stream": true in every request;
	// without it "stream" is set to false where a request has it). The
	// report then has the time to the first chunk beside the time to the
	// last.
	Stream bool
	// Traced sends every request with a W3C traceparent of its own,
	// sampled: what tracing every request costs an endpoint that records
	// traces (m2md serve with OTEL_* set, docs/operations.md "Traces").
	Traced bool

	// Connections is the closed loop's requests in flight, each on a
	// connection of its own; in the open loop it bounds the connections
	// open to an endpoint. Default 32.
	Connections int
	// Rate, when positive, runs an open loop: this many requests per
	// second on a fixed schedule, latency measured from each request's
	// intended send time (coordinated omission, package doc). MaxInFlight
	// bounds the requests waiting for answers (default 4096); beyond it
	// sending waits, and the wait counts in the latency.
	Rate        float64
	MaxInFlight int

	Duration time.Duration // measured time per endpoint; default 10 s
	Warmup   time.Duration // sent but not measured, per endpoint; 0: 2 s, negative: none
	// Slice is each endpoint's turn with Compare; default 1 s. Without
	// Compare the measurement is one slice.
	Slice time.Duration
	// Timeout gives up on a request without its full answer; default 60 s.
	Timeout time.Duration
	// MaxResponseBytes bounds each answer's body; default 16 MiB.
	MaxResponseBytes int64

	// CommandLine is recorded in the report.
	CommandLine string
}

func (c *OpenAIConfig) withDefaults() (OpenAIConfig, error) {
	cfg := *c
	if cfg.URL == "" {
		cfg.URL = DefaultOpenAIURL
	}
	if cfg.CompareAPIKey == "" {
		cfg.CompareAPIKey = cfg.APIKey
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.Duration, DefaultDuration)
	def(&cfg.Warmup, DefaultWarmup)
	cfg.Warmup = max(cfg.Warmup, 0) // negative: none
	def(&cfg.Slice, DefaultSlice)
	def(&cfg.Timeout, DefaultOpenAITimeout)
	if cfg.Connections == 0 {
		cfg.Connections = DefaultOpenAIConnections
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	bad := func(field, format string, args ...any) (OpenAIConfig, error) {
		return cfg, &OpenAIConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case cfg.Duration < 0 || cfg.Duration > MaxDuration:
		return bad("Duration", "must be between 0 and %s", MaxDuration)
	case cfg.Warmup > MaxDuration:
		return bad("Warmup", "must be at most %s", MaxDuration)
	case cfg.Slice < 10*time.Millisecond || cfg.Slice > MaxDuration:
		return bad("Slice", "must be between 10ms and %s", MaxDuration)
	case cfg.Connections < 1 || cfg.Connections > 10_000:
		return bad("Connections", "must be 1 to 10000")
	case cfg.MaxInFlight < 1 || cfg.MaxInFlight > 1_000_000:
		return bad("MaxInFlight", "must be 1 to 1000000")
	case cfg.Rate < 0 || cfg.Rate > 10_000_000:
		return bad("Rate", "must be 0 (closed loop) to 10000000 per second")
	case cfg.Timeout <= 0 || cfg.Timeout > 10*time.Minute:
		return bad("Timeout", "must be above 0 and at most 10m")
	case cfg.MaxResponseBytes < 1:
		return bad("MaxResponseBytes", "must be positive")
	}
	for _, u := range []struct {
		field string
		url   *string
	}{{"URL", &cfg.URL}, {"Compare", &cfg.Compare}} {
		if *u.url == "" {
			continue
		}
		full, err := chatCompletionsURL(*u.url)
		if err != nil {
			return bad(u.field, "%v", err)
		}
		*u.url = full
	}
	if len(cfg.Requests) == 0 {
		p, err := BuiltinPayload(Size1KB)
		if err != nil {
			return cfg, err
		}
		cfg.Requests = []Payload{p}
	}
	for _, p := range cfg.Requests {
		if !isChatRequest(p.JSON) {
			return cfg, fmt.Errorf("%w: %s is not a chat completion request (a JSON object with \"messages\")", ErrPayload, p.Name)
		}
	}
	return cfg, nil
}

// OpenAIConfigError reports an OpenAIConfig field out of its range.
type OpenAIConfigError struct {
	Field  string // the OpenAIConfig field
	Reason string
}

func (e *OpenAIConfigError) Error() string {
	return "bench: OpenAIConfig." + e.Field + " " + e.Reason
}

// chatCompletionsURL is base's chat completions URL.
func chatCompletionsURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http:// or https:// base URL such as %s", base, DefaultOpenAIURL)
	}
	if strings.HasSuffix(u.Path, "/chat/completions") {
		return u.String(), nil
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/chat/completions"
	return u.String(), nil
}

// isChatRequest reports whether doc is a chat completion request: a JSON
// object with a "messages" array.
func isChatRequest(doc []byte) bool {
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	return json.Unmarshal(doc, &req) == nil && req.Messages != nil
}

// ChatRequests keeps the chat completion requests of payloads (a corpus
// also holds responses, stream chunks and embeddings requests).
func ChatRequests(payloads []Payload) []Payload {
	var out []Payload
	for _, p := range payloads {
		if isChatRequest(p.JSON) {
			out = append(out, p)
		}
	}
	return out
}

// openAIBodies are the request bodies as sent: model replaced, stream set.
func openAIBodies(cfg *OpenAIConfig) [][]byte {
	bodies := make([][]byte, len(cfg.Requests))
	for i, p := range cfg.Requests {
		b := p.JSON
		if cfg.Model != "" {
			if r, ok := replaceModel(b, cfg.Model); ok {
				b = r
			}
		}
		bodies[i] = setStream(b, cfg.Stream)
	}
	return bodies
}

// setStream returns the chat request doc with "stream" set to on; a request
// without "stream" is already not streamed and stays as it is.
func setStream(doc []byte, on bool) []byte {
	val := []byte("false")
	if on {
		val = []byte("true")
	}
	if start, end, ok := topLevelScalar(doc, "stream"); ok {
		return spliceValue(doc, start, end, val)
	}
	if !on {
		return doc
	}
	open := strings.IndexByte(string(doc), '{')
	return spliceValue(doc, open+1, open+1, []byte(`"stream":true,`))
}

// RunOpenAI runs the benchmark cfg describes. It returns an error only
// when the run could not be set up; failed requests are counted in the
// report (OpenAIReport.Check).
func RunOpenAI(ctx context.Context, cfg OpenAIConfig) (*OpenAIReport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	bodies := openAIBodies(&cfg)
	clk := newClock()
	targets := []*openAITarget{newOpenAITarget(&cfg, cfg.URL, cfg.APIKey, clk)}
	if cfg.Compare != "" {
		targets = append(targets, newOpenAITarget(&cfg, cfg.Compare, cfg.CompareAPIKey, clk))
	}
	defer func() {
		for _, t := range targets {
			t.client.CloseIdleConnections()
		}
	}()
	rep := &OpenAIReport{Config: openAIRunInfo(&cfg, bodies), Machine: machine()}
	cpu0, cpuOK := machineCPU()

	// Every slice ends, and every request in it within Timeout: this only
	// bounds what nothing else would, such as a stuck pacer.
	slices := 1
	if cfg.Compare != "" {
		slices = int((cfg.Duration + cfg.Slice - 1) / cfg.Slice)
	}
	hard := time.Duration(len(targets))*(cfg.Warmup+cfg.Duration+time.Duration(slices+1)*(cfg.Timeout+time.Second)) + time.Minute
	ctx, cancel := context.WithTimeout(ctx, hard)
	defer cancel()

	// Until the warm-up ends, every request is before a window that has
	// not begun, so its failures count as the warm-up's. Then the window
	// opens with no end: requests are only sent in slices.
	const never = 1 << 62
	for _, t := range targets {
		t.rec.setWindow(never, never+1, time.Hour)
	}
	var next int
	for _, t := range targets {
		t.load(ctx, &cfg, bodies, &next, cfg.Warmup)
	}
	winStart := clk.now()
	for _, t := range targets {
		t.rec.setWindow(winStart, never, time.Hour)
	}
	for left := cfg.Duration; left > 0 && ctx.Err() == nil; {
		d := left // one endpoint: all of it in one slice
		if cfg.Compare != "" {
			d = min(left, cfg.Slice)
		}
		for _, t := range targets {
			t.measured += t.load(ctx, &cfg, bodies, &next, d)
		}
		left -= d
	}
	rep.Target = targets[0].result()
	if len(targets) > 1 {
		c := targets[1].result()
		rep.Compare = &c
		rep.Ratios = openAIRatiosOf(&rep.Target, &c)
	}
	rep.Machine.finish(cpu0, cpuOK)
	return rep, nil
}

// openAITarget is one endpoint under load.
type openAITarget struct {
	url, key string
	client   *http.Client
	clk      clock
	rec      *recorder
	stream   bool
	traced   bool
	maxBody  int64
	timeout  time.Duration
	// first holds the time to the first chunk of streamed answers.
	first    *latencyRecorder
	measured time.Duration
}

func newOpenAITarget(cfg *OpenAIConfig, u, key string, clk clock) *openAITarget {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = cfg.Connections
	tr.MaxIdleConns = cfg.Connections
	tr.MaxIdleConnsPerHost = cfg.Connections
	// The generator stays out of the measurement's way: no transparent
	// compression to undo, no HTTP/2 where the clients measured use 1.1.
	tr.DisableCompression = true
	tr.ForceAttemptHTTP2 = false
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	rec := newRecorder(clk)
	rec.open = cfg.Rate > 0
	return &openAITarget{
		url: u, key: key, clk: clk, rec: rec, stream: cfg.Stream, traced: cfg.Traced,
		maxBody: cfg.MaxResponseBytes, timeout: cfg.Timeout,
		client: &http.Client{Transport: tr},
		first:  newLatencyRecorder(),
	}
}

// load sends requests to t for d (closed or open loop, as cfg says) and
// waits for the last of them; it returns the time from the first request
// to the end of the last, over which the slice's requests were served.
func (t *openAITarget) load(ctx context.Context, cfg *OpenAIConfig, bodies [][]byte, next *int, d time.Duration) time.Duration {
	if d <= 0 || ctx.Err() != nil {
		return 0
	}
	var mu sync.Mutex
	body := func() []byte {
		mu.Lock()
		defer mu.Unlock()
		b := bodies[*next%len(bodies)]
		*next++
		return b
	}
	start := t.clk.now()
	stop := start + int64(d)
	if cfg.Rate > 0 {
		sem := make(chan struct{}, cfg.MaxInFlight)
		var wg sync.WaitGroup
		runPaced(cfg.Rate, func(precise bool) {
			p := newPacer(precise)
			defer p.stop()
			openLoop(ctx, t.clk, p, start, stop, cfg.Rate, slotOf(sem), func(intended int64) {
				b := body()
				wg.Go(func() {
					defer func() { <-sem }()
					t.do(ctx, intended, b)
				})
			})
		})
		wg.Wait()
	} else {
		closedLoop(ctx, t.clk, cfg.Connections, stop, func(ctx context.Context, _ int, intended int64) bool {
			if reason := t.do(ctx, intended, body()); reason == reasonConnection {
				// A refused or dropped connection fails at once: pause
				// rather than count thousands of failures for one cause.
				select {
				case <-time.After(10 * time.Millisecond):
				case <-ctx.Done():
				}
			}
			return true
		})
	}
	return time.Duration(t.clk.now() - start)
}

func (t *openAITarget) result() OpenAIResult {
	res := t.rec.result()
	t.rec.mu.Lock()
	bytes := t.rec.bytesOut + t.rec.bytesIn
	t.rec.mu.Unlock()
	out := OpenAIResult{
		URL:                  t.url,
		DurationS:            t.measured.Seconds(),
		Requests:             res.RoundTrips,
		Latency:              res.Latency,
		SendLagP50US:         res.SendLagP50US,
		SendLagP99US:         res.SendLagP99US,
		Errors:               res.Errors,
		ErrorsByReason:       res.ErrorsByReason,
		WarmupErrors:         res.WarmupErrors,
		WarmupErrorsByReason: res.WarmupErrorsByReason,
	}
	if t.stream {
		l := t.first.summary()
		out.FirstChunk = &l
	}
	if s := t.measured.Seconds(); s > 0 {
		out.RequestsPerSec = float64(out.Requests) / s
		out.MBPerSec = float64(bytes) / s / 1e6
	}
	return out
}

// maxRequestsFile bounds a requests file, checked before it is read.
const maxRequestsFile = 256 << 20

// LoadRequests reads chat completion requests from a file: one JSON
// document, or JSON Lines (one request a line; blank lines are skipped).
func LoadRequests(path string) ([]Payload, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPayload, err)
	}
	if fi.Size() > maxRequestsFile {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than the %d a requests file may have", ErrPayload, path, fi.Size(), maxRequestsFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPayload, err)
	}
	name := filepath.Base(path)
	if json.Valid(b) {
		return []Payload{{Name: name, JSON: bytes.TrimSpace(b)}}, nil
	}
	var out []Payload
	for i, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			return nil, fmt.Errorf("%w: %s line %d is not JSON (want one JSON document, or one request a line)", ErrPayload, path, i+1)
		}
		out = append(out, Payload{Name: fmt.Sprintf("%s:%d", name, i+1), JSON: line})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no request", ErrPayload, path)
	}
	return out, nil
}
