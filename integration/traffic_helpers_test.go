package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/internal/leakcheck"
	"github.com/m2md/m2md/negotiate"
)

// Helpers for the tests that drive the daemon with the client library under
// load (restart, lame-duck shutdown, soak): a set of corpus requests whose
// answers are known, a provider handler that gives them, and a goroutine
// leak check.

// exchangeSet pairs corpus requests with the reply a provider built by
// handler gives each, so a requester can check every response byte for
// byte after its trip through the daemon.
type exchangeSet struct {
	reqs   [][]byte
	models []string // every model the requests name, for the providers
	resps  [][]byte
	chunks [][]byte // what a provider streams before the final reply
	index  map[string]int
}

func loadExchangeSet(t testing.TB) *exchangeSet {
	t.Helper()
	x := &exchangeSet{index: map[string]int{}}
	for _, name := range []string{
		"req-chat-tiny-01.json", "req-chat-tiny-07.json", "req-chat-tiny-10.json",
		"req-chat-1k-01.json", "req-chat-1k-03.json", "req-chat-4k-02.json",
		"req-tools-1k-01.json", "req-stream-01.json", "req-stream-02.json",
	} {
		b := corpus(t, name)
		var m struct{ Model string }
		if err := json.Unmarshal(b, &m); err != nil || m.Model == "" {
			t.Fatalf("%s: no model: %v", name, err)
		}
		x.index[string(b)] = len(x.reqs)
		x.reqs = append(x.reqs, b)
		if !slices.Contains(x.models, m.Model) {
			x.models = append(x.models, m.Model)
		}
	}
	for i := 1; i <= 6; i++ {
		x.resps = append(x.resps, corpus(t, fmt.Sprintf("resp-chat-%02d.json", i)))
	}
	for i := 1; i <= 3; i++ {
		x.chunks = append(x.chunks, corpus(t, fmt.Sprintf("stream-chunk-%02d.json", i)))
	}
	return x
}

// streams reports whether request i asks for streaming (the provider then
// sends the chunks first).
func (x *exchangeSet) streams(i int) bool {
	return bytes.Contains(x.reqs[i], []byte(`"stream":true`))
}

func (x *exchangeSet) resp(i int) []byte { return x.resps[i%len(x.resps)] }

// handler answers each known request with its reply after delay(i), or
// earlier with nothing if the delivery is cancelled; started, when set, is
// called as each delivery begins.
func (x *exchangeSet) handler(delay func(i int) time.Duration, started func(*client.Request)) client.Handler {
	return client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
		if started != nil {
			started(req)
		}
		i, ok := x.index[string(req.Body)]
		if !ok {
			_ = w.Error("unknown_body", "request body not in the exchange set")
			return
		}
		if d := delay(i); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		if req.Stream {
			for _, c := range x.chunks {
				if w.Chunk(c) != nil {
					return
				}
			}
		}
		_ = w.Respond(x.resp(i))
	})
}

// check compares a Do result for request i with what handler sends.
func (x *exchangeSet) check(i int, resp *client.Response) error {
	if !bytes.Equal(resp.Body, x.resp(i)) {
		return fmt.Errorf("request %d: final reply of %d bytes differs from the %d sent", i, len(resp.Body), len(x.resp(i)))
	}
	want := 0
	if x.streams(i) {
		want = len(x.chunks)
	}
	if len(resp.Chunks) != want {
		return fmt.Errorf("request %d: %d chunks, want %d", i, len(resp.Chunks), want)
	}
	for k, c := range resp.Chunks {
		if !bytes.Equal(c, x.chunks[k]) {
			return fmt.Errorf("request %d: chunk %d differs", i, k)
		}
	}
	return nil
}

// remoteCode is the code of a *client.RemoteError in err's chain, or "".
func remoteCode(err error) negotiate.ErrorCode {
	var re *client.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

// ourGoroutines lists the stacks of goroutines that run m2md or the network
// libraries it drives, apart from the tests themselves and the daemon's
// idle writer workers: those belong to the daemon, not to a session, are
// capped whatever the session count, and retire on their own a second or
// two after the last writer (daemon/writerpool.go); counting them made each
// check wait for that.
func ourGoroutines() []string {
	all := leakcheck.Goroutines()
	ours := all[:0]
	for _, g := range all {
		if !idleWriter(g) {
			ours = append(ours, g)
		}
	}
	return ours
}

// idleWriter reports whether stack g is a writer-pool worker waiting for
// its next writer.
func idleWriter(g string) bool {
	first, rest, _ := strings.Cut(g, "\n")
	return strings.Contains(first, "[select") && strings.HasPrefix(rest, "github.com/m2md/m2md/daemon.(*writerPool).run(")
}

// expectGoroutinesBack waits (up to 10 s) until no more such goroutines run
// than before (base, from ourGoroutines), and fails listing the extra ones.
func expectGoroutinesBack(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := ourGoroutines()
		if len(now) <= base {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of m2md and its network libraries still run, %d before the test:\n%s",
				len(now), base, strings.Join(now, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// healthSessions is the session count /healthz reports.
func healthSessions(t testing.TB, d *testDaemon) int {
	_, body := adminGet(t, d, "/healthz")
	var h struct{ Sessions int }
	_ = json.Unmarshal([]byte(body), &h)
	return h.Sessions
}

// waitSessionCount polls /healthz until the daemon has n sessions.
func waitSessionCount(t testing.TB, d *testDaemon, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := healthSessions(t, d)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon has %d sessions after %v, want %d", got, timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
