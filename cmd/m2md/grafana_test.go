package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// promMetric finds the metric names in a PromQL expression: m2md's own and
// the Go and process collectors' (the only ones the dashboard may use).
var promMetric = regexp.MustCompile(`\b(?:m2md|go|process)_[a-zA-Z0-9_]+\b`)

// dashboardQueries returns every PromQL expression of deploy/grafana's
// dashboards: the panels' targets and the template variables' queries.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/grafana/m2md.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/m2md.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q has a target without a query", p.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type == "query" {
			exprs = append(exprs, v.Definition)
		}
	}
	return exprs
}

// exported is the set of series names in a /metrics text.
func exported(text string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.Lines(text) {
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		out[strings.TrimSpace(name)] = true
	}
	return out
}

// TestGrafanaDashboardMetricsExist: every metric a query of the dashboard
// names is exported by `m2md serve` (daemon and OpenAI endpoint) or `m2md
// upstream`, each running with a request answered through the whole path.
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	exprs := dashboardQueries(t)
	if len(exprs) < 20 {
		t.Fatalf("found only %d queries in the dashboard", len(exprs))
	}
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m1","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	defer model.Close()
	// The endpoint counts its requests per key name: an open endpoint has
	// none.
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("dashboard-key-1 dash-client name=dash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := startM2MD(t, dir, "serve", "--quic-addr", "-", "--ws-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--openai-addr", "127.0.0.1:0", "--openai-keys-file", keys, "--log-format", "json")
	ws := serve.waitOutput(`"ws":"(ws://127\.0\.0\.1:\d+/m2m)"`, 60*time.Second)
	serveAdmin := serve.waitOutput(`"admin":"(http://127\.0\.0\.1:\d+)"`, 5*time.Second)
	endpoint := serve.waitOutput(`"addr":"(127\.0\.0\.1:\d+)"[^\n]*OpenAI-compatible ingress listening`, 30*time.Second)
	up := startM2MD(t, t.TempDir(), "upstream", "--url", ws, "--security", "none", "--agent", "dash-up", "--models", "m1",
		"--base-url", model.URL+"/v1", "--log-format", "json", "--admin-addr", "127.0.0.1:0")
	upAdmin := up.waitOutput(`"admin":"(http://127\.0\.0\.1:\d+)"`, 30*time.Second)
	up.waitOutput(`upstream agent dash-up serving`, 30*time.Second)

	req, err := http.NewRequest(http.MethodPost, "http://"+endpoint+"/v1/chat/completions", strings.NewReader(`{"model":"m1","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer dashboard-key-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a request through the endpoint: HTTP %d", resp.StatusCode)
	}

	have := map[string]bool{}
	for _, admin := range []string{serveAdmin, upAdmin} {
		_, text := httpGet(t, admin+"/metrics")
		for name := range exported(text) {
			have[name] = true
		}
	}
	checked := 0
	for _, expr := range exprs {
		names := promMetric.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("query names no metric: %s", expr)
		}
		for _, name := range names {
			checked++
			if !have[name] {
				t.Errorf("the dashboard queries %s, which neither m2md serve nor m2md upstream exports (in: %s)", name, expr)
			}
		}
	}
	t.Logf("%d metric names in %d queries, all exported", checked, len(exprs))
}
