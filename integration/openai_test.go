package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	m2mopenai "github.com/m2md/m2md/openai"
	"github.com/m2md/m2md/openai/ingress"
	"github.com/m2md/m2md/openai/upstream"
	"github.com/m2md/m2md/security"
)

// streamChunks are the corpus's stream chunks in a realistic order: role,
// content deltas, a tool call's start and argument fragments, finish, and
// a usage-only chunk.
var streamChunks = []string{
	"stream-chunk-01.json", "stream-chunk-02.json", "stream-chunk-03.json", "stream-chunk-04.json",
	"stream-chunk-05.json", "stream-chunk-06.json", "stream-chunk-07.json", "stream-chunk-08.json",
	"stream-chunk-09.json", "stream-chunk-10.json", "stream-chunk-11.json", "stream-chunk-12.json",
	"stream-chunk-13.json", "stream-chunk-14.json",
}

// testUpstream is an OpenAI-compatible server replaying the corpus. The
// model of a request chooses its behaviour.
type testUpstream struct {
	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	bodies    [][]byte // request bodies as received, in order
	auth      []string // their Authorization headers
	parents   []string // their traceparent headers
	cancelled chan time.Time
}

const upstreamKey = "sk-upstream-secret-0123456789"

func newTestUpstream(t testing.TB) *testUpstream {
	u := &testUpstream{t: t, cancelled: make(chan time.Time, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", u.chat)
	mux.HandleFunc("POST /v1/responses", u.responses)
	mux.HandleFunc("POST /v1/completions", u.completions)
	mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, r *http.Request) {
		u.record(r)
		w.Header().Set("Content-Type", "application/json")
		w.Write(corpus(t, "resp-embeddings-01.json"))
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1,"owned_by":"test"}]}`)
	})
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The headers an OpenAI server sends with every answer; those a
		// client reads cross the mesh, the others stay.
		h := w.Header()
		h.Set("X-Request-Id", "req_"+r.URL.Path)
		h.Set("Openai-Processing-Ms", "87")
		h.Set("X-Ratelimit-Limit-Requests", "10000")
		h.Set("X-Ratelimit-Remaining-Tokens", "29985")
		h.Set("Openai-Organization", "org-secret")
		h.Set("Set-Cookie", "__cf_bm=secret")
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *testUpstream) record(r *http.Request) []byte {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		u.t.Errorf("upstream read: %v", err)
	}
	u.mu.Lock()
	u.bodies = append(u.bodies, b)
	u.auth = append(u.auth, r.Header.Get("Authorization"))
	u.parents = append(u.parents, r.Header.Get("traceparent"))
	u.mu.Unlock()
	return b
}

func (u *testUpstream) last() ([]byte, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.bodies) == 0 {
		return nil, ""
	}
	return u.bodies[len(u.bodies)-1], u.auth[len(u.auth)-1]
}

func (u *testUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.bodies)
}

func (u *testUpstream) chat(w http.ResponseWriter, r *http.Request) {
	body := u.record(r)
	model := modelOf(body)
	stream := bytes.Contains(body, []byte(`"stream":true`))
	switch {
	case model == "rate-limited":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write(corpus(u.t, "resp-error-02.json"))
	case model == "rate-limited-forever":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "99999999")
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write(corpus(u.t, "resp-error-02.json"))
	case model == "context-too-long":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(corpus(u.t, "resp-error-01.json"))
	case model == "hang":
		<-r.Context().Done()
	case model == "broken":
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	case model == "slow-stream":
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 500; i++ {
			fmt.Fprintf(w, "data: %s\n\n", corpus(u.t, streamChunks[1+i%10]))
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				u.cancelled <- time.Now()
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	case model == "endless-stream":
		// Large events until the request is cancelled.
		w.Header().Set("Content-Type", "text/event-stream")
		event := fmt.Sprintf(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"endless-stream","choices":[{"index":0,"delta":{"content":%q}}]}`+"\n\n", strings.Repeat("x", 16<<10))
		for {
			io.WriteString(w, event)
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				u.cancelled <- time.Now()
				return
			case <-time.After(time.Millisecond):
			}
		}
	case model == "burst-stream":
		// Every event at once: the upstream agent relays them as batches.
		var sse bytes.Buffer
		for _, name := range streamChunks {
			fmt.Fprintf(&sse, "data: %s\n\n", corpus(u.t, name))
		}
		sse.WriteString("data: [DONE]\n\n")
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(sse.Bytes())
	case model == "long-stream":
		// 5000 one-token chunks at once, without usage.
		var sse bytes.Buffer
		for range 5000 {
			sse.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"long-stream","choices":[{"index":0,"delta":{"content":"x"}}]}` + "\n\n")
		}
		sse.WriteString("data: [DONE]\n\n")
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(sse.Bytes())
	case model == "burst-then-broken":
		// Every event at once, then the end of the body without [DONE].
		w.Header().Set("Content-Type", "text/event-stream")
		for _, name := range streamChunks {
			fmt.Fprintf(w, "data: %s\n\n", corpus(u.t, name))
		}
	case stream:
		w.Header().Set("Content-Type", "text/event-stream")
		for _, name := range streamChunks {
			fmt.Fprintf(w, "data: %s\n\n", corpus(u.t, name))
			http.NewResponseController(w).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Write(corpus(u.t, "resp-toolcalls-01.json"))
	}
}

func modelOf(body []byte) string {
	_, rest, ok := bytes.Cut(body, []byte(`"model":"`))
	if !ok {
		return ""
	}
	m, _, _ := bytes.Cut(rest, []byte(`"`))
	return string(m)
}

