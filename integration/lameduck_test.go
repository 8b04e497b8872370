package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// TestLameDuckShutdown: with many requests in flight through providers
// that take their time, the daemon's Run context is cancelled. Every
// request already in flight completes successfully within ShutdownGrace;
// requests sent once the drain has begun are refused at once with error
// `shutdown` and never reach a provider; then every session, client
// library or raw, gets CLOSE SERVER_SHUTDOWN, Run returns nil as soon as
// the drain is over (not at the grace's end), and no goroutine is left
// behind.
//
// The slow requests are held by the test, not by a timer, until the late
// requests have their answers: "refused at once" is then "answered while
// the drain is still open", whatever the machine's load (a late request
// made to wait for the drain would wait for its 5 s context).
func TestLameDuckShutdown(t *testing.T) {
	base := len(ourGoroutines())
	const (
		service      = 200 * time.Millisecond
		grace        = 20 * time.Second // beyond what the test's own steps take on a loaded machine
		perRequester = 40
		late         = 3 // requests per requester sent after the drain began
	)
	// release ends the slow requests (request 0 of the set); closed on every
	// path, so that no handler outlives the test.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseSlow := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseSlow()
	d := startDaemon(t, func(c *daemon.Config) { c.ShutdownGrace = grace })
	x := loadExchangeSet(t)

	var delivered atomic.Int64
	var all []*client.Client
	var reqs []*client.Client
	modes := []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD}
	for k, tr := range transports {
		all = append(all, dialClient(t, d.url(tr), client.Options{
			AgentID: "ld-prov-" + tr, PinSHA256: d.Fingerprint(), Security: modes[k],
			Models: x.models,
			Handler: x.handler(func(int) time.Duration { return service }, func(r *client.Request) {
				delivered.Add(1)
				if x.index[string(r.Body)] == 0 {
					<-release
				}
			}),
		}))
		for j := range 2 {
			c := dialClient(t, d.url(tr), client.Options{
				AgentID: fmt.Sprintf("ld-req-%s-%d", tr, j), PinSHA256: d.Fingerprint(), Security: modes[(k+j+1)%3],
			})
			all = append(all, c)
			reqs = append(reqs, c)
		}
	}
	raws := map[string]*rawAgent{}
	for _, tr := range transports {
		raws[tr] = mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "ld-raw-" + tr})
	}
	waitSessionCount(t, d, len(all)+len(raws), 5*time.Second)

	// The requests in flight; request 0 of the set is a slow one.
	type result struct {
		i   int
		err error
		end time.Time
	}
	inFlight := len(reqs) * perRequester
	results := make(chan result, inFlight)
	for _, r := range reqs {
		for k := range perRequester {
			go func() {
				i := k % len(x.reqs)
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				resp, err := r.Do(ctx, x.reqs[i])
				if err == nil {
					err = x.check(i, resp)
				}
				results <- result{i, err, time.Now()}
			}()
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for delivered.Load() < int64(inFlight) {
		if time.Now().After(deadline) {
			// Say why: a request that failed is never delivered.
			var failed []string
			for len(results) > 0 {
				if r := <-results; r.err != nil {
					failed = append(failed, fmt.Sprintf("request %d: %v", r.i, r.err))
				}
			}
			t.Fatalf("%d of %d requests reached the providers; failed before the shutdown: %q", delivered.Load(), inFlight, failed)
		}
		time.Sleep(5 * time.Millisecond)
	}

	cancelAt := time.Now()
	d.Cancel()
	for {
		code, body := adminGet(t, d, "/healthz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "draining") {
			break
		}
		if time.Since(cancelAt) > 5*time.Second {
			t.Fatalf("/healthz still %d %s 5 s after the cancel", code, body)
		}
		time.Sleep(2 * time.Millisecond)
	}

	// The requests in flight complete, within the grace: first the quick
	// ones, while the slow ones hold the drain open until released.
	longs := 0
	for k := range perRequester {
		if k%len(x.reqs) == 0 {
			longs += len(reqs)
		}
	}
	var lastEnd time.Time
	collect := func(n int) {
		t.Helper()
		for range n {
			select {
			case r := <-results:
				if r.err != nil {
					t.Errorf("request %d in flight at the shutdown: %v", r.i, r.err)
				}
				if r.end.After(lastEnd) {
					lastEnd = r.end
				}
			case <-time.After(grace + 5*time.Second):
				t.Fatal("requests in flight at the shutdown did not all return")
			}
		}
	}
	collect(inFlight - longs)

	// Requests sent during the drain: refused at once, never delivered,
	// answered while the drain still waits for the slow requests (which
	// are not released before these have their answers).
	var wg sync.WaitGroup
	lateErrs := make(chan string, len(reqs)*late)
	for _, r := range reqs {
		for range late {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if _, err := r.Do(ctx, x.reqs[1]); remoteCode(err) != negotiate.CodeShutdown {
					lateErrs <- fmt.Sprintf("%s: request during the drain: %v, want error shutdown", r.AgentID(), err)
				}
			}()
		}
	}
	wg.Wait()
	lateDone := time.Now()
	close(lateErrs)
	for e := range lateErrs {
		t.Error(e)
	}
	if n := metric(t, d, "m2md_frames_refused_total", "reason=shutdown"); n != float64(len(reqs)*late) {
		t.Errorf("m2md_frames_refused_total{reason=shutdown} = %v, want %d", n, len(reqs)*late)
	}
	if n := delivered.Load(); n != int64(inFlight) {
		t.Errorf("%d deliveries, want the %d sent before the drain", n, inFlight)
	}

	releaseSlow()
	collect(longs)
	t.Logf("%d requests in flight at the cancel all answered, the last %v after it; requests during the drain refused by %v",
		inFlight, lastEnd.Sub(cancelAt).Round(time.Millisecond), lateDone.Sub(cancelAt).Round(time.Millisecond))
	if el := lastEnd.Sub(cancelAt); el > grace {
		t.Errorf("the last request in flight took %v after the cancel, beyond the grace %v", el, grace)
	}

	// Every session gets CLOSE SERVER_SHUTDOWN.
	for _, tr := range transports {
		raws[tr].expectClose(5*time.Second, negotiate.ReasonServerShutdown)
	}
	for _, c := range all {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: session still open after the shutdown", c.AgentID())
		}
		var ce *negotiate.CloseError
		if err := c.Err(); !errors.As(err, &ce) || ce.Reason != negotiate.ReasonServerShutdown {
			t.Errorf("%s ended with %v, want CLOSE SERVER_SHUTDOWN", c.AgentID(), err)
		}
	}
	if err := waitRun(t, d, grace+15*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// A Run that waited for the grace to end would return after it.
	if el := time.Since(cancelAt); el >= grace {
		t.Errorf("Run returned %v after the cancel, the grace's end, with the last request done at %v", el, lastEnd.Sub(cancelAt))
	}
	for _, c := range all {
		c.Close()
	}
	expectGoroutinesBack(t, base)
}
