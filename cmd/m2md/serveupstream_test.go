package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/security"
)

// mockServer is an OpenAI-compatible server for serve's upstream agent: it
// records each request's body and Authorization, answers a chat with
// mockAnswer or, streamed, with mockChunks, and holds a request whose body
// asks for model "slow" until release is closed.
type mockServer struct {
	*httptest.Server
	release chan struct{}
	entered chan struct{}

	mu     sync.Mutex
	bodies [][]byte
	auths  []string
}

const mockAnswer = `{"id":"chatcmpl-gw1","object":"chat.completion","created":1700000000,"model":"m1","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the mock server."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}`

var mockChunks = []string{
	`{"id":"chatcmpl-gw2","object":"chat.completion.chunk","created":1700000000,"model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"id":"chatcmpl-gw2","object":"chat.completion.chunk","created":1700000000,"model":"m1","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
	`{"id":"chatcmpl-gw2","object":"chat.completion.chunk","created":1700000000,"model":"m1","choices":[{"index":0,"delta":{"content":" there."},"finish_reason":null}]}`,
	`{"id":"chatcmpl-gw2","object":"chat.completion.chunk","created":1700000000,"model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
}

func startMockServer(t *testing.T) *mockServer {
	m := &mockServer{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		m.mu.Lock()
		m.bodies, m.auths = append(m.bodies, b), append(m.auths, r.Header.Get("Authorization"))
		m.mu.Unlock()
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		if bytes.Contains(b, []byte(`"model":"slow"`)) {
			m.entered <- struct{}{}
			<-m.release
		}
		if !bytes.Contains(b, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, mockAnswer)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range mockChunks {
			io.WriteString(w, "data: "+c+"\n\n")
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(m.Close)
	return m
}

// last is the body and Authorization of the latest request; n how many came.
func (m *mockServer) last() (body []byte, auth string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.bodies) == 0 {
		return nil, "", 0
	}
	return m.bodies[len(m.bodies)-1], m.auths[len(m.auths)-1], len(m.bodies)
}

// sdkBodies records the request bodies the SDK sends.
type sdkBodies struct {
	mu   sync.Mutex
	last []byte
}

func (s *sdkBodies) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	if req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(b))
		s.mu.Lock()
		s.last = b
		s.mu.Unlock()
	}
	return next(req)
}

func (s *sdkBodies) get() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// startGateway starts `m2md serve` with its OpenAI endpoint, its admin
// endpoint and extra flags, on loopback ports of its choosing, and returns
// the process, the endpoint's /v1/ URL and the admin URL.
func startGateway(t *testing.T, extra ...string) (p *proc, base, admin string) {
	t.Helper()
	userDirs(t)
	args := append([]string{"serve", "--quic-addr", "-", "--ws-addr", "-", "--admin-addr", "127.0.0.1:0", "--openai-addr", "127.0.0.1:0", "--log-format", "json"}, extra...)
	p = startM2MD(t, t.TempDir(), args...)
	admin = p.waitOutput(`"admin":"(http://127\.0\.0\.1:\d+)"`, 60*time.Second)
	addr := p.waitOutput(`"addr":"(127\.0\.0\.1:\d+)"[^\n]*OpenAI-compatible ingress listening`, 30*time.Second)
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections) // the SDK's pool
	return p, "http://" + addr + "/v1/", admin
}

// askMock asks model a chat completion through sdk and fails t unless the
// answer is the mock server's, byte for byte.
func askMock(ctx context.Context, t *testing.T, sdk openai.Client, model string) {
	t.Helper()
	resp, err := sdk.Chat.Completions.New(ctx, chatOf(model))
	if err != nil {
		t.Fatal(err)
	}
	if resp.RawJSON() != mockAnswer {
		t.Fatalf("answer differs from the server's:\n%s", resp.RawJSON())
	}
}

func chatOf(model string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")}}
}