// edges runs a real daemon, the OpenAI ingress beside it (wired as m2md
// serve wires it), and an upstream agent in front of the test upstream.
type edges struct {
	d        *testDaemon
	in       *ingress.Ingress
	base     string // the ingress's URL
	upstream *testUpstream
	agent    *client.Client
}

var edgeModels = []string{"gpt-4o", "gpt-4o-mini", "text-embedding-3-small", "rate-limited", "context-too-long", "hang", "broken", "slow-stream", "burst-stream", "burst-then-broken", "endless-stream", "rate-limited-forever", "chat-only", "responses-truncated", "long-stream"}

func startEdges(t *testing.T, tr string, mode frame.Security, keys *ingress.Keys, mutate func(*daemon.Config)) *edges {
	t.Helper()
	return startEdgesWith(t, tr, mode, keys, mutate, nil)
}

// startEdgesWith is startEdges with the ingress serving through its own
// Serve under limits, as m2md serve runs it, when limits is not nil.
// Each of configure changes the ingress's Config before it starts.
func startEdgesWith(t *testing.T, tr string, mode frame.Security, keys *ingress.Keys, mutate func(*daemon.Config), limits *ingress.Limits, configure ...func(*ingress.Config)) *edges {
	t.Helper()
	e := &edges{d: startDaemon(t, mutate), upstream: newTestUpstream(t)}
	up, err := upstream.New(upstream.Config{
		BaseURL: e.upstream.srv.URL + "/v1", APIKey: upstreamKey,
		FirstByteTimeout: 300 * time.Millisecond, ChunkTimeout: 2 * time.Second,
		Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	e.agent = dialClient(t, e.d.url(tr), client.Options{
		AgentID: "upstream-" + tr, Models: edgeModels, Handler: up, Security: mode, TLSConfig: e.d.clientTLS(t),
	})
	e.in, e.base = serveIngressWith(t, e.d, tr, mode, keys, limits, configure...)
	return e
}

// serveIngress runs an OpenAI ingress beside daemon d, as m2md serve wires
// it (its cluster node id included), on an HTTP test server; it returns the
// ingress and its URL.
func serveIngress(t *testing.T, d *testDaemon, tr string, mode frame.Security, keys *ingress.Keys) (*ingress.Ingress, string) {
	t.Helper()
	return serveIngressWith(t, d, tr, mode, keys, nil)
}

// serveIngressWith is serveIngress; with limits, the ingress serves
// through its own Serve (connection caps, idle deadline) under them.
func serveIngressWith(t *testing.T, d *testDaemon, tr string, mode frame.Security, keys *ingress.Keys, limits *ingress.Limits, configure ...func(*ingress.Config)) (*ingress.Ingress, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lim ingress.Limits
	if limits != nil {
		lim = *limits
	}
	cfg := ingress.Config{
		Keys: keys, Models: d.Models, Node: d.Cluster().Node, Logger: testLogger(t), Limits: lim,
		Dial: func(ctx context.Context, id ingress.Identity) (*client.Client, error) {
			return client.Dial(ctx, d.url(tr), client.Options{AgentID: id.AgentID, Security: mode, TLSConfig: d.clientTLS(t), Reconnect: true})
		},
	}
	for _, f := range configure {
		f(&cfg)
	}
	in, err := ingress.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if limits != nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- in.Serve(ln) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			in.Shutdown(ctx)
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
			in.Close()
			http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		})
		return in, "http://" + ln.Addr().String()
	}
	srv := httptest.NewServer(in)
	t.Cleanup(func() {
		srv.Close()
		in.Close()
		// The SDK and http.Post use the default transport's pool.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return in, srv.URL
}

func (e *edges) sdk(key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(e.base + "/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
	}, opts...)...)
}

