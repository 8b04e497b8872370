package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// outcome is one request of a load loop.
type outcome struct {
	requester  string
	start, end time.Time
	err        error
	from       string
}

// loadLoop runs workers that send requests of x in a loop through c, each
// bounded by timeout, until stop is closed; it records every outcome.
type loadLoop struct {
	x       *exchangeSet
	timeout time.Duration
	stop    chan struct{}
	wg      sync.WaitGroup

	mu       sync.Mutex
	outcomes []outcome
}

func newLoadLoop(x *exchangeSet, timeout time.Duration) *loadLoop {
	return &loadLoop{x: x, timeout: timeout, stop: make(chan struct{})}
}

func (l *loadLoop) run(c *client.Client, workers int) {
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for k := w; ; k++ {
				select {
				case <-l.stop:
					return
				default:
				}
				i := k % len(l.x.reqs)
				ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
				o := outcome{requester: c.AgentID(), start: time.Now()}
				resp, err := c.Do(ctx, l.x.reqs[i])
				cancel()
				o.end = time.Now()
				if err == nil {
					o.from = resp.From
					err = l.x.check(i, resp)
				}
				o.err = err
				l.mu.Lock()
				l.outcomes = append(l.outcomes, o)
				l.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond) // no hot loop while the daemon is away
				}
			}
		}()
	}
}

// halt stops the workers and returns every outcome.
func (l *loadLoop) halt() []outcome {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.outcomes
}

// successesSince counts the successful requests started after t, per
// requester.
func (l *loadLoop) successesSince(t time.Time) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := map[string]int{}
	for _, o := range l.outcomes {
		if o.err == nil && o.start.After(t) {
			n[o.requester]++
		}
	}
	return n
}

// restartErrorOK reports whether err is what a request may get when the
// daemon restarts under it: the session was lost, the draining daemon
// refused it (shutdown), its provider's session ended first (agent_gone),
// or its requester was back before any provider (no_route). Never a
// timeout: nothing may hang.
func restartErrorOK(err error) bool {
	if errors.Is(err, client.ErrConnectionLost) {
		return true
	}
	switch remoteCode(err) {
	case negotiate.CodeShutdown, negotiate.CodeAgentGone, negotiate.CodeNoRoute:
		return true
	}
	return false
}

