package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/internal/otlptest"
)

// m2md serve and m2md upstream, as processes configured by the OTEL_*
// environment alone, export their spans to an OTLP receiver: a request
// with a traceparent gets the endpoint's span, the daemon's and the
// upstream's GenAI span, each the child of the one before, under each
// command's default service name, and the model server gets upstream's
// span as its parent.
func TestCLITracesFromEnvironment(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	t.Setenv("OTEL_SERVICE_NAME", "")
	var mu sync.Mutex
	var parent string
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parent = r.Header.Get("traceparent")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"m1-2025","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}))
	t.Cleanup(model.Close)

	dir := t.TempDir()
	serve := startM2MD(t, dir, "serve", "--quic-addr", "-", "--ws-addr", "127.0.0.1:0", "--admin-addr", "-", "--openai-addr", "127.0.0.1:0", "--cert-dir", dir, "--log-format", "json")
	ws := serve.waitOutput(`"ws":"(ws://127\.0\.0\.1:\d+/m2m)"`, 60*time.Second)
	edge := serve.waitOutput(`"addr":"(127\.0\.0\.1:\d+)"[^\n]*OpenAI-compatible ingress listening`, 60*time.Second)
	up := startM2MD(t, dir, "upstream", "--url", ws, "--security", "none", "--agent", "model-server", "--models", "m1",
		"--base-url", model.URL+"/v1", "--log-format", "json")
	up.waitOutput(`upstream agent model-server serving 1 model`, 30*time.Second)

	const trace, span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest(http.MethodPost, "http://"+edge+"/v1/chat/completions", strings.NewReader(`{"model":"m1","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("traceparent", "00-"+trace+"-"+span+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("traceresponse"), "00-"+trace+"-") {
		t.Fatalf("HTTP %d, traceresponse %q: %s", resp.StatusCode, resp.Header.Get("traceresponse"), body)
	}
	type hop struct{ service, name string }
	want := []hop{{"m2md-serve", "POST /v1/chat/completions"}, {"m2md-serve", "route m1"}, {"m2md-upstream", "chat m1"}}
	rcv.Wait(t, 15*time.Second, func(spans []otlptest.Span) bool {
		up := span // each hop's parent
		for _, h := range want {
			found := false
			for _, s := range spans {
				if s.Service == h.service && s.Name == h.name && s.TraceID() == trace && s.ParentID() == up {
					up, found = s.SpanID(), true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	})
	for _, s := range rcv.Spans() {
		if s.Name == "chat m1" && s.TraceID() == trace {
			mu.Lock()
			got := parent
			mu.Unlock()
			if got != "00-"+trace+"-"+s.SpanID()+"-01" {
				t.Fatalf("model server got traceparent %q, want upstream's span %s", got, s.SpanID())
			}
			if s.Attr("gen_ai.response.model") != "m1-2025" || s.Attr("gen_ai.usage.output_tokens") != "1" {
				t.Fatalf("upstream span: %v", s.Attributes)
			}
			return
		}
	}
	t.Fatal("no upstream span")
}