// sentBodies records the bodies the SDK sends.
type sentBodies struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (s *sentBodies) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	if req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(b))
		s.mu.Lock()
		s.bodies = append(s.bodies, b)
		s.mu.Unlock()
	}
	return next(req)
}

func (s *sentBodies) last() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[len(s.bodies)-1]
}

func chatParams(model string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris? Use the tool.")},
	}
}

// The OpenAI Go SDK against the ingress, through m2md upstream, to the test
// upstream: every answer byte for byte, in every security mode.
func TestOpenAIEdges(t *testing.T) {
	for _, tr := range transports {
		for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
			t.Run(tr+"/"+mode.String(), func(t *testing.T) {
				e := startEdges(t, tr, mode, nil, nil)
				var sent sentBodies
				c := e.sdk("any", option.WithMiddleware(sent.middleware))
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()

				// Chat with tools, not streamed: the upstream's body byte for byte.
				params := chatParams("gpt-4o")
				params.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
					Name: "get_weather", Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
				})}
				resp, err := c.Chat.Completions.New(ctx, params)
				if err != nil {
					t.Fatal(err)
				}
				if resp.RawJSON() != string(corpus(t, "resp-toolcalls-01.json")) {
					t.Fatalf("response differs from the upstream's:\n%s", resp.RawJSON())
				}
				if len(resp.Choices) == 0 || len(resp.Choices[0].Message.ToolCalls) == 0 {
					t.Fatalf("SDK did not parse the tool calls: %+v", resp.Choices)
				}
				got, auth := e.upstream.last()
				if !bytes.Equal(got, sent.last()) {
					t.Fatalf("upstream got\n%s\nSDK sent\n%s", got, sent.last())
				}
				if auth != "Bearer "+upstreamKey {
					t.Fatalf("upstream got Authorization %q, want the agent's own key", auth)
				}

				// Streamed: every chunk byte for byte, in order, then [DONE];
				// flushed event by event, or written at once and relayed in
				// batches (feature batch: fewer replies than chunks).
				for _, model := range []string{"gpt-4o-mini", "burst-stream"} {
					params = chatParams(model)
					params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
					frames := e.agent.Stats().FramesSent
					st := c.Chat.Completions.NewStreaming(ctx, params)
					i := 0
					var acc openai.ChatCompletionAccumulator
					for st.Next() {
						ch := st.Current()
						if i >= len(streamChunks) || ch.RawJSON() != string(corpus(t, streamChunks[i])) {
							t.Fatalf("%s: chunk %d differs:\n%s", model, i, ch.RawJSON())
						}
						acc.AddChunk(ch)
						i++
					}
					if err := st.Err(); err != nil || i != len(streamChunks) {
						t.Fatalf("%s: %d chunks, err %v", model, i, err)
					}
					if acc.Usage.TotalTokens == 0 {
						t.Fatal("usage chunk lost")
					}
					if got, _ := e.upstream.last(); !bytes.Equal(got, sent.last()) {
						t.Fatal("streamed request not byte for byte")
					}
					if n := e.agent.Stats().FramesSent - frames; model == "burst-stream" && n > uint64(len(streamChunks)/2) {
						t.Fatalf("%d replies for %d chunks written at once: not batched", n, len(streamChunks))
					}
				}

				// Embeddings.
				emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
					Model: "text-embedding-3-small", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello mesh")},
				})
				if err != nil {
					t.Fatal(err)
				}
				if emb.RawJSON() != string(corpus(t, "resp-embeddings-01.json")) || len(emb.Data) == 0 {
					t.Fatal("embeddings differ")
				}
				if got, _ := e.upstream.last(); !bytes.Equal(got, sent.last()) {
					t.Fatal("embeddings request not byte for byte")
				}

				// Corpus requests as raw bytes: tools, vision, a long
				// conversation, 100 KB, below the 100-byte threshold, and a
				// streamed one whose whole SSE body is checked.
				var sse bytes.Buffer
				for _, name := range streamChunks {
					sse.WriteString("data: " + string(corpus(t, name)) + "\n\n")
				}
				sse.WriteString("data: [DONE]\n\n")
				for _, name := range []string{"req-tools-1k-01.json", "req-tools-4k-01.json", "req-vision-02.json",
					"req-multiturn-16k-01.json", "req-long-100k-01.json", "req-chat-tiny-08.json", "req-stream-01.json"} {
					body := corpus(t, name)
					r, err := http.Post(e.base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					out, _ := io.ReadAll(r.Body)
					r.Body.Close()
					if got, _ := e.upstream.last(); !bytes.Equal(got, body) {
						t.Fatalf("%s: upstream got other bytes", name)
					}
					want, ctype := corpus(t, "resp-toolcalls-01.json"), "application/json"
					if bytes.Contains(body, []byte(`"stream":true`)) {
						want, ctype = sse.Bytes(), "text/event-stream"
					}
					if r.StatusCode != 200 || r.Header.Get("Content-Type") != ctype || !bytes.Equal(out, want) {
						t.Fatalf("%s: HTTP %d %s:\n%s", name, r.StatusCode, r.Header.Get("Content-Type"), out)
					}
				}
			})
		}
	}
}

