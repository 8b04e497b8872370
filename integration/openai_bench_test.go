package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/openai"
	"github.com/m2md/m2md/openai/ingress"
	"github.com/m2md/m2md/openai/upstream"
)

// fastUpstream answers at once: the 907-byte resp-chat-01.json, or, for a
// stream request, 50 corpus chunks and [DONE]; a model "resp:FILE" gets
// the corpus file FILE.
func fastUpstream(tb testing.TB) *httptest.Server {
	resp := corpus(tb, "resp-chat-01.json")
	var sse bytes.Buffer
	for i := range 50 {
		sse.WriteString("data: " + string(corpus(tb, streamChunks[1+i%10])) + "\n\n")
	}
	sse.WriteString("data: [DONE]\n\n")
	stream := sse.Bytes()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// The headers OpenAI sends with every answer, which cross the
		// mesh in a headers reply (docs/protocol.md §4.7).
		h := w.Header()
		h.Set("X-Request-Id", "req_5f3a1c2e9b8d4f6a7c0e1b2d3f4a5b6c")
		h.Set("Openai-Processing-Ms", "412")
		h.Set("X-Ratelimit-Limit-Requests", "10000")
		h.Set("X-Ratelimit-Remaining-Requests", "9999")
		h.Set("X-Ratelimit-Limit-Tokens", "30000000")
		h.Set("X-Ratelimit-Remaining-Tokens", "29999950")
		h.Set("X-Ratelimit-Reset-Requests", "6ms")
		h.Set("X-Ratelimit-Reset-Tokens", "0s")
		if m := modelOf(body); strings.HasPrefix(m, "resp:") {
			w.Header().Set("Content-Type", "application/json")
			w.Write(corpus(tb, strings.TrimPrefix(m, "resp:")))
			return
		}
		if bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write(stream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(resp)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// benchEdges is the whole path: ingress → daemon → m2md upstream → fast
// upstream, in mode aead, the ingress's session attached in process and
// the upstream agent's over QUIC (the defaults of serve and upstream).
func benchEdges(b *testing.B, models []string) (ingressURL, upstreamURL string, agent *client.Client) {
	ingressURL, upstreamURL, _, agent = benchEdgesBoth(b, models)
	return ingressURL, upstreamURL, agent
}

// benchEdgesBoth is benchEdges with a second ingress beside the first,
// whose session goes over loopback WebSocket instead (how serve attached
// its endpoint before Attach): the cost of that leg, side by side.
func benchEdgesBoth(b *testing.B, models []string) (ingressURL, upstreamURL, ingressWSURL string, agent *client.Client) {
	up := fastUpstream(b)
	d := startDaemon(b, nil)
	u, err := upstream.New(upstream.Config{BaseURL: up.URL + "/v1", Concurrency: 256})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(u.Close)
	agent = dialClient(b, d.url("quic"), client.Options{AgentID: "bench-upstream", Models: models, Handler: u,
		Security: frame.SecurityAEAD, TLSConfig: d.clientTLS(b), MaxConcurrentHandlers: 1024,
		CompressionQuality: openai.CompressionQuality, CompressFrom: openai.CompressFrom}) // as m2md upstream
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serveIngress := func(suffix string, dial func(ctx context.Context, o client.Options) (*client.Client, error)) string {
		in, err := ingress.New(ctx, ingress.Config{Models: d.Models,
			Dial: func(ctx context.Context, id ingress.Identity) (*client.Client, error) {
				return dial(ctx, client.Options{AgentID: id.AgentID + suffix, Security: frame.SecurityAEAD, TLSConfig: d.clientTLS(b),
					CompressionQuality: openai.CompressionQuality, CompressFrom: openai.CompressFrom}) // as m2md serve's endpoint
			}})
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(in)
		b.Cleanup(func() { srv.Close(); in.Close() })
		return srv.URL
	}
	ingressURL = serveIngress("", func(ctx context.Context, o client.Options) (*client.Client, error) {
		o.Security = frame.SecurityNone // as serve does: attached, the daemon's --min-security
		return client.DialConn(ctx, d.Attach, o)
	})
	ingressWSURL = serveIngress("-ws", func(ctx context.Context, o client.Options) (*client.Client, error) {
		return client.Dial(ctx, d.url("ws"), o)
	})
	return ingressURL, up.URL, ingressWSURL, agent
}

// BenchmarkOpenAIEdgeCost is the cost of the mesh for an HTTP client: the
// same requests through ingress → daemon → m2md upstream → a fast upstream,
// and straight to that upstream, side by side. Each iteration measures the
// maximum rate (closed loop, 32 clients, 2 s), then latency at half of it
// (open loop, 3 s). Run it once per count:
//
//	go test ./integration -run '^$' -bench OpenAIEdgeCost -benchtime 1x -count 5
func BenchmarkOpenAIEdgeCost(b *testing.B) {
	e := newEdgeBench(b)
	for _, kind := range e.kinds {
		for _, path := range []struct{ name, url string }{{"direct", e.upstream}, {"mesh", e.ingress}, {"mesh-ws", e.ingressWS}} {
			b.Run(kind.name+"/"+path.name, func(b *testing.B) {
				do := e.request(path.url, kind)
				for range b.N {
					// CPU per request, the whole process's (client, edges,
					// daemon and upstream share it): on a shared machine
					// the rate depends on what the others run, this less.
					cpu0 := processCPU()
					maxRate, n := closedLoop(b, do, 32, 2*time.Second)
					cpuPerReq := float64(processCPU()-cpu0) / float64(max(n, 1))
					h := openLoop(b, do, maxRate/2, 3*time.Second)
					b.ReportMetric(maxRate, "max-req/s")
					b.ReportMetric(cpuPerReq/1e3, "cpu-µs/req")
					b.ReportMetric(float64(h.ValueAtQuantile(50))/1e3, "p50-µs@half")
					b.ReportMetric(float64(h.ValueAtQuantile(99))/1e3, "p99-µs@half")
				}
			})
		}
	}
}

// BenchmarkOpenAIEdgeRequest is one request per operation, 32 in flight,
// for benchstat and profiles: ns/op, allocations and the process's CPU per
// request (cpu-µs/op):
//
//	go test ./integration -run '^$' -bench OpenAIEdgeRequest -count 5
func BenchmarkOpenAIEdgeRequest(b *testing.B) {
	e := newEdgeBench(b)
	for _, kind := range e.kinds {
		for _, path := range []struct{ name, url string }{{"direct", e.upstream}, {"mesh", e.ingress}, {"mesh-ws", e.ingressWS}} {
			b.Run(kind.name+"/"+path.name, func(b *testing.B) {
				do := e.request(path.url, kind)
				b.ReportAllocs()
				b.SetParallelism(16) // 32 in flight on 2 cores
				cpu0 := processCPU()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := do(); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// edgeGoalRounds is how many interleaved repetitions BenchmarkOpenAIEdgeGoal
// takes the median and range of.
const edgeGoalRounds = 5

// BenchmarkOpenAIEdgeGoal answers the OpenAI edges' goals in one command: for each
// request kind, edgeGoalRounds rounds, each measuring the maximum rate of
// the direct path and of the mesh (closed loop, 32 clients, 1 s each),
// then the latency of both at half the mesh's maximum rate (open loop, 2 s
// or 200 requests each: the same offered load on both paths, so the
// difference is what the mesh adds). Direct and mesh take turns, and which goes first alternates
// by round, so the load of a shared machine falls on both alike. It
// reports, as the median of the rounds with their minimum and maximum,
// the throughput ratio mesh/direct and the added p50 and p99 (mesh minus
// direct), and the CPU per request of each path:
//
//	go test ./integration -run '^$' -bench OpenAIEdgeGoal -benchtime 1x
func BenchmarkOpenAIEdgeGoal(b *testing.B) {
	e := newEdgeBench(b)
	for _, kind := range e.kinds {
		b.Run(kind.name, func(b *testing.B) {
			paths := [2]func() error{e.request(e.upstream, kind), e.request(e.ingress, kind)} // direct, mesh
			for range b.N {
				var ratio, addP50, addP99, rates []float64
				var p50, cpu [2][]float64 // direct, mesh
				for round := range edgeGoalRounds {
					// Which path goes first alternates by round.
					order := [2]int{round % 2, 1 - round%2}
					var maxRate [2]float64
					for _, i := range order {
						cpu0 := processCPU()
						r, n := closedLoop(b, paths[i], 32, time.Second)
						maxRate[i] = r
						cpu[i] = append(cpu[i], float64(processCPU()-cpu0)/float64(max(n, 1))/1e3)
					}
					rate := maxRate[1] / 2
					// 2 s, or long enough for 200 requests (at most 6 s),
					// so that a p99 rests on a few samples even when a
					// loaded machine lets the mesh go slowly.
					d := min(max(2*time.Second, time.Duration(200/rate*float64(time.Second))), 6*time.Second)
					var h [2]*hdrhistogram.Histogram
					for _, i := range order {
						h[i] = openLoop(b, paths[i], rate, d)
					}
					q := func(i int, p float64) float64 { return float64(h[i].ValueAtQuantile(p)) / 1e3 }
					ratio = append(ratio, maxRate[1]/maxRate[0])
					addP50 = append(addP50, q(1, 50)-q(0, 50))
					addP99 = append(addP99, q(1, 99)-q(0, 99))
					p50[0], p50[1] = append(p50[0], q(0, 50)), append(p50[1], q(1, 50))
					rates = append(rates, rate)
				}
				report := func(v []float64, unit string) {
					b.ReportMetric(median(v), unit)
					b.ReportMetric(slices.Min(v), unit+"-min")
					b.ReportMetric(slices.Max(v), unit+"-max")
				}
				report(ratio, "throughput-x")
				report(addP50, "added-p50-µs")
				report(addP99, "added-p99-µs")
				b.ReportMetric(median(p50[0]), "direct-p50-µs")
				b.ReportMetric(median(p50[1]), "mesh-p50-µs")
				b.ReportMetric(median(rates), "half-rate-req/s")
				b.ReportMetric(median(cpu[0]), "direct-cpu-µs/req")
				b.ReportMetric(median(cpu[1]), "mesh-cpu-µs/req")
			}
		})
	}
}

// edgeBench is what the edge benchmarks share: the whole path
// (benchEdges), an HTTP client, and the two requests.
type edgeBench struct {
	ingress, ingressWS, upstream string // base URLs
	hc                           *http.Client
	kinds                        []edgeKind
}

// edgeKind is a request of the benchmarks: req-chat-1k-01.json (1,215
// bytes, gpt-4o), and the same with "stream": true (answered with 50
// chunks).
type edgeKind struct {
	name   string
	body   []byte
	stream bool
}

func newEdgeBench(b *testing.B) *edgeBench {
	ingressURL, upstreamURL, ingressWSURL, _ := benchEdgesBoth(b, []string{"gpt-4o"})
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512}}
	b.Cleanup(hc.CloseIdleConnections)
	req1k := corpus(b, "req-chat-1k-01.json")
	stream := bytes.Replace(req1k, []byte(`"model":"gpt-4o"`), []byte(`"model":"gpt-4o","stream":true`), 1)
	return &edgeBench{ingress: ingressURL, ingressWS: ingressWSURL, upstream: upstreamURL, hc: hc,
		kinds: []edgeKind{{"1KB", req1k, false}, {"stream50", stream, true}}}
}

// request returns a request of kind k to the chat endpoint at base, which
// checks the answer: 200, a whole body, and for a stream its [DONE].
func (e *edgeBench) request(base string, k edgeKind) func() error {
	url := base + "/v1/chat/completions"
	return func() error {
		r, err := e.hc.Post(url, "application/json", bytes.NewReader(k.body))
		if err != nil {
			return err
		}
		out, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || len(out) < 100 {
			return fmt.Errorf("HTTP %d, %d bytes", r.StatusCode, len(out))
		}
		if k.stream && !bytes.HasSuffix(out, []byte("data: [DONE]\n\n")) {
			return fmt.Errorf("stream without [DONE]: %.200s", out[max(0, len(out)-200):])
		}
		return nil
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// processCPU is the process's user and system CPU time in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// closedLoop runs workers that send back to back for d and returns the
// completed requests per second, and their number.
func closedLoop(b *testing.B, do func() error, workers int, d time.Duration) (float64, int64) {
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := do(); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / d.Seconds(), n.Load()
}

// openLoop starts requests at rate per second for d, each on its own
// goroutine (at most 1,024 in flight), and returns their latencies in ns,
// measured from when each was due.
func openLoop(b *testing.B, do func() error, rate float64, d time.Duration) *hdrhistogram.Histogram {
	h := hdrhistogram.New(1, int64(10*time.Second), 3)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 1024)
	start := time.Now()
	total := int(rate * d.Seconds())
	for i := range total {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		time.Sleep(time.Until(due))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := do(); err != nil {
				b.Error(err)
				return
			}
			lat := time.Since(due)
			mu.Lock()
			h.RecordValue(int64(lat))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return h
}

// BenchmarkOpenAIEdgeBytes reports, per corpus class, the bytes between
// the edges (DATA messages between the daemon and m2md upstream, AEAD) per
// byte of JSON the HTTP client sent or received:
//
//	go test ./integration -run '^$' -bench OpenAIEdgeBytes -benchtime 1x
func BenchmarkOpenAIEdgeBytes(b *testing.B) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "corpus", "*.json"))
	if err != nil {
		b.Fatal(err)
	}
	classes := map[string][]string{}
	models := map[string]bool{}
	for _, f := range files {
		name := filepath.Base(f)
		class := ""
		switch {
		case strings.HasPrefix(name, "req-embeddings"):
			class = "req embeddings"
		case strings.HasPrefix(name, "req-tools"):
			class = "req tools"
		case strings.HasPrefix(name, "req-"):
			class = "req " + sizeClass(name)
		case strings.HasPrefix(name, "resp-embeddings"):
			class = "resp embeddings"
		case strings.HasPrefix(name, "resp-error"):
			continue
		case strings.HasPrefix(name, "resp-"):
			class = "resp chat"
		case strings.HasPrefix(name, "stream-chunk"):
			class = "stream chunk"
		}
		if strings.HasPrefix(name, "req-") {
			models[modelOf(corpus(b, name))] = true
		} else {
			models["resp:"+name] = true
		}
		classes[class] = append(classes[class], name)
	}
	var ms []string
	for m := range models {
		ms = append(ms, m)
	}
	ms = append(ms, "gpt-4o")
	ingressURL, _, agent := benchEdges(b, ms)
	// A whole stream as the fast upstream writes it (50 chunks at once):
	// the upstream agent sends the chunks as batches (feature batch).
	b.Run("stream-50-chunks", func(b *testing.B) {
		body := bytes.Replace(corpus(b, "req-chat-1k-01.json"), []byte(`"model":"gpt-4o"`), []byte(`"model":"gpt-4o","stream":true`), 1)
		var jsonBytes int
		for i := range 50 {
			jsonBytes += len(corpus(b, streamChunks[1+i%10]))
		}
		for range b.N {
			before := agent.Stats()
			r, err := http.Post(ingressURL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			after := agent.Stats()
			wire := after.WireBytesSent - before.WireBytesSent
			b.ReportMetric(float64(jsonBytes), "JSON-B")
			b.ReportMetric(float64(wire), "wire-B")
			b.ReportMetric(float64(jsonBytes)/float64(wire), "JSON/wire")
			b.ReportMetric(float64(after.FramesSent-before.FramesSent), "replies")
		}
	})
	names := make([]string, 0, len(classes))
	for c := range classes {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, class := range names {
		b.Run(strings.ReplaceAll(class, " ", "-"), func(b *testing.B) {
			for range b.N {
				before := agent.Stats()
				var jsonBytes int
				for _, name := range classes[class] {
					body := corpus(b, name)
					path := "/v1/chat/completions"
					if strings.HasPrefix(name, "req-embeddings") {
						path = "/v1/embeddings"
					}
					if !strings.HasPrefix(name, "req-") {
						body = []byte(`{"model":"resp:` + name + `","messages":[{"role":"user","content":"x"}]}`)
					}
					if strings.HasPrefix(name, "stream-chunk") {
						// A chunk as a whole reply measures one chunk's frame.
						jsonBytes += len(corpus(b, name))
					} else if strings.HasPrefix(name, "req-") {
						jsonBytes += len(body)
					} else {
						jsonBytes += len(corpus(b, name))
					}
					r, err := http.Post(ingressURL+path, "application/json", bytes.NewReader(bytes.Replace(body, []byte(`"stream":true`), []byte(`"stream":false`), 1)))
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
					if r.StatusCode != 200 {
						b.Fatalf("%s: HTTP %d", name, r.StatusCode)
					}
				}
				after := agent.Stats()
				wire := after.WireBytesReceived - before.WireBytesReceived
				if !strings.HasPrefix(class, "req") {
					wire = after.WireBytesSent - before.WireBytesSent
				}
				b.ReportMetric(float64(jsonBytes), "JSON-B")
				b.ReportMetric(float64(wire), "wire-B")
				b.ReportMetric(float64(jsonBytes)/float64(wire), "JSON/wire")
			}
		})
	}
	_ = os.Stderr
}

func sizeClass(name string) string {
	for _, c := range []string{"tiny", "1k", "4k", "16k", "100k"} {
		if strings.Contains(name, "-"+c+"-") {
			return c
		}
	}
	return "other"
}
