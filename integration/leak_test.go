package integration

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// TestMain checks, after every test has run and cleaned up (daemons
// stopped, connections closed), that the goroutines are back to what the
// process had before: nothing the daemon, the transports or the tests
// started is left running.
func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		if err := settleGoroutines(before, 10*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak after all tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// settleGoroutines waits until at most n goroutines run, or reports the
// stacks of those left after timeout.
func settleGoroutines(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		http.DefaultClient.CloseIdleConnections() // the /metrics scrapes' keep-alives
		if runtime.NumGoroutine() <= n {
			return nil
		}
		if time.Now().After(deadline) {
			var buf bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
			return fmt.Errorf("%d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), n, buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNoGoroutineLeak runs sessions through their ends (routed, streamed,
// refused, killed, closed, replaced, protocol error) on both transports,
// stops the daemon, and checks the goroutine count is back to where it was.
func TestNoGoroutineLeak(t *testing.T) {
	time.Sleep(100 * time.Millisecond) // let earlier tests' stragglers finish
	http.DefaultClient.CloseIdleConnections()
	baseline := runtime.NumGoroutine()

	// In a subtest, so that its cleanups (every agent connection closed,
	// the daemon stopped) have run when the count is taken.
	t.Run("sessions", func(t *testing.T) {
		d := startDaemon(t, nil)
		for _, tr := range transports {
			for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityAEAD} {
				suffix := tr + "-" + mode.String()
				prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "lprov-" + suffix, Security: mode, Models: []string{"gpt-4o"}})
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "lreq-" + suffix, Security: mode})
				roundTrip(t, req, prov)

				// A stream, and a request left hanging when the provider dies.
				_, id := req.request("", corpus(t, "req-stream-01.json"))
				dl := prov.recvData(5 * time.Second)
				prov.reply(dl.ch, dl.hdr.RequestID, false, chunk("leak", 0))
				req.recvData(5 * time.Second)
				prov.conn.Close()
				req.expectError(5*time.Second, id, "agent_gone", false)

				// Replaced, then closed by the agent.
				old := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "lrepl-" + suffix, Security: mode})
				repl := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "lrepl-" + suffix, Security: mode})
				old.expectClose(5*time.Second, negotiate.ReasonReplaced)
				repl.sendControl(negotiate.AppendClose(nil, repl.sess.ID, time.Now(), negotiate.ReasonNormal, "bye"))
				repl.expectControl(5*time.Second, negotiate.TypeClose)
				expectConnClosed(t, repl.conn, 5*time.Second)

				// A protocol error; and a requester killed with a request out.
				bad := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "lbad-" + suffix, Security: mode})
				bad.sendRaw(0, []byte{0x09})
				bad.expectClose(5*time.Second, negotiate.ReasonError)
				req.conn.Close()

				// A connection that never says HELLO, and one rejected.
				dialConn(t, d, tr)
				conn := dialConn(t, d, tr)
				expectReject(t, conn, exchange(t, conn, []byte{0x07}), negotiate.RejectUnknown)
			}
		}
		if err := stopAndWait(t, d, 15*time.Second); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
	if err := settleGoroutines(baseline, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
