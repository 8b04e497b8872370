// Package daemontest runs the real m2md daemon in-process, on ephemeral
// loopback ports with a fresh development certificate, for the tests of the
// packages that talk to it (client, integration): one way to start and stop
// it, so that no test talks to an imitation that can drift from it.
package daemontest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/internal/daemonhook"
)

// Daemon is a running daemon. Stop (registered as a cleanup by Start)
// shuts it down gracefully.
type Daemon struct {
	*daemon.Server
	cancel context.CancelFunc
	done   chan error
}

// Start runs a daemon with QUIC, ws:// and the admin endpoint on
// 127.0.0.1:0; mutate adjusts the configuration first. It returns once the
// daemon listens.
func Start(t testing.TB, mutate func(*daemon.Config)) *Daemon {
	t.Helper()
	cfg := daemon.Config{
		QUICAddr:  "127.0.0.1:0",
		WSAddr:    "127.0.0.1:0",
		AdminAddr: "127.0.0.1:0",
		CertDir:   t.TempDir(),
		Logger:    Logger(t),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := daemon.New(cfg)
	if err != nil {
		t.Fatalf("daemon.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Daemon{Server: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-d.done:
		t.Fatalf("daemon did not start: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not start in 10 s")
	}
	t.Cleanup(func() { d.Stop(t) })
	return d
}

// Cancel begins the graceful shutdown without waiting for it.
func (d *Daemon) Cancel() { d.cancel() }

// Stop shuts the daemon down gracefully and waits for Run to return.
func (d *Daemon) Stop(t testing.TB) {
	d.cancel()
	select {
	case err, ok := <-d.done:
		if ok && err != nil {
			t.Errorf("daemon Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("daemon did not stop in 30 s")
	}
}

// Wait waits up to timeout for Run to return (after Cancel, or on its
// own) and returns its error; returned is false on timeout. Stop then has
// nothing more to report.
func (d *Daemon) Wait(timeout time.Duration) (returned bool, err error) {
	select {
	case err := <-d.done:
		close(d.done)
		return true, err
	case <-time.After(timeout):
		return false, nil
	}
}

// Crash stops the daemon the way a killed process stops
// (daemonhook.Hooks.Crash); Stop then waits for Run to return.
func (d *Daemon) Crash() { daemonhook.Of(d.Server).Crash() }

// SessionOpen reports whether the daemon still serves the session with
// this id (daemonhook.Hooks.SessionOpen).
func (d *Daemon) SessionOpen(sessionID string) bool {
	return daemonhook.Of(d.Server).SessionOpen(sessionID)
}

// AgentNode reports where the daemon would route a request addressed to
// agentID of org (daemonhook.Hooks.AgentNode).
func (d *Daemon) AgentNode(org, agentID string) (node string, ok bool) {
	return daemonhook.Of(d.Server).AgentNode(org, agentID)
}

// URL is the daemon's address for transport "quic" or "ws".
func (d *Daemon) URL(tr string) string {
	if tr == "quic" {
		return "quic://" + d.QUICAddr().String()
	}
	return "ws://" + d.WSAddr().String() + daemon.DefaultWSPath
}

// Logger discards logs unless M2MD_TEST_LOG is set, then writes them at
// debug level to stderr, tagged with the test's name.
func Logger(t testing.TB) zerolog.Logger {
	if os.Getenv("M2MD_TEST_LOG") == "" {
		return zerolog.New(io.Discard)
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.DebugLevel).With().Str("test", t.Name()).Logger()
}

// Metric is the sum of the daemon's series of name (from its /metrics)
// whose labels include every "key=value" pair in labels; 0 when none
// exists yet.
func (d *Daemon) Metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	body, err := FetchMetrics(d.AdminAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		series, value := line[:sp], line[sp+1:]
		n, lbl, _ := strings.Cut(series, "{")
		if n != name || !hasLabels(strings.TrimSuffix(lbl, "}"), labels) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

func hasLabels(lbl string, want []string) bool {
	for _, w := range want {
		k, v, _ := strings.Cut(w, "=")
		if !strings.Contains(","+lbl+",", fmt.Sprintf(",%s=%q,", k, v)) {
			return false
		}
	}
	return true
}

// FetchMetrics is the /metrics text of the admin endpoint at addr (of this
// process's daemon or another's).
func FetchMetrics(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: HTTP %d, %v", resp.StatusCode, err)
	}
	return string(body), nil
}

// WaitMetric polls until the metric reaches at least want (counters may
// be bumped just after the message that reports them is sent).
func (d *Daemon) WaitMetric(t testing.TB, want float64, name string, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := d.Metric(t, name, labels...)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v, want at least %v", name, labels, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