func TestOpenAIModels(t *testing.T) {
	e := startEdges(t, "quic", frame.SecurityNone, nil, nil)
	c := e.sdk("any")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	page, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	want := append([]string(nil), edgeModels...)
	sortStrings(want)
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("models %q, want %q", ids, want)
	}
	// GET /v1/models/{id}: a served model's object, 404 for another.
	m, err := c.Models.Get(ctx, "gpt-4o")
	if err != nil || m.ID != "gpt-4o" || m.Object != "model" || m.OwnedBy != "m2md" {
		t.Fatalf("GET /v1/models/gpt-4o: %+v %v", m, err)
	}
	_, err = c.Models.Get(ctx, "nobody-serves-this")
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Code != "model_not_found" {
		t.Fatalf("GET /v1/models/nobody-serves-this: %v", err)
	}
	// The agent leaves: its models go within seconds.
	e.agent.Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("models still listed 3 s after the agent left: %d", len(page.Data))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sortStrings(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

// Every error mapping, as the SDK sees it.
func TestOpenAIErrors(t *testing.T) {
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, func(c *daemon.Config) {})
	c := e.sdk("any")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		model      string
		stream     bool
		status     int
		code       string
		body       string // exact body, when the upstream's passes through
		retryAfter string // the Retry-After the client must see
	}{
		{model: "no-such-model", status: 404, code: "model_not_found"},
		{model: "no-such-model", stream: true, status: 404, code: "model_not_found"},
		{model: "rate-limited", status: 429, code: "rate_limit_exceeded", body: "resp-error-02.json", retryAfter: "7"},
		{model: "context-too-long", stream: true, status: 400, code: "context_length_exceeded", body: "resp-error-01.json"},
		{model: "hang", status: 504, code: string(m2mopenai.CodeUpstreamTimeout)},
		{model: "hang", stream: true, status: 504, code: string(m2mopenai.CodeUpstreamTimeout)},
		{model: "broken", status: 502, code: string(m2mopenai.CodeUpstreamUnavailable)},
	} {
		t.Run(fmt.Sprintf("%s/stream=%t", tc.model, tc.stream), func(t *testing.T) {
			before := e.upstream.count()
			var hresp *http.Response
			var err error
			if tc.stream {
				st := c.Chat.Completions.NewStreaming(ctx, chatParams(tc.model), option.WithResponseInto(&hresp))
				for st.Next() {
					t.Fatal("a chunk from a failed request")
				}
				err = st.Err()
			} else {
				_, err = c.Chat.Completions.New(ctx, chatParams(tc.model), option.WithResponseInto(&hresp))
			}
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err %v, want an *openai.Error", err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Code != tc.code {
				t.Fatalf("HTTP %d code %q, want %d %q (%s)", apiErr.StatusCode, apiErr.Code, tc.status, tc.code, apiErr.RawJSON())
			}
			if tc.body != "" && apiErr.RawJSON() != string(corpus(t, tc.body)) {
				// The SDK keeps the "error" member; compare the whole body.
				if !strings.Contains(string(corpus(t, tc.body)), apiErr.RawJSON()) {
					t.Fatalf("body %s is not the upstream's", apiErr.RawJSON())
				}
			}
			if got := apiErr.Response.Header.Get("Retry-After"); got != tc.retryAfter {
				t.Fatalf("Retry-After %q, want %q (the upstream's)", got, tc.retryAfter)
			}
			if tc.model == "no-such-model" && e.upstream.count() != before {
				t.Fatal("an unknown model reached the upstream")
			}
		})
	}

	// Bad JSON and over the limit: 400, from the ingress itself.
	for _, body := range [][]byte{[]byte(`{"model":`), []byte(`{"messages":[]}`), []byte(`["gpt-4o"]`), []byte(`{"model":4}`),
		[]byte(`{"model":"gpt-4o","messages":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`), bytes.Repeat([]byte("x"), 17<<20)} {
		r, err := http.Post(e.base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 400 || !bytes.Contains(out, []byte(`"type":"invalid_request_error"`)) {
			t.Fatalf("HTTP %d %s", r.StatusCode, out)
		}
	}

	// The provider goes away mid-request: 502.
	gone := make(chan struct{})
	prov := dialClient(t, e.d.url("quic"), client.Options{
		AgentID: "leaver", Models: []string{"leaving-model"}, Security: frame.SecurityAEAD, TLSConfig: e.d.clientTLS(t),
		Handler: client.HandlerFunc(func(ctx context.Context, r *client.Request, w client.ResponseWriter) {
			close(gone)
			<-ctx.Done()
		}),
	})
	go func() { <-gone; prov.Close() }()
	_, err := c.Chat.Completions.New(ctx, chatParams("leaving-model"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 502 {
		t.Fatalf("provider gone: %v", err)
	}

	// At MaxOutstanding 1 a held request fills both the provider's
	// deliveries and its API key's session's requests. Another key's
	// request finds the provider busy: 503 provider_busy. The same key's
	// finds its own session full: 429 too_many_requests. Both with
	// Retry-After.
	keys, err := ingress.ParseKeys(strings.NewReader("sk-hold-123456789 holder\nsk-other-12345678 other\n"), "keys")
	if err != nil {
		t.Fatal(err)
	}
	busy := startEdges(t, "ws", frame.SecurityNone, keys, func(c *daemon.Config) { c.MaxOutstanding = 1 })
	hold := make(chan struct{})
	dialClient(t, busy.d.url("ws"), client.Options{
		AgentID: "slowpoke", Models: []string{"slow-model"}, TLSConfig: busy.d.clientTLS(t),
		Handler: client.HandlerFunc(func(ctx context.Context, r *client.Request, w client.ResponseWriter) {
			select {
			case <-hold:
			case <-ctx.Done():
			}
			w.Respond([]byte(`{"ok":true}`))
		}),
	})
	post := func(key string) (*http.Response, []byte, error) {
		req, err := http.NewRequest("POST", busy.base+"/v1/chat/completions", strings.NewReader(`{"model":"slow-model","messages":[]}`))
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer r.Body.Close()
		out, err := io.ReadAll(r.Body)
		return r, out, err
	}
	held := make(chan error, 1)
	go func() {
		r, out, err := post("sk-hold-123456789")
		if err == nil && r.StatusCode != 200 {
			err = fmt.Errorf("held request: HTTP %d %s", r.StatusCode, out)
		}
		held <- err
	}()
	waitOutstanding(t, busy.d, 1)
	for _, tc := range []struct {
		key    string
		status int
		code   string
	}{
		{"sk-other-12345678", 503, "provider_busy"},
		{"sk-hold-123456789", 429, "too_many_requests"},
	} {
		r, out, err := post(tc.key)
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCode != tc.status || !bytes.Contains(out, []byte(`"code":"`+tc.code+`"`)) || r.Header.Get("Retry-After") == "" {
			t.Fatalf("busy, key %s: HTTP %d Retry-After %q %s, want %d %s", tc.key, r.StatusCode, r.Header.Get("Retry-After"), out, tc.status, tc.code)
		}
	}
	close(hold)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}

func TestOpenAIKeys(t *testing.T) {
	keys, err := ingress.ParseKeys(strings.NewReader("# test keys\nsk-alice-12345678 alice\nsk-bob-123456789 bob\n"), "keys")
	if err != nil {
		t.Fatal(err)
	}
	e := startEdges(t, "quic", frame.SecurityHMAC, keys, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, key := range []string{"", "sk-wrong-12345678"} {
		c := e.sdk(key)
		_, err := c.Chat.Completions.New(ctx, chatParams("gpt-4o"))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
			t.Fatalf("key %q: %v", key, err)
		}
	}
	alice, bob := e.sdk("sk-alice-12345678"), e.sdk("sk-bob-123456789")
	if _, err := alice.Chat.Completions.New(ctx, chatParams("gpt-4o")); err != nil {
		t.Fatal(err)
	}
	if _, auth := e.upstream.last(); auth != "Bearer "+upstreamKey {
		t.Fatalf("the client's key reached the upstream: %q", auth)
	}
	if _, err := bob.Models.List(ctx); err != nil {
		t.Fatal(err)
	}
}

// The SDK client aborts in the middle of a stream: the upstream sees its
// request cancelled within 1 s, the daemon's outstanding count returns to
// zero, and nothing leaks.
func TestOpenAICancelMidStream(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			// Registered first, so it runs after every other cleanup: the
			// daemon, the edges and the upstream are gone by then.
			base := len(ourGoroutines())
			t.Cleanup(func() { expectGoroutinesBack(t, base) })
			{
				e := startEdges(t, tr, frame.SecurityAEAD, nil, nil)
				c := e.sdk("any")
				ctx, cancel := context.WithCancel(context.Background())
				st := c.Chat.Completions.NewStreaming(ctx, chatParams("slow-stream"))
				for range 5 {
					if !st.Next() {
						t.Fatalf("stream ended early: %v", st.Err())
					}
				}
				aborted := time.Now()
				cancel()
				st.Close()
				select {
				case at := <-e.upstream.cancelled:
					if dt := at.Sub(aborted); dt > time.Second {
						t.Fatalf("upstream saw the cancel after %v", dt)
					}
				case <-time.After(2 * time.Second):
					t.Fatal("upstream request not cancelled within 2 s")
				}
				waitOutstanding(t, e.d, 0)
				if n := metric(t, e.d, "m2md_cancels_total", "result=forwarded"); n != 1 {
					t.Fatalf("m2md_cancels_total{result=forwarded} = %v", n)
				}
			}
		})
	}
}