// TestServeUpstreamInProcess: `m2md serve --upstream-base-url` serves the
// server's model through its own OpenAI endpoint with no other process:
// the official SDK gets the server's answer and every chunk of its stream
// byte for byte, the server gets the SDK's body unchanged and the API key
// as Bearer, the agent's requests count on serve's /metrics, the key is
// never logged, a request in flight at SIGINT finishes, and serve exits
// cleanly.
func TestServeUpstreamInProcess(t *testing.T) {
	const key = "sk-gateway-test-4f1c9a"
	t.Setenv("M2MD_TEST_UPSTREAM_KEY", key)
	m := startMockServer(t)
	p, base, admin := startGateway(t, "--upstream-base-url", m.URL+"/v1", "--upstream-models", "m1,slow", "--upstream-api-key-env", "M2MD_TEST_UPSTREAM_KEY")
	p.waitOutput(`"component":"upstream"[^\n]*"agent":"upstream-local"[^\n]*upstream agent attached in process`, 5*time.Second)
	var sent sdkBodies
	sdk := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey("any"), option.WithMaxRetries(0), option.WithMiddleware(sent.middleware))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	askMock(ctx, t, sdk, "m1")
	body, auth, _ := m.last()
	if !bytes.Equal(body, sent.get()) {
		t.Fatalf("the server got\n%s\nthe SDK sent\n%s", body, sent.get())
	}
	if auth != "Bearer "+key {
		t.Fatalf("the server got Authorization %q, want the --upstream-api-key-env key", auth)
	}

	st := sdk.Chat.Completions.NewStreaming(ctx, chatOf("m1"))
	i := 0
	for st.Next() {
		if i >= len(mockChunks) || st.Current().RawJSON() != mockChunks[i] {
			t.Fatalf("chunk %d differs from the server's:\n%s", i, st.Current().RawJSON())
		}
		i++
	}
	if err := st.Err(); err != nil || i != len(mockChunks) {
		t.Fatalf("%d of %d chunks, err %v", i, len(mockChunks), err)
	}
	if body, _, _ := m.last(); !bytes.Equal(body, sent.get()) {
		t.Fatalf("streamed: the server got\n%s\nthe SDK sent\n%s", body, sent.get())
	}

	// Counted once the reply is written: the SDK may have it first.
	want := `m2md_upstream_requests_total{model="m1",outcome="ok"} 2`
	var metrics string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && !strings.Contains(metrics, want); time.Sleep(20 * time.Millisecond) {
		_, metrics = httpGet(t, admin+"/metrics")
	}
	if !strings.Contains(metrics, want) {
		t.Errorf("serve's /metrics lacks %s", want)
	}

	// Shutdown: the request in flight at the server is answered, then
	// serve exits 0 without a failed reconnection of its agent.
	answered := make(chan error, 1)
	go func() {
		r, err := sdk.Chat.Completions.New(ctx, chatOf("slow"))
		if err == nil && r.RawJSON() != mockAnswer {
			err = errors.New("answer differs: " + r.RawJSON())
		}
		answered <- err
	}()
	select {
	case <-m.entered:
	case <-ctx.Done():
		t.Fatal("the slow request never reached the server")
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1/"), 10*time.Second)
	close(m.release)
	if err := <-answered; err != nil {
		t.Fatalf("the request in flight at shutdown: %v", err)
	}
	if code := p.wait(20 * time.Second); code != exitOK {
		t.Fatalf("serve exited %d\n%s", code, p.stderr.String())
	}
	log := p.stderr.String()
	checkJSONLines(t, "serve", log)
	for _, bad := range []string{key, "reconnect failed", `"level":"error"`} {
		if strings.Contains(log, bad) {
			t.Errorf("serve's log has %q:\n%s", bad, log)
		}
	}
	checkAttachedModes(t, log, "none")
}

// checkAttachedModes: the sessions attached in process, the endpoint's
// and the upstream agent's, use mode want (--min-security's).
func checkAttachedModes(t *testing.T, log, want string) {
	t.Helper()
	established := regexp.MustCompile(`"transport":"inproc"[^\n]*"agent":"([^"]+)"[^\n]*"mode":"([a-z]+)"[^\n]*session established`)
	agents := map[string]bool{}
	for _, m := range established.FindAllStringSubmatch(log, -1) {
		agents[m[1]] = true
		if m[2] != want {
			t.Errorf("attached agent %s uses mode %s, want %s", m[1], m[2], want)
		}
	}
	if !agents["upstream-local"] || len(agents) < 2 {
		t.Errorf("attached sessions %v, want the upstream agent's and the endpoint's:\n%s", agents, log)
	}
}

// TestServeAttachedMinSecurity: with --min-security aead, the parts
// attached in process use aead too, and serve as before.
func TestServeAttachedMinSecurity(t *testing.T) {
	m := startMockServer(t)
	p, base, _ := startGateway(t, "--min-security", "aead", "--upstream-base-url", m.URL+"/v1", "--upstream-models", "m1")
	p.waitOutput(`upstream agent attached in process`, 5*time.Second)
	sdk := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey("any"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	askMock(ctx, t, sdk, "m1")
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(20 * time.Second); code != exitOK {
		t.Fatalf("serve exited %d\n%s", code, p.stderr.String())
	}
	checkAttachedModes(t, p.stderr.String(), "aead")
}

// waitRefused waits until addr refuses connections: a server shutting
// down has closed its listener.
func waitRefused(t *testing.T, addr string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		c.Close()
	}
	t.Fatalf("%s still accepts connections after %v", addr, timeout)
}

