package client

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/daemontest"
	"github.com/m2md/m2md/internal/testkit"
)

var transports = []string{"quic", "ws"}

func testCtx(t testing.TB) context.Context { return testkit.Context(t, testTimeout) }

// dial connects a client to d over transport tr; it is closed at cleanup.
// testDaemon is a daemon the tests dial: the real one (startDaemon) or, where
// a test needs the daemon to misbehave or to observe its internals, the
// fake (newFakeDaemon).
type testDaemon interface {
	url(tr string) string
	fingerprint() string
}

// realDaemon is the real daemon, in-process on loopback, with the "models"
// agent's requests to the hang model.
type realDaemon struct {
	*daemontest.Daemon
	held *heldRequests
}

// heldRequests are the hang model's requests, answered on release.
type heldRequests struct {
	mu      sync.Mutex
	n       int
	release chan struct{}
	once    sync.Once
}

func (h *heldRequests) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// waitHeld waits until n requests to the hang model have reached the agent.
func (d realDaemon) waitHeld(t testing.TB, n int) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); d.held.count() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests held, want %d", d.held.count(), n)
		}
	}
}

// releaseHeld lets the hang model answer every request it holds, and the
// later ones at once.
func (d realDaemon) releaseHeld() { d.held.once.Do(func() { close(d.held.release) }) }

// startDaemon runs the real daemon until the test ends, with an agent
// "models" connected that serves the test models:
//
//	echo    the request's JSON back as the final reply
//	stream  max_tokens chunks {"i":k}, the last one the final reply
//	error   an error reply with code "test_error" and message "boom"
//	hang    no reply until releaseHeld (even when the request is cancelled),
//	        then {"released":true}
//
// Call leakCheck first, so that the leak check runs after the daemon has
// stopped.
func startDaemon(t testing.TB) realDaemon { return startDaemonWith(t, nil, Options{}) }

// startDaemonWith is startDaemon with the daemon's configuration adjusted
// by mutate, and the "models" agent dialled with models (its org, say); it
// asks for aead, which any MinSecurity allows.
func startDaemonWith(t testing.TB, mutate func(*daemon.Config), models Options) realDaemon {
	d := realDaemon{daemontest.Start(t, mutate), &heldRequests{release: make(chan struct{})}}
	models.AgentID, models.Models, models.Security = "models", []string{"echo", "stream", "error", "hang"}, frame.SecurityAEAD
	models.Handler = HandlerFunc(d.serveTestModel)
	dial(t, d, "ws", models)
	t.Cleanup(d.releaseHeld) // before the daemon stops: it waits for them
	return d
}

// sameCert configures daemons to share one certificate, as a cluster's
// nodes or a restarted daemon do, so that a pinned client trusts each.
func sameCert(t testing.TB) func(*daemon.Config) {
	dir := t.TempDir()
	return func(c *daemon.Config) { c.CertDir = dir }
}

// crash drops every connection of d without CLOSE, the way a killed
// daemon's connections go, and waits until it has stopped.
func (d realDaemon) crash(t testing.TB) {
	t.Helper()
	d.Crash()
	if ok, err := d.Wait(testTimeout); !ok || err != nil {
		t.Fatalf("crashed daemon: stopped %v, %v", ok, err)
	}
}

// restart starts a daemon (with its "models" agent) on the addresses of
// old, which has stopped; cert must be the sameCert old was started with.
func restart(t testing.TB, old realDaemon, cert func(*daemon.Config)) realDaemon {
	t.Helper()
	return startDaemonWith(t, func(c *daemon.Config) {
		cert(c)
		c.QUICAddr, c.WSAddr = old.QUICAddr().String(), old.WSAddr().String()
	}, Options{})
}

// waitSession waits until c has a session other than was that d serves.
func waitSession(t testing.TB, c *Client, d realDaemon, was string) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(5 * time.Millisecond) {
		if id := c.Session().ID; id != "" && id != was && d.SessionOpen(id) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new session (was %q, now %q)", was, c.Session().ID)
		}
	}
}

func (d realDaemon) serveTestModel(ctx context.Context, req *Request, w ResponseWriter) {
	switch req.Model {
	case "hang":
		d.held.mu.Lock()
		d.held.n++
		d.held.mu.Unlock()
		select {
		case <-d.held.release:
			w.Respond([]byte(`{"released":true}`))
		case <-time.After(testTimeout):
		}
	case "echo":
		w.Respond(req.Body)
	case "stream":
		var r struct {
			MaxTokens int `json:"max_tokens"`
		}
		json.Unmarshal(req.Body, &r)
		for i := range r.MaxTokens - 1 {
			if w.Chunk(fmt.Appendf(nil, `{"i":%d}`, i)) != nil {
				return
			}
		}
		w.Respond(fmt.Appendf(nil, `{"i":%d}`, r.MaxTokens-1))
	case "error":
		w.Error("test_error", "boom")
	}
}

func (d realDaemon) url(tr string) string { return d.URL(tr) }
func (d realDaemon) fingerprint() string  { return d.Fingerprint() }

func dial(t testing.TB, d testDaemon, tr string, opts Options) *Client {
	t.Helper()
	if opts.PinSHA256 == "" && opts.TLSConfig == nil {
		opts.PinSHA256 = d.fingerprint()
	}
	if os.Getenv("M2MD_TEST_LOG") != "" {
		opts.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	c, err := Dial(testCtx(t), d.url(tr), opts)
	if err != nil {
		t.Fatalf("Dial %s: %v", tr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// chatRequest is a small request for model.
func chatRequest(model, content string) []byte {
	return []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"` + content + `"}]}`)
}
