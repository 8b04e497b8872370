// Package leakcheck finds goroutines that outlive the tests that started
// them: the one helper every package's tests use for "no goroutine leaks"
// (docs: developers' brief). A test binary checks at its end (Main, from
// TestMain); a test that must be checked on its own registers Check.
//
// A goroutine counts when its stack runs code of one of the given import
// paths (by default Ours: m2md and the network libraries it drives) and is
// not the test framework running a test, so that goroutines of the runtime
// and of unrelated libraries never make a test fail.
package leakcheck

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Ours matches the goroutines of m2md and of the network libraries it runs
// (QUIC, WebSocket, NATS).
var Ours = []string{"github.com/m2md/m2md/", "github.com/quic-go/quic-go", "github.com/coder/websocket", "github.com/nats-io/"}

// Settle is how long a check waits for goroutines to end before it calls
// them leaked: quic-go keeps a closed connection's ids for a few RTOs to
// answer late packets, and a loaded machine stretches that.
const Settle = 15 * time.Second

// Goroutines returns the stacks of the running goroutines, other than the
// caller's and those running tests, that run code of one of match (Ours
// when empty).
func Goroutines(match ...string) []string {
	if len(match) == 0 {
		match = Ours
	}
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 || strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*M).") {
			continue // this goroutine, running tests and the test binary's main
		}
		for _, m := range match {
			if strings.Contains(g, m) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// Wait waits up to timeout until no goroutine matches and returns those
// still running then (nil when none).
func Wait(timeout time.Duration, match ...string) []string {
	deadline := time.Now().Add(timeout)
	for {
		// Keep-alive connections of the tests' own HTTP requests (metrics
		// scrapes) are not leaks of the code under test.
		http.DefaultClient.CloseIdleConnections()
		left := Goroutines(match...)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Check makes t fail if goroutines matching match are still running once
// t's other cleanups have run (register it first: cleanups run last to
// first). Tests running in parallel with t must not start such goroutines.
func Check(t testing.TB, match ...string) {
	t.Cleanup(func() {
		if left := Wait(Settle, match...); len(left) > 0 {
			t.Errorf("%d goroutines left running:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
	})
}

// Main runs the tests and then checks that no goroutine matching match
// outlives them; it returns the exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }
func Main(m *testing.M, match ...string) int {
	code := m.Run()
	if code != 0 {
		return code // the failures say enough; leftovers of a failed test are expected
	}
	if left := Wait(Settle, match...); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "goroutine leak: %d goroutines outlive the tests:\n\n%s\n", len(left), strings.Join(left, "\n\n"))
		return 1
	}
	return 0
}
