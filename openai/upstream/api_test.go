package upstream

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/openai"
)

// chunks records the stream chunks ServeM2M sends besides replies.
type chunks struct {
	replies
	got []string
}

func (c *chunks) Chunk(b []byte) error { return c.Chunks(b) }
func (c *chunks) Chunks(bs ...[]byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range bs {
		c.got = append(c.got, string(b))
	}
	return nil
}

// Each API byte reaches its endpoint of the server; one it does not know
// never reaches the server.
func TestAPIPath(t *testing.T) {
	var paths []string
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		answer(w, r)
	})
	u := newUpstream(t, Config{BaseURL: srv.URL + "/v1"})
	for _, tc := range []struct {
		api  frame.API
		emb  bool
		path string
	}{
		{frame.APIChat, false, "/v1/chat/completions"},
		{frame.APIResponses, false, "/v1/responses"},
		{frame.APICompletions, false, "/v1/completions"},
		{frame.APIChat, true, "/v1/embeddings"},
	} {
		var r replies
		paths = nil
		u.ServeM2M(context.Background(), &client.Request{From: "a", Model: "m", API: tc.api, Embeddings: tc.emb, Body: []byte(`{"model":"m"}`)}, &r)
		if r.code != "" || len(paths) != 1 || paths[0] != tc.path {
			t.Errorf("API %v: code %q (%s), paths %v; want %s", tc.api, r.code, r.message, paths, tc.path)
		}
	}
	var r replies
	before := srv.count()
	u.ServeM2M(context.Background(), &client.Request{From: "a", Model: "m", API: 0x03, Body: []byte(`{"model":"m"}`)}, &r)
	if r.code != openai.CodeUnsupportedAPI || srv.count() != before {
		t.Fatalf("unknown API byte: code %q (%s), server reached %v", r.code, r.message, srv.count() != before)
	}
}

// A Responses stream is one chunk per event and ends at the end of the
// body after a terminal event (final reply Done); one that ends before, or
// an event without a type, is bad_upstream_reply.
func TestResponsesStream(t *testing.T) {
	const (
		created   = `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress"}}`
		delta     = `{"sequence_number":1,"delta":"Hi","type":"response.output_text.delta"}`
		completed = `{"type":"response.completed","sequence_number":2,"response":{"id":"resp_1","status":"completed"}}`
	)
	event := func(data string) string {
		typ := data[strings.Index(data, `"type":"`)+8:]
		return "event: " + typ[:strings.IndexByte(typ, '"')] + "\ndata: " + data + "\n\n"
	}
	for _, tc := range []struct {
		name   string
		body   string
		chunks int
		code   negotiate.ErrorCode
	}{
		{"complete", event(created) + event(delta) + event(completed), 3, ""},
		{"complete, then [DONE]", event(created) + event(completed) + "data: [DONE]\n\n", 2, ""},
		{"failed", event(created) + event(`{"type":"response.failed","response":{}}`), 2, ""},
		{"no terminal event", event(created) + event(delta), 2, openai.CodeBadUpstreamReply},
		{"[DONE] before the terminal event", event(created) + "data: [DONE]\n\n", 1, openai.CodeBadUpstreamReply},
		{"empty", "", 0, openai.CodeBadUpstreamReply},
		{"event without type", event(created) + "data: {\"delta\":\"x\"}\n\n" + event(completed), 1, openai.CodeBadUpstreamReply},
		{"event not JSON", event(created) + "data: nope\n\n", 1, openai.CodeBadUpstreamReply},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, tc.body)
			})
			u := newUpstream(t, Config{BaseURL: srv.URL + "/v1"})
			var c chunks
			u.ServeM2M(context.Background(), &client.Request{From: "a", Model: "m", Stream: true, API: frame.APIResponses, Body: []byte(`{"model":"m","stream":true}`)}, &c)
			if c.code != tc.code || len(c.got) != tc.chunks {
				t.Fatalf("code %q (%s), %d chunks; want %q, %d", c.code, c.message, len(c.got), tc.code, tc.chunks)
			}
			if tc.code == "" && string(c.final) != openai.Done {
				t.Fatalf("final reply %q", c.final)
			}
		})
	}
}

// A server without the endpoint of a Responses or completions request
// (its own 404 page) is unsupported_api; one that has it and answers 404
// in OpenAI's shape (an unknown model) is passed on.
func TestAPIMissing(t *testing.T) {
	for _, tc := range []struct {
		name string
		api  frame.API
		body string
		code negotiate.ErrorCode
	}{
		{"responses, 404 page", frame.APIResponses, "404 page not found\n", openai.CodeUnsupportedAPI},
		{"completions, 404 page", frame.APICompletions, "404 page not found\n", openai.CodeUnsupportedAPI},
		{"responses, OpenAI's 404", frame.APIResponses, `{"error":{"message":"no such model","type":"invalid_request_error","param":null,"code":"model_not_found"}}`, "upstream_http_404"},
		{"chat, 404 page", frame.APIChat, "404 page not found\n", "upstream_http_404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, tc.body)
			})
			u := newUpstream(t, Config{BaseURL: srv.URL + "/v1"})
			var r replies
			u.ServeM2M(context.Background(), &client.Request{From: "a", Model: "m", API: tc.api, Body: []byte(`{"model":"m"}`)}, &r)
			if r.code != tc.code {
				t.Fatalf("code %q (%s), want %q", r.code, r.message, tc.code)
			}
			if tc.code == openai.CodeUnsupportedAPI && !strings.Contains(r.message, tc.api.String()) {
				t.Fatalf("message %q does not name %s", r.message, tc.api)
			}
		})
	}
}