// With org secrets, each key acts as an agent of its org: requests and
// /v1/models stay inside that org.
// A stream that fails after its chunks arrived together: the HTTP client
// gets every chunk, in order, then the error as an event, and no [DONE]
// (the ingress writes the events it holds before the error).
// Config.Timeout bounds each wait for a reply, not a whole stream: a
// stream whose chunks keep coming outlives it.
func TestOpenAIStreamOutlivesTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	e := startEdgesWith(t, "quic", frame.SecurityAEAD, nil, nil, nil, func(c *ingress.Config) { c.Timeout = timeout })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := e.sdk("any")
	st := c.Chat.Completions.NewStreaming(ctx, chatParams("slow-stream"))
	defer st.Close()
	start, n := time.Now(), 0
	// slow-stream sends a chunk every 20 ms for 10 s.
	for time.Since(start) < 4*timeout {
		if !st.Next() {
			t.Fatalf("stream ended after %d chunks, %v (Timeout %v): %v", n, time.Since(start), timeout, st.Err())
		}
		n++
	}
}

func TestOpenAIStreamFailsAfterBurst(t *testing.T) {
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	var want bytes.Buffer
	for _, name := range streamChunks {
		fmt.Fprintf(&want, "data: %s\n\n", corpus(t, name))
	}
	for range 5 {
		r, err := http.Post(e.base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"burst-then-broken","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || !bytes.HasPrefix(out, want.Bytes()) {
			t.Fatalf("HTTP %d, %d bytes, want the %d chunks' %d bytes first:\n%.300s", r.StatusCode, len(out), len(streamChunks), want.Len(), out)
		}
		rest := string(out[want.Len():])
		if !strings.HasPrefix(rest, `data: {"error":`) || !strings.Contains(rest, "without [DONE]") || strings.Contains(rest, "data: [DONE]") {
			t.Fatalf("after the chunks: %q", rest)
		}
	}
}

