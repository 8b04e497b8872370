package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/internal/daemontest"
	"github.com/m2md/m2md/internal/testkit"
	"github.com/m2md/m2md/openai/ingress"
)

// serve's ingress holds its session attached to the daemon in process,
// whichever of the daemon's listeners run, and serves through it.
func TestServeOpenAISession(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		mutate     func(*daemon.Config)
	}{
		{"both listeners", "inproc", nil},
		{"QUIC only", "inproc", func(c *daemon.Config) { c.WSAddr = "-" }},
		{"WebSocket only", "inproc", func(c *daemon.Config) { c.QUICAddr = "-" }},
		{"no mesh listener", "inproc", func(c *daemon.Config) { c.QUICAddr, c.WSAddr = "-", "-" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := daemontest.Start(t, tc.mutate)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			e, err := startOpenAI(ctx, d.Server, daemon.Config{WSPath: daemon.DefaultWSPath}, "127.0.0.1:0", nil, ingress.Limits{}, client.DefaultConversationHistory, zerolog.New(io.Discard))
			if err != nil {
				t.Fatal(err)
			}
			defer e.stop(time.Second)
			if n := d.Metric(t, "m2md_sessions", "transport="+tc.want); n != 1 {
				t.Fatalf("%v ingress sessions over %s, want 1", n, tc.want)
			}
			base := "http://" + e.Addr().String() + "/v1"
			for _, r := range []struct {
				method, path, body string
				status             int
				has, allow         string
			}{
				{http.MethodGet, "/models", "", 200, `"object":"list"`, ""},
				{http.MethodPost, "/chat/completions", `{"model":"nobody-serves-this","messages":[{"role":"user","content":"hi"}]}`, 404, "model_not_found", ""},
				{http.MethodGet, "/chat/completions", "", 405, "method_not_allowed", "POST"},
				{http.MethodPost, "/models", "", 405, "method_not_allowed", "GET"},
				{http.MethodGet, "/no-such-endpoint", "", 404, "unknown_url", ""},
			} {
				req, _ := http.NewRequestWithContext(ctx, r.method, base+r.path, strings.NewReader(r.body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != r.status || !strings.Contains(string(out), r.has) || resp.Header.Get("Allow") != r.allow {
					t.Errorf("%s %s: HTTP %d, Allow %q: %s", r.method, r.path, resp.StatusCode, resp.Header.Get("Allow"), out)
				}
			}
		})
	}
}

// --openai-conversation-history: with the default the endpoint's session
// sends a conversation's second turn as a delta; with 0 it keeps nothing
// and sends every turn whole.
func TestServeOpenAIConversationHistory(t *testing.T) {
	d := daemontest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	answer := `{"id":"chatcmpl-1","object":"chat.completion","model":"hist","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help?"},"finish_reason":"stop"}]}`
	prov, err := client.Dial(ctx, d.URL("ws"), client.Options{AgentID: "hist-provider", Models: []string{"hist"},
		Handler: client.HandlerFunc(func(_ context.Context, _ *client.Request, w client.ResponseWriter) { w.Respond([]byte(answer)) })})
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	turn1 := `{"model":"hist","messages":[{"role":"user","content":"Hi, here is a long question about primes and their distribution."}]}`
	turn2 := `{"model":"hist","messages":[{"role":"user","content":"Hi, here is a long question about primes and their distribution."},{"role":"assistant","content":"Hello! How can I help?"},{"role":"user","content":"Name three primes."}]}`
	var deltas uint64
	for _, tc := range []struct {
		flag string
		want uint64
	}{{"32MiB", 1}, {"0", 0}} {
		var b byteSize
		var history int
		b.p = &history
		if err := b.Set(tc.flag); err != nil {
			t.Fatal(err)
		}
		e, err := startOpenAI(ctx, d.Server, daemon.Config{WSPath: daemon.DefaultWSPath}, "127.0.0.1:0", nil, ingress.Limits{}, conversationBudget(history), zerolog.New(io.Discard))
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{turn1, turn2} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.Addr().String()+"/v1/chat/completions", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(out) != answer {
				t.Fatalf("--openai-conversation-history %s: HTTP %d %s", tc.flag, resp.StatusCode, out)
			}
		}
		e.stop(time.Second)
		got := prov.Stats().DeltasReceived - deltas
		deltas += got
		if got != tc.want {
			t.Errorf("--openai-conversation-history %s: the provider got %d deltas, want %d", tc.flag, got, tc.want)
		}
	}
}

// The endpoint sends short requests uncompressed (openai.CompressFrom):
// the frame a 1,215-byte chat request becomes carries all of its bytes,
// where the reference's Brotli would carry 694.
func TestServeOpenAIStoresPayloads(t *testing.T) {
	d := daemontest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body := bytes.Replace(testkit.CorpusFile(t, "req-chat-1k-01.json"), []byte(`"model"`), []byte(`"model":"stored","original_model"`), 1)
	got := make(chan []byte, 1)
	prov, err := client.Dial(ctx, d.URL("ws"), client.Options{AgentID: "stored-provider", Models: []string{"stored"},
		Handler: client.HandlerFunc(func(_ context.Context, r *client.Request, w client.ResponseWriter) {
			got <- r.Body
			w.Respond(testkit.CorpusFile(t, "resp-chat-01.json"))
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	e, err := startOpenAI(ctx, d.Server, daemon.Config{WSPath: daemon.DefaultWSPath}, "127.0.0.1:0", nil, ingress.Limits{}, -1, zerolog.New(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	defer e.stop(time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.Addr().String()+"/v1/chat/completions", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	if b := <-got; !bytes.Equal(b, body) {
		t.Fatalf("the provider got %d bytes, not the %d sent", len(b), len(body))
	}
	if n := d.Metric(t, "m2md_bytes_in_total", "transport=inproc"); n < float64(len(body)) {
		t.Errorf("the endpoint's request came in %v bytes, fewer than the %d of its JSON: its payload was compressed", n, len(body))
	}
}
