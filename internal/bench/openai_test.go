package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/internal/leakcheck"
	"github.com/m2md/m2md/internal/testkit"
)

// chatServer is an OpenAI-compatible server on loopback that answers chat
// completions from the corpus, streamed when asked, and records what it
// received.
type chatServer struct {
	*httptest.Server
	// firstDelay holds back the first stream chunk, lastDelay the end of the
	// stream after the chunks.
	firstDelay, lastDelay time.Duration
	// answer, when set, replaces the whole answer.
	answer func(w http.ResponseWriter, stream bool)

	mu       sync.Mutex
	arrivals []time.Time
	bodies   [][]byte
	auth     []string
	parents  []string // each request's traceparent
}

func newChatServer(t *testing.T, configure func(*chatServer)) *chatServer {
	resp := testkit.CorpusFile(t, "resp-chat-01.json")
	chunks := [][]byte{testkit.CorpusFile(t, "stream-chunk-01.json"), testkit.CorpusFile(t, "stream-chunk-02.json"), testkit.CorpusFile(t, "stream-chunk-03.json")}
	s := &chatServer{}
	if configure != nil {
		configure(s)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.arrivals = append(s.arrivals, time.Now())
		s.bodies = append(s.bodies, body)
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.parents = append(s.parents, r.Header.Get("Traceparent"))
		s.mu.Unlock()
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		stream := bytes.Contains(body, []byte(`"stream":true`))
		if s.answer != nil {
			s.answer(w, stream)
			return
		}
		if !stream {
			w.Header().Set("Content-Type", "application/json")
			w.Write(resp)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		time.Sleep(s.firstDelay)
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
			http.NewResponseController(w).Flush()
		}
		time.Sleep(s.lastDelay)
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *chatServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

func (s *chatServer) base() string { return s.URL + "/v1" }

// quickOpenAI is a short run against url.
func quickOpenAI(url string) OpenAIConfig {
	return OpenAIConfig{URL: url, Connections: 4, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Timeout: 5 * time.Second}
}

func runOpenAI(t *testing.T, cfg OpenAIConfig) *OpenAIReport {
	t.Helper()
	rep, err := RunOpenAI(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestOpenAIClosedLoop(t *testing.T) {
	leakcheck.Check(t, "github.com/m2md/m2md/internal/bench")
	srv := newChatServer(t, nil)
	cfg := quickOpenAI(srv.base())
	cfg.APIKey = "sk-bench-test"
	rep := runOpenAI(t, cfg)
	r := rep.Target
	if r.Requests == 0 || r.Errors != 0 || r.WarmupErrors != 0 {
		t.Fatalf("requests %d, errors %d %v, warm-up errors %d %v", r.Requests, r.Errors, r.ErrorsByReason, r.WarmupErrors, r.WarmupErrorsByReason)
	}
	if got := srv.count(); int64(got) <= r.Requests {
		t.Errorf("server received %d requests, the report counts %d measured after a warm-up", got, r.Requests)
	}
	if r.Latency.Count != r.Requests || r.Latency.P50US <= 0 || r.RequestsPerSec <= 0 || r.FirstChunk != nil {
		t.Errorf("figures: %+v", r)
	}
	if rep.Compare != nil || rep.Ratios != nil || rep.Config.Mode != "closed" || rep.Config.Connections != 4 {
		t.Errorf("report: %+v", rep)
	}
	want, _ := BuiltinPayload(Size1KB)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if !bytes.Equal(srv.bodies[0], want.JSON) || srv.auth[0] != "Bearer sk-bench-test" {
		t.Errorf("sent %q with %q, want the built-in request as it is", srv.bodies[0], srv.auth[0])
	}
}

// TestOpenAIOpenLoop: at a fixed rate the measured window holds exactly
// rate × duration requests, whatever the server does, and whether the
// duration is shorter or longer than a slice (which only a comparison
// takes turns by).
func TestOpenAIOpenLoop(t *testing.T) {
	leakcheck.Check(t, "github.com/m2md/m2md/internal/bench")
	for _, slice := range []time.Duration{0, 200 * time.Millisecond} {
		srv := newChatServer(t, nil)
		cfg := quickOpenAI(srv.base())
		cfg.Rate, cfg.Duration, cfg.Slice = 200, 500*time.Millisecond, slice
		rep := runOpenAI(t, cfg)
		r := rep.Target
		if r.Requests+r.Errors != 100 || r.Errors != 0 {
			t.Fatalf("slice %v: %d requests and %d errors (%v) measured, want 100 requests", slice, r.Requests, r.Errors, r.ErrorsByReason)
		}
		if got := srv.count(); got != 100+10 {
			t.Errorf("slice %v: server received %d requests, want 110 (10 in the warm-up)", slice, got)
		}
		if rep.Config.Mode != "open" || rep.Config.Rate != 200 || r.Latency.Count != 100 || r.DurationS > 0.6 {
			t.Errorf("slice %v: report: %+v", slice, rep)
		}
	}
}

// TestOpenAIStream: the time to the first chunk is measured to the first
// chunk, held back by the server, and the time to the last to [DONE].
func TestOpenAIStream(t *testing.T) {
	leakcheck.Check(t, "github.com/m2md/m2md/internal/bench")
	const first, last = 30 * time.Millisecond, 40 * time.Millisecond
	srv := newChatServer(t, func(s *chatServer) { s.firstDelay, s.lastDelay = first, last })
	cfg := quickOpenAI(srv.base())
	cfg.Stream = true
	rep := runOpenAI(t, cfg)
	r := rep.Target
	if r.Requests == 0 || r.Errors != 0 || r.FirstChunk == nil {
		t.Fatalf("requests %d, errors %d %v, first chunk %v", r.Requests, r.Errors, r.ErrorsByReason, r.FirstChunk)
	}
	// HDR histograms round to 0.1%.
	if min := float64(first.Microseconds()) * 0.999; r.FirstChunk.P50US < min || r.FirstChunk.MaxUS < min {
		t.Errorf("first chunk p50 %.0f µs, want at least the server's %s", r.FirstChunk.P50US, first)
	}
	if min := float64((first + last).Microseconds()) * 0.999; r.Latency.P50US < min {
		t.Errorf("last chunk p50 %.0f µs, want at least %s", r.Latency.P50US, first+last)
	}
	// Every answer ends at least `last` after its first chunk, so each
	// percentile of the one is at least that above the other's (to the
	// histograms' 0.1%).
	if gap := r.Latency.P50US - r.FirstChunk.P50US; gap < float64(last.Microseconds())-0.002*r.Latency.P50US {
		t.Errorf("first chunk p50 %.0f µs, last %.0f µs: want the first measured at the first chunk, %s before the last", r.FirstChunk.P50US, r.Latency.P50US, last)
	}
	if r.FirstChunk.Count != r.Requests {
		t.Errorf("%d first chunks for %d requests", r.FirstChunk.Count, r.Requests)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if !bytes.Contains(srv.bodies[0], []byte(`"stream":true`)) {
		t.Errorf("sent %s, want stream true", srv.bodies[0])
	}
}

// TestOpenAICompare: both endpoints are loaded, in turns that never
// overlap, and the report has both and their ratios.
func TestOpenAICompare(t *testing.T) {
	leakcheck.Check(t, "github.com/m2md/m2md/internal/bench")
	a := newChatServer(t, nil)
	b := newChatServer(t, func(s *chatServer) { s.firstDelay = 2 * time.Millisecond })
	cfg := quickOpenAI(a.base())
	cfg.Compare, cfg.Slice, cfg.Duration, cfg.Stream = b.base(), 100*time.Millisecond, 400*time.Millisecond, true
	rep := runOpenAI(t, cfg)
	if a.count() == 0 || b.count() == 0 || rep.Compare == nil || rep.Ratios == nil {
		t.Fatalf("target got %d, compare %d; report %+v", a.count(), b.count(), rep)
	}
	for _, r := range []*OpenAIResult{&rep.Target, rep.Compare} {
		if r.Requests == 0 || r.Errors != 0 {
			t.Errorf("%s: %d requests, %d errors %v", r.URL, r.Requests, r.Errors, r.ErrorsByReason)
		}
	}
	if rep.Target.URL != a.URL+"/v1/chat/completions" || rep.Compare.URL != b.URL+"/v1/chat/completions" {
		t.Errorf("urls %s, %s", rep.Target.URL, rep.Compare.URL)
	}
	if q := rep.Ratios; q.RequestsPerSec <= 0 || q.P50 <= 0 || q.FirstChunkP50 <= 0 {
		t.Errorf("ratios %+v", q)
	}
	ta, tb := rep.Target, rep.Compare
	if q := rep.Ratios; q.AddedP50US != ta.Latency.P50US-tb.Latency.P50US || q.AddedP99US != ta.Latency.P99US-tb.Latency.P99US ||
		q.AddedFirstChunkP50US != ta.FirstChunk.P50US-tb.FirstChunk.P50US || q.P99 != ta.Latency.P99US/tb.Latency.P99US {
		t.Errorf("ratios %+v of %+v and %+v", q, ta, tb)
	}
	// Warm-up A, warm-up B, then four slices each: A B A B A B A B.
	type arrival struct {
		at time.Time
		a  bool
	}
	var all []arrival
	for _, s := range []*chatServer{a, b} {
		s.mu.Lock()
		for _, at := range s.arrivals {
			all = append(all, arrival{at, s == a})
		}
		s.mu.Unlock()
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	turns := 1
	for i := 1; i < len(all); i++ {
		if all[i].a != all[i-1].a {
			turns++
		}
	}
	if turns != 10 || !all[0].a {
		t.Errorf("the endpoints took %d turns (first target: %v), want 10 starting with the target", turns, all[0].a)
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"target/compare", "first chunk p50", "last chunk p99", "target adds"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestOpenAIErrors: an answer that is not a full, well-formed chat
// completion is an error, counted by its kind.
func TestOpenAIErrors(t *testing.T) {
	leakcheck.Check(t, "github.com/m2md/m2md/internal/bench")
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		name   string
		stream bool
		answer func(w http.ResponseWriter, stream bool)
		url    string
		reason string
	}{
		{name: "status", answer: func(w http.ResponseWriter, _ bool) {
			http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
		}, reason: "http_500"},
		{name: "rate limited", answer: func(w http.ResponseWriter, _ bool) {
			w.WriteHeader(http.StatusTooManyRequests)
		}, reason: "http_429"},
		{name: "malformed", answer: func(w http.ResponseWriter, _ bool) { io.WriteString(w, `{"choices":`) }, reason: reasonMalformed},
		{name: "no choices", answer: func(w http.ResponseWriter, _ bool) { io.WriteString(w, `{"object":"chat.completion"}`) }, reason: reasonMalformed},
		{name: "html", answer: func(w http.ResponseWriter, _ bool) { io.WriteString(w, `<html>hello</html>`) }, reason: reasonMalformed},
		{name: "stream truncated", stream: true, answer: func(w http.ResponseWriter, _ bool) {
			io.WriteString(w, "data: {\"choices\":[]}\n\n")
		}, reason: reasonStreamTruncated},
		{name: "stream not streamed", stream: true, answer: func(w http.ResponseWriter, _ bool) {
			io.WriteString(w, `{"choices":[{}]}`)
		}, reason: reasonStreamTruncated},
		{name: "stream bad chunk", stream: true, answer: func(w http.ResponseWriter, _ bool) {
			io.WriteString(w, "data: {\"choices\":[\n\ndata: [DONE]\n\n")
		}, reason: reasonMalformedChunk},
		{name: "connection refused", url: closed.URL + "/v1", reason: reasonConnection},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url
			if url == "" {
				url = newChatServer(t, func(s *chatServer) { s.answer = tc.answer }).base()
			}
			cfg := quickOpenAI(url)
			cfg.Stream, cfg.Duration, cfg.Warmup = tc.stream, 100*time.Millisecond, 20*time.Millisecond
			rep := runOpenAI(t, cfg)
			r := rep.Target
			if r.Requests != 0 || r.Errors == 0 || r.ErrorsByReason[tc.reason] != r.Errors {
				t.Fatalf("requests %d, errors %d %v; want every one %s", r.Requests, r.Errors, r.ErrorsByReason, tc.reason)
			}
			if r.WarmupErrors == 0 || r.WarmupErrorsByReason[tc.reason] != r.WarmupErrors {
				t.Errorf("warm-up errors %d %v; want every one %s", r.WarmupErrors, r.WarmupErrorsByReason, tc.reason)
			}
			err := rep.Check()
			if !errors.Is(err, ErrMostlyFailed) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("Check = %v", err)
			}
		})
	}
}

// TestOpenAIJSON: the report decodes into the structure docs/benchmarks.md
// documents, and back into the same report.
func TestOpenAIJSON(t *testing.T) {
	leakcheck.Check(t, "github.com/m2md/m2md/internal/bench")
	a, b := newChatServer(t, nil), newChatServer(t, nil)
	cfg := quickOpenAI(a.base())
	cfg.Compare, cfg.Slice, cfg.Stream, cfg.Rate = b.base(), 100*time.Millisecond, true, 100
	rep := runOpenAI(t, cfg)
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Config struct {
			URL         string  `json:"url"`
			CompareURL  string  `json:"compare_url"`
			Mode        string  `json:"mode"`
			Rate        float64 `json:"rate"`
			Stream      bool    `json:"stream"`
			Connections int     `json:"connections"`
			SliceS      float64 `json:"slice_s"`
		} `json:"config"`
		Machine struct {
			CPUs     int      `json:"cpus"`
			StealPct *float64 `json:"steal_pct"`
		} `json:"machine"`
		Target, Compare struct {
			URL            string  `json:"url"`
			Requests       int64   `json:"requests"`
			RequestsPerSec float64 `json:"requests_per_sec"`
			Latency        struct {
				P50US float64 `json:"p50_us"`
				P99US float64 `json:"p99_us"`
			} `json:"latency"`
			FirstChunk struct {
				P50US float64 `json:"p50_us"`
			} `json:"first_chunk"`
			SendLagP99US   float64          `json:"send_lag_p99_us"`
			Errors         int64            `json:"errors"`
			ErrorsByReason map[string]int64 `json:"errors_by_reason"`
		}
		Ratios struct {
			RequestsPerSec float64  `json:"requests_per_sec"`
			P50            float64  `json:"p50"`
			AddedP50US     *float64 `json:"added_p50_us"`
			FirstChunkP50  float64  `json:"first_chunk_p50"`
		} `json:"ratios"`
	}
	dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	c := doc.Config
	if c.URL != a.URL+"/v1/chat/completions" || c.CompareURL != b.URL+"/v1/chat/completions" || c.Mode != "open" || c.Rate != 100 || !c.Stream || c.Connections != 4 || c.SliceS != 0.1 || doc.Machine.CPUs == 0 {
		t.Errorf("config %+v", c)
	}
	for _, r := range []any{doc.Target, doc.Compare} {
		v := reflect.ValueOf(r)
		if v.FieldByName("Requests").Int() == 0 || v.FieldByName("ErrorsByReason").IsNil() {
			t.Errorf("result %+v", r)
		}
	}
	if doc.Target.Latency.P50US <= 0 || doc.Target.FirstChunk.P50US <= 0 || doc.Compare.Latency.P99US <= 0 {
		t.Errorf("latencies %+v %+v", doc.Target, doc.Compare)
	}
	if doc.Ratios.RequestsPerSec <= 0 || doc.Ratios.P50 <= 0 || doc.Ratios.AddedP50US == nil || doc.Ratios.FirstChunkP50 <= 0 {
		t.Errorf("ratios %+v", doc.Ratios)
	}
	// Where /proc/stat tells it, the share of CPU time the host took,
	// in the JSON and in the table.
	if _, ok := machineCPU(); ok {
		var table strings.Builder
		if err := rep.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		if s := doc.Machine.StealPct; s == nil || *s < 0 || *s > 100 || !strings.Contains(table.String(), "of the CPU time stolen by the host") {
			t.Errorf("steal_pct %v; table:\n%s", s, table.String())
		}
	}
	back, err := ReadOpenAIReport(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rep) {
		t.Errorf("read back %+v, want %+v", back, rep)
	}
}

func TestOpenAIConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  OpenAIConfig
		want string // in the error; "" for none
	}{
		{name: "zero", cfg: OpenAIConfig{}},
		{name: "not http", cfg: OpenAIConfig{URL: "quic://127.0.0.1:4433"}, want: "http://"},
		{name: "bad compare", cfg: OpenAIConfig{Compare: "127.0.0.1:8000"}, want: "base URL"},
		{name: "connections", cfg: OpenAIConfig{Connections: -1}, want: "Connections"},
		{name: "rate", cfg: OpenAIConfig{Rate: -5}, want: "Rate"},
		{name: "slice", cfg: OpenAIConfig{Slice: time.Microsecond}, want: "Slice"},
		{name: "timeout", cfg: OpenAIConfig{Timeout: -time.Second}, want: "Timeout"},
		{name: "not chat", cfg: OpenAIConfig{Requests: []Payload{{Name: "e.json", JSON: []byte(`{"model":"m","input":"x"}`)}}}, want: "e.json is not a chat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg.withDefaults()
			if tc.want == "" {
				if err != nil || got.URL != DefaultOpenAIURL+"/chat/completions" || got.Connections != DefaultOpenAIConnections || len(got.Requests) != 1 {
					t.Errorf("withDefaults = %+v, %v", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestOpenAIRequestBodies(t *testing.T) {
	for _, tc := range []struct {
		in     string
		model  string
		stream bool
		want   string
	}{
		{in: `{"model":"a","messages":[]}`, want: `{"model":"a","messages":[]}`},
		{in: `{"model":"a","messages":[]}`, stream: true, want: `{"stream":true,"model":"a","messages":[]}`},
		{in: `{"model":"a","stream":true,"messages":[{"stream":true}]}`, want: `{"model":"a","stream":false,"messages":[{"stream":true}]}`},
		{in: `{"model":"a", "stream" : false,"messages":[]}`, stream: true, model: "b", want: `{"model":"b", "stream" : true,"messages":[]}`},
		{in: ` {"messages":[{"stream":false}]}`, stream: true, want: ` {"stream":true,"messages":[{"stream":false}]}`},
	} {
		cfg := OpenAIConfig{Requests: []Payload{{JSON: []byte(tc.in)}}, Model: tc.model, Stream: tc.stream}
		if got := string(openAIBodies(&cfg)[0]); got != tc.want {
			t.Errorf("%s (stream %v, model %q) = %s, want %s", tc.in, tc.stream, tc.model, got, tc.want)
		}
	}
	corpus, err := LoadCorpus(filepath.Join("..", "..", "testdata", "corpus"))
	if err != nil {
		t.Fatal(err)
	}
	chat := ChatRequests(corpus)
	for _, p := range chat {
		if !strings.Contains(p.Name, "req-") && !strings.Contains(p.Name, "turn-") {
			t.Errorf("%s taken for a chat request", p.Name)
		}
		if strings.Contains(p.Name, "embeddings") {
			t.Errorf("%s taken for a chat request", p.Name)
		}
	}
	if len(chat) < 40 {
		t.Errorf("%d chat requests in the corpus", len(chat))
	}
}

// With Traced every request carries a W3C traceparent of its own, sampled
// and well formed; without it none.
func TestOpenAITraced(t *testing.T) {
	valid := regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`)
	for _, traced := range []bool{false, true} {
		s := newChatServer(t, nil)
		cfg := quickOpenAI(s.base())
		cfg.Traced = traced
		runOpenAI(t, cfg)
		s.mu.Lock()
		parents := slices.Clone(s.parents)
		s.mu.Unlock()
		seen := map[string]bool{}
		for _, p := range parents {
			switch {
			case !traced && p != "":
				t.Fatalf("untraced run sent traceparent %q", p)
			case traced && (!valid.MatchString(p) || strings.Contains(p, strings.Repeat("0", 32)) || seen[p[3:35]]):
				t.Fatalf("traced run sent traceparent %q (a trace of its own, sampled, wanted)", p)
			}
			seen[p[min(3, len(p)):min(35, len(p))]] = true
		}
		if len(parents) == 0 {
			t.Fatal("no requests")
		}
	}
}