// TestRestartUnderLoad: providers and requesters on both transports, all
// with Reconnect, run requests in a loop; the daemon is stopped gracefully
// and a new one started on the same ports with the same certificate.
// Requests caught by the restart fail with an error well before their
// timeout (never hang), the clients reconnect with backoff and re-register
// their models, and requests routed by model reach the providers again.
func TestRestartUnderLoad(t *testing.T) {
	base := len(ourGoroutines())
	certDir := t.TempDir()
	const (
		grace   = time.Second
		timeout = 6 * time.Second
		slow    = 4 * time.Second // longer than grace: caught by the restart
	)
	cfg := func(c *daemon.Config) {
		c.CertDir = certDir // the new daemon keeps the pinned certificate
		c.ShutdownGrace = grace
		c.CloseTimeout = time.Second
	}
	d1 := startDaemon(t, cfg)
	x := loadExchangeSet(t)
	slowBody := []byte(`{"model":"` + x.models[0] + `","messages":[{"role":"user","content":"take your time"}]}`)

	// epoch is 1 while the first daemon runs, 2 once the second does;
	// providers count their deliveries per epoch.
	var epoch atomic.Int32
	epoch.Store(1)
	type provider struct {
		c        *client.Client
		byEpoch  [3]atomic.Int64
		slowSeen chan struct{}
		log      *lockedBuffer
	}
	opts := func(tr, id string, mode frame.Security) client.Options {
		return client.Options{
			AgentID: id, PinSHA256: d1.Fingerprint(), Security: mode,
			Reconnect: true, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
			// A QUIC dial to a port nobody listens on is not refused (no
			// ICMP reaches quic-go), it times out: keep attempts short.
			Transport: transport.Config{HandshakeTimeout: 2 * time.Second},
		}
	}
	var provs []*provider
	var reqs []*client.Client
	for k, tr := range transports {
		p := &provider{slowSeen: make(chan struct{}, 16)}
		o := opts(tr, "rs-prov-"+tr, []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD}[k])
		o.Models = x.models
		inner := x.handler(func(int) time.Duration { return 10 * time.Millisecond }, nil)
		o.Handler = client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
			p.byEpoch[epoch.Load()].Add(1)
			if string(req.Body) == string(slowBody) {
				p.slowSeen <- struct{}{}
				select {
				case <-time.After(slow):
					_ = w.Respond(x.resps[0])
				case <-ctx.Done():
				}
				return
			}
			inner.ServeM2M(ctx, req, w)
		})
		// The provider's log says when it loses the daemon and when it is
		// back (what `m2md demo provider` shows its user).
		p.log = &lockedBuffer{}
		o.Logger = zerolog.New(p.log)
		c := dialClient(t, d1.url(tr), o)
		p.c = c
		provs = append(provs, p)
		reqs = append(reqs, dialClient(t, d1.url(tr), opts(tr, "rs-req-"+tr, []frame.Security{frame.SecurityNone, frame.SecurityAEAD}[k])))
	}
	loop := newLoadLoop(x, timeout)
	for _, r := range reqs {
		loop.run(r, 4)
	}
	started := time.Now()
	waitSuccesses(t, loop, started, reqs, 20, 10*time.Second)

	// One slow request per requester, held by a provider across the
	// restart: it must fail (agent_gone or connection lost) once the grace
	// is over, not wait for its timeout.
	type slowResult struct {
		err error
		el  time.Duration
	}
	slowDone := make(chan slowResult, len(reqs))
	for _, r := range reqs {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			_, err := r.Do(ctx, slowBody)
			slowDone <- slowResult{err, time.Since(start)}
		}()
	}
	for range reqs {
		select {
		case <-provs[0].slowSeen:
		case <-provs[1].slowSeen:
		case <-time.After(5 * time.Second):
			t.Fatal("the slow requests did not reach the providers")
		}
	}

	oldSessions := map[*client.Client]string{}
	for _, c := range append([]*client.Client{provs[0].c, provs[1].c}, reqs...) {
		oldSessions[c] = c.Session().ID
	}
	stopAt := time.Now()
	if err := stopAndWait(t, d1, 15*time.Second); err != nil {
		t.Fatalf("first daemon's Run: %v", err)
	}
	epoch.Store(2)
	// quic-go closes a listener's UDP socket only once the connections it
	// served have left their closing state (3 PTO), which can be after Run
	// has returned; wait for the port rather than fail to bind it.
	if wait := waitUDPFree(t, d1.QUICAddr().String(), 3*time.Second); wait > 0 {
		t.Logf("QUIC port still bound %v after Run returned", wait.Round(time.Millisecond))
	}
	d2 := startDaemon(t, func(c *daemon.Config) {
		cfg(c)
		c.QUICAddr = d1.QUICAddr().String()
		c.WSAddr = d1.WSAddr().String()
	})
	restarted := time.Now()
	t.Logf("first daemon stopped in %v; second daemon up on the same ports", restarted.Sub(stopAt).Round(time.Millisecond))

	for range reqs {
		select {
		case r := <-slowDone:
			if r.err == nil || !restartErrorOK(r.err) {
				t.Errorf("slow request in flight at the restart: %v after %v, want agent_gone or connection lost", r.err, r.el)
			} else if r.el > timeout-time.Second {
				t.Errorf("slow request in flight at the restart failed only after %v (%v)", r.el, r.err)
			}
		case <-time.After(timeout):
			t.Fatal("a slow request in flight at the restart never returned")
		}
	}

	// Everyone is back, with a new session on the new daemon.
	deadline := time.Now().Add(8 * time.Second)
	for c, old := range oldSessions {
		for {
			if id := c.Session().ID; id != "" && id != old {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not reconnect within 8 s of the restart (err %v)", c.AgentID(), c.Err())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	allBack := time.Now()
	t.Logf("every client reconnected %v after the new daemon started", allBack.Sub(restarted).Round(time.Millisecond))
	waitSuccesses(t, loop, allBack, reqs, 20, 10*time.Second)
	outcomes := loop.halt()

	var okBefore, okAfter, failed int
	codes := map[string]int{}
	for _, o := range outcomes {
		if o.err == nil {
			if o.start.After(restarted) {
				okAfter++
			} else {
				okBefore++
			}
			continue
		}
		failed++
		code := string(remoteCode(o.err))
		if code == "" {
			code = o.err.Error()
			if errors.Is(o.err, client.ErrConnectionLost) {
				code = "connection lost"
			}
		}
		codes[code]++
		switch {
		case !restartErrorOK(o.err):
			t.Errorf("%s: request started %v after the stop failed with %v", o.requester, o.start.Sub(stopAt), o.err)
		case o.end.Before(stopAt) || o.start.After(allBack):
			t.Errorf("%s: request failed outside the restart (started %v, ended %v after the stop): %v",
				o.requester, o.start.Sub(stopAt), o.end.Sub(stopAt), o.err)
		}
	}
	t.Logf("requests: %d ok before the restart, %d ok after, %d failed during it %v", okBefore, okAfter, failed, codes)
	for _, p := range provs {
		if p.byEpoch[1].Load() == 0 || p.byEpoch[2].Load() == 0 {
			t.Errorf("provider %s got %d deliveries from the first daemon and %d from the second, want some of each",
				p.c.AgentID(), p.byEpoch[1].Load(), p.byEpoch[2].Load())
		}
	}
	for _, p := range provs {
		logged := p.log.String()
		for _, msg := range []string{"session lost, reconnecting", "session re-established"} {
			if !strings.Contains(logged, msg) {
				t.Errorf("%s's log lacks %q", p.c.AgentID(), msg)
			}
		}
	}
	for c := range oldSessions {
		if n := c.Stats().Reconnects; n != 1 {
			t.Errorf("%s reconnected %d times, want 1", c.AgentID(), n)
		}
		if err := c.Close(); err != nil {
			t.Errorf("%s: Close: %v", c.AgentID(), err)
		}
	}
	if err := stopAndWait(t, d2, 15*time.Second); err != nil {
		t.Fatalf("second daemon's Run: %v", err)
	}
	expectGoroutinesBack(t, base)
}

// lockedBuffer: output a process or logger writes while the test reads it.
type lockedBuffer = testkit.LockedBuffer

// waitUDPFree waits until addr can be bound and says how long that took.
func waitUDPFree(t testing.TB, addr string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		c, err := net.ListenPacket("udp", addr)
		if err == nil {
			c.Close()
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("UDP %s still bound %v after the daemon stopped: %v", addr, timeout, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// dialClient connects a client library agent, closed at the end of the
// test.
func dialClient(t testing.TB, url string, o client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, url, o)
	if err != nil {
		t.Fatalf("dial %s as %s: %v", url, o.AgentID, err)
	}
	closeAtEnd(t, func() { c.Close() })
	return c
}

// waitSuccesses waits until each requester has n successful requests
// started after since.
func waitSuccesses(t testing.TB, l *loadLoop, since time.Time, reqs []*client.Client, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := l.successesSince(since)
		short := []string{}
		for _, r := range reqs {
			if got[r.AgentID()] < n {
				short = append(short, fmt.Sprintf("%s: %d", r.AgentID(), got[r.AgentID()]))
			}
		}
		if len(short) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, fewer than %d requests succeeded: %s", timeout, n, strings.Join(short, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