func TestOpenAIOrgs(t *testing.T) {
	acme, other := security.Secret(bytes.Repeat([]byte{1}, 32)), security.Secret(bytes.Repeat([]byte{2}, 32))
	d := startDaemon(t, func(c *daemon.Config) {
		c.OrgSecrets = map[string]security.Secret{"acme": acme, "other": other}
	})
	up := newTestUpstream(t)
	u, err := upstream.New(upstream.Config{BaseURL: up.srv.URL + "/v1", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	dialClient(t, d.url("quic"), client.Options{AgentID: "up-acme", Org: "acme", OrgSecret: acme, Models: []string{"gpt-4o"},
		Handler: u, Security: frame.SecurityAEAD, TLSConfig: d.clientTLS(t)})
	dialClient(t, d.url("quic"), client.Options{AgentID: "up-other", Org: "other", OrgSecret: other, Models: []string{"gpt-4o-mini"},
		Handler: u, Security: frame.SecurityAEAD, TLSConfig: d.clientTLS(t)})
	keys, err := ingress.ParseKeys(strings.NewReader("sk-acme-12345678 alice acme\nsk-other-1234567 bob other\n"), "keys")
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]security.Secret{"acme": acme, "other": other}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, err := ingress.New(ctx, ingress.Config{Keys: keys, Models: d.Models, Logger: testLogger(t),
		Dial: func(ctx context.Context, id ingress.Identity) (*client.Client, error) {
			return client.Dial(ctx, d.url("quic"), client.Options{AgentID: id.AgentID, Org: id.Org, OrgSecret: secrets[id.Org],
				Security: frame.SecurityAEAD, TLSConfig: d.clientTLS(t)})
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(in)
	t.Cleanup(func() { srv.Close(); in.Close(); http.DefaultTransport.(*http.Transport).CloseIdleConnections() })
	e := &edges{d: d, in: in, base: srv.URL, upstream: up}
	for _, tc := range []struct {
		key, own, foreign string
	}{{"sk-acme-12345678", "gpt-4o", "gpt-4o-mini"}, {"sk-other-1234567", "gpt-4o-mini", "gpt-4o"}} {
		c := e.sdk(tc.key)
		page, err := c.Models.List(ctx)
		if err != nil || len(page.Data) != 1 || page.Data[0].ID != tc.own {
			t.Fatalf("%s: models %+v %v", tc.key, page, err)
		}
		if _, err := c.Chat.Completions.New(ctx, chatParams(tc.own)); err != nil {
			t.Fatalf("%s: own model: %v", tc.key, err)
		}
		_, err = c.Chat.Completions.New(ctx, chatParams(tc.foreign))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Fatalf("%s: another org's model: %v", tc.key, err)
		}
	}
}
