package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/m2md/m2md/internal/bench"
)

// openAIStub answers chat completions, streamed when asked, and counts the
// requests and the API keys it saw.
func openAIStub(t *testing.T, keys *sync32) *httptest.Server {
	resp, err := os.ReadFile(filepath.Join("..", "..", "testdata", "corpus", "resp-chat-01.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		keys.add(r.Header.Get("Authorization"))
		if bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
			return
		}
		w.Write(resp)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// sync32 counts requests and remembers whether any carried the wrong key.
type sync32 struct {
	n, wrong atomic.Int64
	want     string
}

func (s *sync32) add(auth string) {
	s.n.Add(1)
	if auth != "Bearer "+s.want {
		s.wrong.Add(1)
	}
}

// TestBenchOpenAI runs `m2md bench openai --compare` streamed against two
// servers and reads the JSON report as a script would.
func TestBenchOpenAI(t *testing.T) {
	a, b := &sync32{want: "sk-a"}, &sync32{want: "sk-b"}
	sa, sb := openAIStub(t, a), openAIStub(t, b)
	out := filepath.Join(t.TempDir(), "openai.json")
	t.Setenv("BENCH_TEST_KEY", "sk-a")
	code, stdout, stderr := benchCLI(t, "openai", "--url", sa.URL+"/v1", "--compare", sb.URL+"/v1", "--api-key-env", "BENCH_TEST_KEY", "--compare-api-key=sk-b",
		"--stream", "--connections", "2", "--duration", "400ms", "--warmup", "50ms", "--slice", "100ms", "--json", out)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if a.n.Load() == 0 || b.n.Load() == 0 || a.wrong.Load()+b.wrong.Load() != 0 {
		t.Errorf("target got %d (%d with the wrong key), compare %d (%d)", a.n.Load(), a.wrong.Load(), b.n.Load(), b.wrong.Load())
	}
	if !strings.Contains(stdout, "target/compare") || !strings.Contains(stdout, "first chunk p50") {
		t.Errorf("table:\n%s", stdout)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := bench.ReadOpenAIReport(f)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Compare == nil || rep.Ratios == nil || rep.Target.Requests == 0 || rep.Compare.Requests == 0 || rep.Target.FirstChunk == nil {
		t.Errorf("report %+v", rep)
	}
	if strings.Contains(rep.Config.CommandLine, "sk-") {
		t.Errorf("the report records a key: %s", rep.Config.CommandLine)
	}

	// --json - writes the report, and only it, to stdout; --file sends
	// each line's request; --warmup 0 is none (the library's 0 is 2 s).
	reqs := filepath.Join(t.TempDir(), "reqs.jsonl")
	if err := os.WriteFile(reqs, []byte("{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}\n\n{\"model\":\"y\",\"messages\":[]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.want = ""
	code, stdout, stderr = benchCLI(t, "openai", "--url", sa.URL+"/v1", "--file", reqs, "--rate", "50", "--duration", "200ms", "--warmup", "0", "--json", "-")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout is no JSON report: %v\n%s", err, stdout)
	}
	if c := doc["config"].(map[string]any); c["mode"] != "open" || c["requests"] != 2.0 || c["warmup_s"] != 0.0 {
		t.Errorf("config %v", c)
	}
}

func TestBenchOpenAIUsage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer srv.Close()
	// Nothing listens there: no case may load a real endpoint.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--connections", "0"}, exitUsage, "--connections"},
		{[]string{"--url", "localhost:8000"}, exitUsage, "--url"},
		{[]string{"--compare", "ftp://x"}, exitUsage, "--compare"},
		{[]string{"--slice", "1ms", "--compare", closed.URL}, exitUsage, "--slice"},
		{[]string{"--corpus", "a", "--file", "b"}, exitUsage, "--corpus or --file"},
		{[]string{"--payload", "3KB"}, exitUsage, "--payload"},
		{[]string{"--api-key-env", "M2MD_BENCH_NO_SUCH_VARIABLE"}, exitUsage, "--api-key-env"},
		{[]string{"--file", filepath.Join(t.TempDir(), "none.jsonl")}, exitBadInput, "none.jsonl"},
		// A server that fails every request: the figures describe the
		// failure, and the exit status says so.
		{[]string{"--url", srv.URL, "--connections", "1"}, exitBadInput, "http_500"},
		{[]string{"--connections", "1"}, exitBadInput, "connection"},
	} {
		args := append([]string{"openai", "--url", closed.URL, "--duration", "100ms", "--warmup", "10ms"}, tc.args...)
		code, _, stderr := benchCLI(t, args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("bench openai %v: exit %d, %q; want %d naming %s", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

func TestRedactKeys(t *testing.T) {
	got := strings.Join(redactKeys([]string{"--api-key", "sk-1", "--url", "u", "-compare-api-key=sk-2", "--api-key-env", "V"}), " ")
	if want := "--api-key REDACTED --url u -compare-api-key=REDACTED --api-key-env REDACTED"; got != want {
		t.Errorf("redactKeys = %q, want %q", got, want)
	}
}
