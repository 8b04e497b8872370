package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
)

// httpGet returns url's status and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestCLIUpstreamAdmin: `m2md upstream --admin-addr` serves /healthz, which
// says when the agent is connected, /metrics with its requests per model
// (every series at zero from the start; an answer and a stream counted)
// and, with --pprof, the profiles.
func TestCLIUpstreamAdmin(t *testing.T) {
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req_7")
		if b, _ := io.ReadAll(r.Body); strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m1","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	}))
	defer model.Close()
	d := startTestDaemon(t, nil)
	url := "ws://" + d.WSAddr().String() + "/m2m"
	up := startM2MD(t, t.TempDir(), "upstream", "--url", url, "--security", "none", "--agent", "admin-up", "--models", "m1,m2",
		"--base-url", model.URL+"/v1", "--log-format", "json", "--admin-addr", "127.0.0.1:0", "--pprof")
	admin := up.waitOutput(`"admin":"(http://127\.0\.0\.1:\d+)"`, 30*time.Second)
	up.waitOutput(`upstream agent admin-up serving 2 models`, 30*time.Second)
	if code, body := httpGet(t, admin+"/healthz"); code != http.StatusOK || !strings.Contains(body, `"status":"ok"`) || !strings.Contains(body, `"agent":"admin-up"`) {
		t.Errorf("/healthz once connected: %d %s", code, body)
	}
	_, metrics := httpGet(t, admin+"/metrics")
	for _, zero := range []string{
		`m2md_upstream_requests_total{model="m1",outcome="ok"} 0`,
		`m2md_upstream_requests_total{model="m2",outcome="error"} 0`,
		`m2md_upstream_requests_total{model="other",outcome="cancelled"} 0`,
		`m2md_upstream_request_duration_seconds_count{model="m1"} 0`,
		`m2md_upstream_time_to_first_chunk_seconds_count{model="m2"} 0`,
		`m2md_upstream_in_flight 0`,
		`m2md_build_info{`,
	} {
		if !strings.Contains(metrics, zero) {
			t.Errorf("/metrics at start lacks %s", zero)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, url, client.Options{AgentID: "admin-req"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Do(ctx, []byte(`{"model":"m1","messages":[{"role":"user","content":"hi"}]}`)); err != nil {
		t.Fatal(err)
	}
	// The server's headers still reach a requester that asks for them,
	// and are no chunk of the answer.
	st, err := c.Stream(ctx, []byte(`{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}`), client.ResponseHeaders())
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	if h := string(st.Headers()); !strings.Contains(h, `"x-request-id":"req_7"`) {
		t.Errorf("headers reply through the counted upstream: %q", h)
	}
	// Counted once the reply is written: the requester may have it first.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, metrics = httpGet(t, admin+"/metrics"); strings.Contains(metrics, `m2md_upstream_requests_total{model="m1",outcome="ok"} 2`) {
			break
		}
	}
	for _, want := range []string{
		`m2md_upstream_requests_total{model="m1",outcome="ok"} 2`,
		`m2md_upstream_request_duration_seconds_count{model="m1"} 2`,
		`m2md_upstream_time_to_first_chunk_seconds_count{model="m1"} 1`, // the stream's
		`m2md_upstream_in_flight 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics after one answer lacks %s", want)
		}
	}
	if code, body := httpGet(t, admin+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ with --pprof: %d", code)
	}
}