// TestServeUpstreamMeshOnly: with the OpenAI endpoint off, serve's
// upstream agent serves the agents that reach the daemon over the network;
// with --org-secrets-file it authenticates with --upstream-org's secret.
func TestServeUpstreamMeshOnly(t *testing.T) {
	userDirs(t)
	secrets := filepath.Join(t.TempDir(), "secrets")
	secret := security.Secret(bytes.Repeat([]byte{7}, 32))
	if err := os.WriteFile(secrets, []byte("acme "+hex.EncodeToString(secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		opt   client.Options
		auth  bool // the agent's session is authenticated
	}{
		{"open", nil, client.Options{AgentID: "mesh-requester"}, false},
		{"org secrets", []string{"--org-secrets-file", secrets, "--upstream-org", "acme"},
			client.Options{AgentID: "mesh-requester", Org: "acme", OrgSecret: secret, Security: frame.SecurityAEAD}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMockServer(t)
			p := startM2MD(t, t.TempDir(), append([]string{"serve", "--quic-addr", "-", "--ws-addr", "127.0.0.1:0", "--admin-addr", "-", "--openai-addr", "-", "--log-format", "json",
				"--upstream-base-url", m.URL + "/v1", "--upstream-models", "m1"}, tc.flags...)...)
			url := p.waitOutput(`"ws":"(ws://127\.0\.0\.1:\d+/m2m)"`, 60*time.Second)
			p.waitOutput(`upstream agent attached in process`, 10*time.Second)
			p.waitOutput(fmt.Sprintf(`"agent":"upstream-local"[^\n]*"authenticated":%t`, tc.auth), time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, url, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := `{"model":"m1","messages":[{"role":"user","content":"Say hello."}]}`
			got, err := c.Do(ctx, []byte(req))
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Body) != mockAnswer || got.From != "upstream-local" {
				t.Fatalf("answer from %s differs from the server's:\n%s", got.From, got.Body)
			}
			if body, _, _ := m.last(); string(body) != req {
				t.Fatalf("the server got %s", body)
			}
		})
	}
}

// TestServeWithoutUpstream: without --upstream-base-url no upstream agent
// is attached, whatever the other --upstream-* flags say: the model is
// unroutable and the server never hears of the request.
func TestServeWithoutUpstream(t *testing.T) {
	m := startMockServer(t)
	p, base, _ := startGateway(t, "--upstream-models", "m1")
	sdk := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey("any"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := sdk.Chat.Completions.New(ctx, chatOf("m1"))
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Code != "model_not_found" {
		t.Fatalf("got %v, want HTTP 404 model_not_found", err)
	}
	if _, _, n := m.last(); n != 0 {
		t.Fatalf("the server got %d requests", n)
	}
	if strings.Contains(p.stderr.String(), `"component":"upstream"`) {
		t.Errorf("an upstream agent logged:\n%s", p.stderr.String())
	}
}

// TestCLIServeUpstreamUsage: serve's upstream flags are m2md upstream's
// with the prefix, and their errors name them so.
func TestCLIServeUpstreamUsage(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	if err := os.WriteFile(secrets, []byte("acme 000102030405060708090a0b0c0d0e0f\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	off := []string{"serve", "--quic-addr", "-", "--ws-addr", "-", "--admin-addr", "-", "--openai-addr", "-", "--cert-dir", dir}
	serve := func(args ...string) []string { return append(append([]string{}, off...), args...) }
	const up = "--upstream-base-url"
	for _, tc := range []cliCase{
		{name: "help", args: []string{"serve", "--help"}, stdout: []string{"--upstream-base-url URL", "--upstream-models models", "--upstream-api-key-env variable", "--upstream-concurrency n", "--upstream-first-byte-timeout", "--upstream-chunk-timeout", "--upstream-conversation-bases size", "--upstream-org org"}, noStderr: true},
		{name: "org without secrets", args: serve(up, "http://127.0.0.1:9/v1", "--upstream-org", "acme"), code: exitUsage, stderr: []string{"--upstream-org acme", "no --org-secrets-file"}},
		{name: "org without upstream", args: serve("--org-secrets-file", secrets, "--upstream-org", "acme"), code: exitUsage, stderr: []string{"--upstream-org", "only --upstream-base-url starts"}},
		{name: "org required", args: serve("--org-secrets-file", secrets, up, "http://127.0.0.1:9/v1"), code: exitUsage, stderr: []string{"--upstream-org is required with --org-secrets-file"}},
		{name: "org unknown", args: serve("--org-secrets-file", secrets, up, "http://127.0.0.1:9/v1", "--upstream-org", "nope"), code: exitUsage, stderr: []string{"--upstream-org nope: --org-secrets-file does not list"}},
		{name: "concurrency 0", args: serve(up, "http://127.0.0.1:9/v1", "--upstream-concurrency", "0"), code: exitUsage, stderr: []string{"--upstream-concurrency must be at least 1, not 0"}},
		{name: "empty key variable", args: serve(up, "http://127.0.0.1:9/v1", "--upstream-api-key-env", "M2MD_TEST_NO_SUCH_VARIABLE"), code: exitUsage, stderr: []string{"--upstream-api-key-env M2MD_TEST_NO_SUCH_VARIABLE: the variable is empty or not set"}},
		{name: "bad base URL", args: serve(up, "ftp://x"), code: exitUsage, stderr: []string{"--upstream-base-url: want http(s)://"}},
		{name: "negative timeout", args: serve(up, "http://127.0.0.1:9/v1", "--upstream-chunk-timeout", "-1s"), code: exitUsage, stderr: []string{"--upstream-chunk-timeout is -1s"}},
		{name: "no models", args: serve(up, "http://127.0.0.1:9/v1"), code: exitBadInput, stderr: []string{"--upstream-models not set, and the server did not list its models", "GET http://127.0.0.1:9/v1/models"}},
	} {
		tc.notStderr = append(tc.notStderr, "Config.")
		t.Run(tc.name, tc.check)
	}
}
