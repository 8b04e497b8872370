package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/internal/daemontest"
)

// serve's ingress holds its session on the daemon's own plain WebSocket
// listener when it runs (cheaper than QUIC for a session that never leaves
// the machine), else on QUIC, and serves through it either way.
func TestServeOpenAISession(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		mutate     func(*daemon.Config)
	}{
		{"both listeners", "ws", nil},
		{"QUIC only", "quic", func(c *daemon.Config) { c.WSAddr = "-" }},
		{"WebSocket only", "ws", func(c *daemon.Config) { c.QUICAddr = "-" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := daemontest.Start(t, tc.mutate)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			e, err := startOpenAI(ctx, d.Server, daemon.Config{WSPath: daemon.DefaultWSPath}, "127.0.0.1:0", nil, zerolog.New(io.Discard))
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
				has                string
			}{
				{http.MethodGet, "/models", "", 200, `"object":"list"`},
				{http.MethodPost, "/chat/completions", `{"model":"nobody-serves-this","messages":[{"role":"user","content":"hi"}]}`, 404, "model_not_found"},
			} {
				req, _ := http.NewRequestWithContext(ctx, r.method, base+r.path, strings.NewReader(r.body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != r.status || !strings.Contains(string(out), r.has) {
					t.Errorf("%s %s: HTTP %d %s", r.method, r.path, resp.StatusCode, out)
				}
			}
		})
	}
}
