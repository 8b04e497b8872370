package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/internal/daemontest"
	"github.com/m2md/m2md/negotiate"
)

// TestProviderProcessKilled: an `m2md upstream` provider process killed
// with SIGKILL while it streams one answer and holds a second request it
// has not begun to answer (its model server is slow) is noticed by the
// daemon with default settings on both transports. The streamed request
// ends with agent_gone within 5 s, saying how much was delivered; the
// other is failed over to a second upstream and answered there within
// 5 s. Over WebSocket the kernel's FIN tells the daemon at once; over
// QUIC nobody sends CONNECTION_CLOSE and the busy liveness check (1 s +
// 3 s) notices the silence.
func TestProviderProcessKilled(t *testing.T) {
	for _, tr := range []string{"ws", "quic"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			certDir := t.TempDir()
			d := daemontest.Start(t, func(c *daemon.Config) { c.CertDir = certDir })
			url := d.URL(tr)
			held := make(chan bool, 2)
			slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var doc struct {
					Stream bool `json:"stream"`
				}
				_ = json.NewDecoder(r.Body).Decode(&doc)
				if doc.Stream {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprintf(w, "data: %s\n\n", demoChunk("gpt-4o", 0, "Thinking "))
					w.(http.Flusher).Flush()
				}
				held <- doc.Stream
				<-r.Context().Done() // the model thinks until its agent is gone
			}))
			defer slow.Close()
			fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(demoCompletion("gpt-4o", "answered by the second upstream", 3))
			}))
			defer fast.Close()
			upstreamArgs := func(agent, base string) []string {
				return []string{"upstream", "--url", url, "--cert", filepath.Join(certDir, "cert.pem"),
					"--agent", agent, "--models", "gpt-4o", "--base-url", base, "--log-format", "json"}
			}
			first := startM2MD(t, t.TempDir(), upstreamArgs("kill-first", slow.URL)...)
			first.waitOutput(`upstream agent kill-first serving`, 30*time.Second)

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			req, err := client.Dial(ctx, url, client.Options{AgentID: "kill-req", InsecureSkipVerifyDevOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer req.Close()
			st, err := req.Stream(ctx, chatRequest(true))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := st.Recv(); err != nil {
				t.Fatalf("first chunk: %v", err)
			}
			done := make(chan error, 1)
			var answer *client.Response
			go func() {
				var err error
				answer, err = req.Do(ctx, chatRequest(false))
				done <- err
			}()
			for range 2 {
				select {
				case <-held:
				case <-time.After(30 * time.Second):
					t.Fatal("the slow model server did not get both requests")
				}
			}
			second := startM2MD(t, t.TempDir(), upstreamArgs("kill-second", fast.URL)...)
			second.waitOutput(`upstream agent kill-second serving`, 30*time.Second)

			if err := first.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			_, err = st.Recv()
			el := time.Since(killed)
			var re *client.RemoteError
			if !errors.As(err, &re) || re.Code != negotiate.CodeAgentGone || !strings.Contains(re.Message, "after 1 of its replies") {
				t.Fatalf("the streamed request ended with %v, want agent_gone after 1 reply", err)
			}
			t.Logf("%s: streamed request ended with agent_gone %v after SIGKILL", tr, el)
			if el > 5*time.Second {
				t.Fatalf("agent_gone after %v, want within 5 s", el)
			}
			select {
			case err := <-done:
				el := time.Since(killed)
				if err != nil {
					t.Fatalf("the request not yet answered: %v, want it failed over", err)
				}
				if answer.From != "kill-second" || !strings.Contains(string(answer.Body), "second upstream") {
					t.Fatalf("answered by %q: %s", answer.From, answer.Body)
				}
				t.Logf("%s: unanswered request failed over and answered %v after SIGKILL", tr, el)
				if el > 5*time.Second {
					t.Fatalf("failed over after %v, want within 5 s", el)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the request the killed provider held still waits 30 s on")
			}
			reason := "disconnected"
			if tr == "quic" {
				reason = "unresponsive"
			}
			d.WaitMetric(t, 1, "m2md_failovers_total", "reason="+reason)
			if st := req.Stats(); st.LateReplies != 0 {
				t.Fatalf("%d replies came for requests already ended", st.LateReplies)
			}
		})
	}
}

// chatRequest is a small chat completion request for gpt-4o.
func chatRequest(stream bool) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": "gpt-4o", "stream": stream,
		"messages": []any{map[string]any{"role": "user", "content": "Say something."}},
	})
	return b
}
