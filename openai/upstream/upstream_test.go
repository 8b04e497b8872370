package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/openai"
)

// replies records what ServeM2M answers, as the requester would get it.
type replies struct {
	mu      sync.Mutex
	final   []byte
	code    negotiate.ErrorCode
	message string
}

func (r *replies) Chunk(b []byte) error { return r.Chunks(b) }
func (r *replies) Chunks(...[]byte) error {
	return nil
}
func (r *replies) Respond(b []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.final = append([]byte(nil), b...)
	return nil
}
func (r *replies) Error(code negotiate.ErrorCode, message string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.code, r.message = code, message
	return nil
}

// server is an OpenAI-compatible server that counts the chat requests it
// gets.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	hits int
}

func newServer(t *testing.T, h http.HandlerFunc) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.hits++
		s.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

func answer(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
}

func newUpstream(t *testing.T, cfg Config) *Upstream {
	t.Helper()
	u, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	return u
}

// A body whose model is not the one its request was routed by, or not
// among Config.Models, never reaches the server.
func TestModelChecked(t *testing.T) {
	srv := newServer(t, answer)
	for _, tc := range []struct {
		name   string
		models []string
		routed string
		body   string
		code   negotiate.ErrorCode // "" when served
	}{
		{"routed model", nil, "gpt-4o", `{"model":"gpt-4o","messages":[]}`, ""},
		{"listed model", []string{"gpt-4o"}, "gpt-4o", `{"model":"gpt-4o","messages":[]}`, ""},
		{"escaped, same model", nil, "gpt-4o", `{"model":"gpt\u002d4o","messages":[]}`, ""},
		{"body names another model", []string{"gpt-4o", "o3-pro"}, "gpt-4o", `{"model":"o3-pro","messages":[]}`, negotiate.CodeBadFrame},
		{"last duplicate names another", nil, "gpt-4o", `{"model":"gpt-4o","model":"o3-pro","messages":[]}`, negotiate.CodeBadFrame},
		{"addressed, unlisted model", []string{"gpt-4o"}, "", `{"model":"o3-pro","messages":[]}`, negotiate.CodeNoRoute},
		{"no model", nil, "gpt-4o", `{"messages":[]}`, negotiate.CodeBadFrame},
		{"addressed, models unknown", nil, "", `{"model":"o3-pro","messages":[]}`, negotiate.CodeNoRoute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t, Config{BaseURL: srv.URL + "/v1", Models: tc.models})
			before := srv.count()
			var r replies
			u.ServeM2M(context.Background(), &client.Request{From: "a", Model: tc.routed, Body: []byte(tc.body)}, &r)
			reached := srv.count() > before
			if r.code != tc.code || reached != (tc.code == "") {
				t.Fatalf("code %q (%s), server reached %v; want code %q", r.code, r.message, reached, tc.code)
			}
		})
	}
}

// Without Config.Models, the models GET /models lists are the only ones
// served: a request addressed to the agent (routed by no model) naming
// another never reaches the server.
func TestModelCheckedDiscovered(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
			io.WriteString(w, `{"data":[{"id":"cheap"}]}`)
			return
		}
		answer(w, r)
	})
	u := newUpstream(t, Config{BaseURL: srv.URL + "/v1"})
	if _, err := u.Models(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		routed, model string
		code          negotiate.ErrorCode
	}{
		{"", "cheap", ""},
		{"cheap", "cheap", ""},
		{"", "expensive", negotiate.CodeNoRoute},
		{"expensive", "expensive", negotiate.CodeNoRoute},
	} {
		before := srv.count()
		var r replies
		u.ServeM2M(context.Background(), &client.Request{From: "a", Model: tc.routed, Body: []byte(`{"model":"` + tc.model + `","messages":[]}`)}, &r)
		if reached := srv.count() > before; r.code != tc.code || reached != (tc.code == "") {
			t.Errorf("routed %q, body %q: code %q (%s), server reached %v; want code %q", tc.routed, tc.model, r.code, r.message, reached, tc.code)
		}
	}
}

// A redirect of the server is refused: the key and body never reach the
// place it points to.
func TestRedirectRefused(t *testing.T) {
	elsewhere := newServer(t, answer)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	})
	u := newUpstream(t, Config{BaseURL: srv.URL + "/v1", APIKey: "sk-secret-key-1"})
	var r replies
	u.ServeM2M(context.Background(), &client.Request{From: "a", Model: "m", Body: []byte(`{"model":"m","messages":[]}`)}, &r)
	if r.code != openai.CodeBadUpstreamReply || !strings.Contains(r.message, "redirect") {
		t.Fatalf("code %q: %s", r.code, r.message)
	}
	if _, err := u.Models(context.Background()); err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("GET /models through a redirect: %v", err)
	}
	if n := elsewhere.count(); n != 0 {
		t.Fatalf("the redirect's target got %d requests", n)
	}
}

// Credentials in the base URL (user info, query values) appear in no
// error, log line or URL() the operator sees.
func TestBaseURLRedacted(t *testing.T) {
	const secret = "hunter2-secret"
	var logs bytes.Buffer
	for _, base := range []string{
		"http://alice:" + secret + "@127.0.0.1:1/v1",
		"http://" + secret + "@127.0.0.1:1/v1",
		"http://127.0.0.1:1/v1?api-key=" + secret,
	} {
		u := newUpstream(t, Config{BaseURL: base, Logger: zerolog.New(&logs)})
		if strings.Contains(u.URL(), secret) || !strings.Contains(u.URL(), "127.0.0.1:1/v1") {
			t.Errorf("URL() = %q", u.URL())
		}
		if _, err := u.Models(context.Background()); err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("Models: %v", err)
		}
		var r replies
		u.ServeM2M(context.Background(), &client.Request{From: "a", Model: "m", Body: []byte(`{"model":"m","messages":[]}`)}, &r)
		if r.code != openai.CodeUpstreamUnavailable || strings.Contains(r.message, secret) {
			t.Errorf("reply %q: %s", r.code, r.message)
		}
	}
	if _, err := New(Config{BaseURL: "http://alice:" + secret + "@[::1"}); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("New: %v", err)
	}
	if logs.Len() == 0 || strings.Contains(logs.String(), secret) {
		t.Fatalf("logs: %s", logs.String())
	}
}
