package integration

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/openai/ingress"
)

// keyedIngress runs a second ingress beside e's daemon with the keys of
// file, its metrics in reg, on an HTTP test server.
func keyedIngress(t *testing.T, e *edges, file string, reg *prometheus.Registry) (*ingress.Ingress, string) {
	t.Helper()
	keys, err := ingress.ParseKeys(strings.NewReader(file), "keys")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, err := ingress.New(ctx, ingress.Config{
		Keys: keys, Models: e.d.Models, Logger: testLogger(t), Registerer: reg,
		Dial: func(ctx context.Context, id ingress.Identity) (*client.Client, error) {
			return client.Dial(ctx, e.d.url("quic"), client.Options{AgentID: id.AgentID, TLSConfig: e.d.clientTLS(t), Reconnect: true})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(in)
	t.Cleanup(func() {
		srv.Close()
		in.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return in, srv.URL
}

func keyClient(base, key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(base + "/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
	}, opts...)...)
}

// apiError returns err as the SDK's error, failing the test otherwise.
func apiError(t *testing.T, err error) *openai.Error {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error, got %v", err)
	}
	return ae
}

const limitKeys = `
sk-alice-0000001 alice rpm=3
sk-bob-00000001 bob tpm=1000
sk-carol-000001 carol concurrent=1
sk-dave-0000001 dave models=gpt-4o
sk-erin-0000001 erin rpm=60
sk-frank-000001 frank
`

// A request that fails before any answer gives back the tokens it
// reserved: failures do not eat a key's tokens per minute.
func TestOpenAITokensOfFailedRequests(t *testing.T) {
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	_, base := keyedIngress(t, e, "sk-bob-00000001 bob tpm=1000\n", prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bob := keyClient(base, "sk-bob-00000001")
	params := chatParams("context-too-long") // the upstream answers 400
	params.MaxTokens = openai.Int(600)
	for i := range 3 {
		_, err := bob.Chat.Completions.New(ctx, params)
		if ae := apiError(t, err); ae.StatusCode != 400 {
			t.Fatalf("failed request %d: HTTP %d %q, want the upstream's 400 (its tokens given back)", i, ae.StatusCode, ae.Type)
		}
	}
}

// A request without max_tokens reserves ingress.ReservedCompletionTokens
// of its key's tokens per minute, not only its prompt: a second such
// request while the first streams does not fit in tpm=5000.
func TestOpenAITokensWithoutMaxTokens(t *testing.T) {
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	_, base := keyedIngress(t, e, "sk-bob-00000001 bob tpm=5000\n", prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bob := keyClient(base, "sk-bob-00000001")
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	st := bob.Chat.Completions.NewStreaming(sctx, chatParams("slow-stream"))
	defer st.Close()
	if !st.Next() {
		t.Fatalf("stream: %v", st.Err())
	}
	_, err := bob.Chat.Completions.New(ctx, chatParams("gpt-4o"))
	if ae := apiError(t, err); ae.StatusCode != 429 || ae.Type != "tokens" {
		t.Fatalf("a second request without max_tokens: HTTP %d %q, want 429 tokens", ae.StatusCode, ae.Type)
	}
}

// A stream without max_tokens and without usage that runs past its
// reservation (ingress.ReservedCompletionTokens) is charged what it
// streamed, a token a chunk: after 5000 chunks under tpm=6000 a request
// for 1500 more tokens is refused, where the reservation alone would have
// left room for it.
func TestOpenAITokensOfLongStream(t *testing.T) {
	t.Parallel()
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	_, base := keyedIngress(t, e, "sk-bob-00000001 bob tpm=6000\n", prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bob := keyClient(base, "sk-bob-00000001")
	st := bob.Chat.Completions.NewStreaming(ctx, chatParams("long-stream"))
	n := 0
	for st.Next() {
		n++
	}
	if err := st.Err(); err != nil || n != 5000 {
		t.Fatalf("%d chunks, err %v", n, err)
	}
	params := chatParams("gpt-4o")
	params.MaxTokens = openai.Int(1500)
	_, err := bob.Chat.Completions.New(ctx, params)
	if ae := apiError(t, err); ae.StatusCode != 429 || ae.Type != "tokens" {
		t.Fatalf("after a stream of 5000 tokens under tpm=6000: HTTP %d %q, want 429 tokens", ae.StatusCode, ae.Type)
	}
}

// Every limit of a key, through the official SDK: 429 with OpenAI's error
// JSON that names the limit (its type) and Retry-After, which the SDK's
// retry honours; metrics per key name.
func TestOpenAIKeyLimits(t *testing.T) {
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	reg := prometheus.NewRegistry()
	_, base := keyedIngress(t, e, limitKeys, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Requests per minute: three, then 429 naming the limit, with
	// Retry-After a third of a minute.
	alice := keyClient(base, "sk-alice-0000001")
	for i := range 3 {
		if _, err := alice.Chat.Completions.New(ctx, chatParams("gpt-4o")); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	_, err := alice.Chat.Completions.New(ctx, chatParams("gpt-4o"))
	ae := apiError(t, err)
	if ae.StatusCode != 429 || ae.Type != "requests" || ae.Code != "rate_limit_exceeded" || !strings.Contains(ae.Message, "requests per minute") {
		t.Fatalf("over rpm: %d %q %q %q", ae.StatusCode, ae.Type, ae.Code, ae.Message)
	}
	if ra := ae.Response.Header.Get("Retry-After"); ra != "20" {
		t.Fatalf("over rpm: Retry-After %q, want 20", ra)
	}

	// Tokens per minute: each request reserves its max_tokens and prompt,
	// and gives back what its usage did not count (220 tokens an answer).
	bob := keyClient(base, "sk-bob-00000001")
	params := chatParams("gpt-4o")
	params.MaxTokens = openai.Int(600)
	for i := range 2 {
		if _, err := bob.Chat.Completions.New(ctx, params); err != nil {
			t.Fatalf("tpm request %d (the first's unused tokens given back): %v", i, err)
		}
	}
	_, err = bob.Chat.Completions.New(ctx, params)
	if ae := apiError(t, err); ae.StatusCode != 429 || ae.Type != "tokens" || ae.Response.Header.Get("Retry-After") == "" {
		t.Fatalf("over tpm: %d %q Retry-After %q", ae.StatusCode, ae.Type, ae.Response.Header.Get("Retry-After"))
	}

	// Concurrent requests: one stream in flight, a second refused, and
	// admitted again once the first ends.
	carol := keyClient(base, "sk-carol-000001")
	sctx, stop := context.WithCancel(ctx)
	st := carol.Chat.Completions.NewStreaming(sctx, chatParams("slow-stream"))
	if !st.Next() {
		t.Fatalf("stream: %v", st.Err())
	}
	_, err = carol.Chat.Completions.New(ctx, chatParams("gpt-4o"))
	if ae := apiError(t, err); ae.StatusCode != 429 || ae.Type != "concurrent_requests" || ae.Response.Header.Get("Retry-After") != "1" {
		t.Fatalf("over concurrent: %d %q", ae.StatusCode, ae.Type)
	}
	stop()
	st.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err = carol.Chat.Completions.New(ctx, chatParams("gpt-4o")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot of an ended stream was not given back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Allowed models: another is 403, and GET /v1/models lists only them.
	dave := keyClient(base, "sk-dave-0000001")
	_, err = dave.Chat.Completions.New(ctx, chatParams("gpt-4o-mini"))
	if ae := apiError(t, err); ae.StatusCode != 403 || ae.Code != "model_not_allowed" {
		t.Fatalf("a model not allowed: %d %q", ae.StatusCode, ae.Code)
	}
	page, err := dave.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "gpt-4o" {
		t.Fatalf("models of a key with models=gpt-4o: %+v %v", page, err)
	}
	if _, err := dave.Models.Get(ctx, "gpt-4o-mini"); apiError(t, err).StatusCode != 404 {
		t.Fatalf("GET /v1/models/gpt-4o-mini of a key with models=gpt-4o: %v", err)
	}

	// The SDK's retry honours Retry-After: over rpm=60, one retry after
	// the second it is told succeeds (its own first backoff is half that).
	var mu sync.Mutex
	var attempts []time.Time
	erin := keyClient(base, "sk-erin-0000001", option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		mu.Lock()
		attempts = append(attempts, time.Now())
		mu.Unlock()
		return next(r)
	}))
	limited := false
	for range 120 {
		if _, err := erin.Chat.Completions.New(ctx, chatParams("gpt-4o")); err != nil {
			if ae := apiError(t, err); ae.StatusCode != 429 {
				t.Fatal(err)
			}
			limited = true
			break
		}
	}
	if !limited {
		t.Fatal("120 requests at once within rpm=60")
	}
	mu.Lock()
	attempts = attempts[:0]
	mu.Unlock()
	if _, err := erin.Chat.Completions.New(ctx, chatParams("gpt-4o"), option.WithMaxRetries(1)); err != nil {
		t.Fatalf("with one retry: %v", err)
	}
	mu.Lock()
	if len(attempts) == 2 && attempts[1].Sub(attempts[0]) < 900*time.Millisecond {
		t.Errorf("the retry came %v after the 429, not after its Retry-After", attempts[1].Sub(attempts[0]))
	}
	mu.Unlock()

	// Metrics per key name, never a key; a key never used is there at 0.
	got := func(name string, labels map[string]string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.Metric {
				for _, lp := range m.Label {
					if labels[lp.GetName()] != lp.GetValue() {
						continue next
					}
				}
				return m.GetCounter().GetValue()
			}
		}
		return -1
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"m2md_openai_requests_total", map[string]string{"key": "alice", "status": "200"}, 3},
		{"m2md_openai_requests_total", map[string]string{"key": "alice", "status": "429"}, 1},
		{"m2md_openai_limit_refusals_total", map[string]string{"key": "alice", "limit": "requests"}, 1},
		{"m2md_openai_limit_refusals_total", map[string]string{"key": "bob", "limit": "tokens"}, 1},
		{"m2md_openai_tokens_total", map[string]string{"key": "bob"}, 440},
		{"m2md_openai_requests_total", map[string]string{"key": "dave", "status": "403"}, 1},
		{"m2md_openai_requests_total", map[string]string{"key": "frank", "status": "200"}, 0},
		{"m2md_openai_tokens_total", map[string]string{"key": "frank"}, 0},
	} {
		if v := got(c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	// Carol's retries while her stream wound down were refused too.
	if v := got("m2md_openai_limit_refusals_total", map[string]string{"key": "carol", "limit": "concurrent_requests"}); v < 1 {
		t.Errorf("carol's concurrency refusals: %v", v)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if strings.HasPrefix(lp.GetValue(), "sk-") {
					t.Fatalf("a key appears in %s", mf.GetName())
				}
			}
		}
	}
}

// A reload that removes an identity from the keys file takes its agent off
// the mesh: its session closes, a stream it had in flight ends with an
// error, and its key is refused; the identities still listed carry on.
func TestOpenAIKeysReloadDropsIdentity(t *testing.T) {
	t.Parallel()
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	parse := func(file string) *ingress.Keys {
		k, err := ingress.ParseKeys(strings.NewReader(file), "keys")
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	var mu sync.Mutex
	sessions := map[string][]*client.Client{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, err := ingress.New(ctx, ingress.Config{
		Keys: parse("sk-alice-0000001 alice\nsk-bob-00000001 bob\n"), Models: e.d.Models, Logger: testLogger(t),
		Dial: func(ctx context.Context, id ingress.Identity) (*client.Client, error) {
			c, err := client.Dial(ctx, e.d.url("quic"), client.Options{AgentID: id.AgentID, TLSConfig: e.d.clientTLS(t), Reconnect: true})
			if err == nil {
				mu.Lock()
				sessions[id.AgentID] = append(sessions[id.AgentID], c)
				mu.Unlock()
			}
			return c, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(in)
	t.Cleanup(func() {
		srv.Close()
		in.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	alice, bob := keyClient(srv.URL, "sk-alice-0000001"), keyClient(srv.URL, "sk-bob-00000001")
	st := bob.Chat.Completions.NewStreaming(ctx, chatParams("slow-stream")) // 10 s of chunks
	defer st.Close()
	if !st.Next() {
		t.Fatalf("bob's stream: %v", st.Err())
	}

	if err := in.SetKeys(ctx, parse("sk-alice-0000001 alice\n")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	bobs := sessions["bob"]
	mu.Unlock()
	for _, c := range bobs {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("bob's mesh session outlives his removal from the keys file")
		}
	}
	for st.Next() {
	}
	if st.Err() == nil {
		t.Fatal("bob's stream in flight ran to its end after his removal")
	}
	if _, err := bob.Chat.Completions.New(ctx, chatParams("gpt-4o")); apiError(t, err).StatusCode != 401 {
		t.Fatalf("bob's key after his removal: %v", err)
	}
	if _, err := alice.Chat.Completions.New(ctx, chatParams("gpt-4o")); err != nil {
		t.Fatalf("alice, still listed: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // past the ingress's first redial (100 ms)
	mu.Lock()
	n := len(sessions["bob"])
	mu.Unlock()
	if n != 1 {
		t.Fatalf("bob's session was dialed %d times: the ingress dials a removed identity again", n)
	}
}
