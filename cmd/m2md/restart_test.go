package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/internal/daemontest"
)

// restartAgentsEnv sets how many agents TestServeRestartedUnderLoad
// connects (docs/operations.md, "Failure behaviour"): 1000 for the run the
// table reports; the default is what CI carries in a few seconds.
const restartAgentsEnv = "M2MD_RESTART_AGENTS"

const defaultRestartAgents = 100

// raceRestartAgents is the default under the race detector, whose
// handshakes cost about ten times as much; it also allows raceSlack more
// for the agents to come back.
const (
	raceRestartAgents = 40
	raceSlack         = time.Second
)

// Bounds TestServeRestartedUnderLoad holds the restart to, from the
// moment the new daemon accepts: providers serve again within
// providersBackWithin (the client's backoff is at most 1.5 s, a QUIC agent
// hears of the restart within a second), every agent has a session within
// agentsBackWithin. A fleet larger than the default adds the handshakes
// that queue at the daemon, perHandshake each (250 a second on 2 cores
// that also run the agents; quic-go refuses a QUIC handshake beyond 32 in
// progress with CONNECTION_REFUSED, and the agent tries again after its
// backoff).
const (
	providersBackWithin = 2 * time.Second
	agentsBackWithin    = 3 * time.Second
	perHandshake        = 4 * time.Millisecond
	requestDeadline     = 10 * time.Second
)

// TestServeRestartedUnderLoad: `m2md serve` killed with SIGKILL (and, in
// the other subtest, stopped with SIGTERM) while agents on both
// transports are connected and requests flow, then started again on the
// same addresses. Every agent reconnects by itself (jittered backoff) and
// providers serve again within 2 s of the new daemon accepting; every
// request either completes with its own answer or ends with a clear error
// (the connection lost, or an error reply) before its deadline: none
// hangs, none is answered twice or with another's answer.
func TestServeRestartedUnderLoad(t *testing.T) {
	n := defaultRestartAgents
	if raceEnabled {
		n = raceRestartAgents
	}
	if v := os.Getenv(restartAgentsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 8 {
			t.Fatalf("%s=%q: want a number of agents, at least 8", restartAgentsEnv, v)
		}
	}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			restartUnderLoad(t, n, sig)
		})
	}
}

func restartUnderLoad(t *testing.T, n int, sig syscall.Signal) {
	certDir, admin := t.TempDir(), freePort(t, "tcp")
	ws, quic := freePort(t, "tcp"), freePort(t, "udp")
	args := []string{"serve", "--quic-addr", quic, "--ws-addr", ws, "--admin-addr", admin, "--openai-addr", "-",
		"--log-format", "json", "--cert-dir", certDir,
		// One address holds every agent here, as a NAT gateway would:
		// --max-handshakes (4,096) is the bound that holds.
		"--max-handshakes-per-ip", strconv.Itoa(max(256, n))}
	serve := func() (*proc, time.Time) {
		p := startM2MD(t, t.TempDir(), args...)
		p.waitOutput(`"quic":"quic://`, 60*time.Second)
		return p, time.Now()
	}
	srv, _ := serve()
	urls := map[bool]string{false: "ws://" + ws + "/m2m", true: "quic://" + quic}

	f := newFleet(t, n, urls)
	f.load()
	f.waitAnswered(int64(n))
	before := f.sessions()

	signalled := time.Now()
	if err := srv.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	srv.wait(30 * time.Second)
	exited := time.Now()
	srv, accepting := serve()
	t.Logf("%v: the daemon exited %v after the signal, the new one accepted %v later", sig, exited.Sub(signalled).Round(time.Millisecond), accepting.Sub(exited).Round(time.Millisecond))
	queued := time.Duration(max(0, n-defaultRestartAgents)) * perHandshake
	if raceEnabled {
		queued += raceSlack
	}
	back := f.waitBack(before, accepting, agentsBackWithin+queued+10*time.Second)
	answered := f.answered.Load()
	f.waitAnswered(answered + int64(n))
	f.stop()

	for _, quic := range []bool{false, true} {
		tr := map[bool]string{false: "ws", true: "quic"}[quic]
		for _, prov := range []bool{true, false} {
			var ds []time.Duration
			for i, a := range f.agents {
				if a.quic == quic && a.provider == prov {
					ds = append(ds, back[i])
				}
			}
			slices.Sort(ds)
			role := map[bool]string{true: "providers", false: "requesters"}[prov]
			t.Logf("%s %s: %d back after the daemon accepted: median %v, max %v", tr, role, len(ds), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
			limit := agentsBackWithin + queued
			if prov {
				limit = providersBackWithin + queued
			}
			if ds[len(ds)-1] > limit {
				t.Errorf("%s %s: the last came back %v after the daemon accepted, want within %v", tr, role, ds[len(ds)-1], limit)
			}
		}
	}
	f.check()
	m, err := daemontest.FetchMetrics(admin)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(m) {
		if strings.HasPrefix(line, "m2md_limited_total") && !strings.HasSuffix(strings.TrimSpace(line), " 0") {
			t.Errorf("the restarted daemon refused connections: %s", line)
		}
	}
}

// freePort is a loopback address whose port was free a moment ago.
func freePort(t testing.TB, network string) string {
	t.Helper()
	var addr string
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = c.LocalAddr().String()
		c.Close()
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
	}
	return addr
}

// fleet is a quarter providers and three quarters requesters, alternating
// between QUIC and WebSocket, each a Go client that reconnects; the
// requesters send requests with a deadline in a loop, each naming itself
// so that its answer can be told from another's.
type fleet struct {
	t      *testing.T
	log    lockedBuffer // the agents' warnings, shown when the test fails
	agents []*fleetAgent
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	answered atomic.Int64
	mu       sync.Mutex
	outcomes map[string]int // error kinds, and "answered"
	bad      []string       // hangs, wrong answers, unclear errors
}

type fleetAgent struct {
	c        *client.Client
	quic     bool
	provider bool
}

func newFleet(t *testing.T, n int, urls map[bool]string) *fleet {
	f := &fleet{t: t, outcomes: map[string]int{}}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.agents = make([]*fleetAgent, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := range n {
		a := &fleetAgent{quic: i%2 == 1, provider: i%4 < 2}
		f.agents[i] = a
		opt := client.Options{
			AgentID: fmt.Sprintf("fleet-%d", i), Reconnect: true, WaitForDaemon: true, InsecureSkipVerifyDevOnly: true,
			Logger: zerolog.New(&f.log).Level(zerolog.WarnLevel),
		}
		if a.provider {
			opt.Models, opt.Handler = []string{"gpt-4o"}, client.HandlerFunc(answerFleet)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, urls[a.quic], opt)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", opt.AgentID, err)
				return
			}
			a.c = c
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		if t.Failed() {
			log := f.log.String()
			t.Logf("agents' warnings (last 4 KiB):\n%s", log[max(0, len(log)-4096):])
		}
		f.stop()
		for _, a := range f.agents {
			if a.c != nil {
				a.c.Close()
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return f
}

// answerFleet answers after a short think, with the name the request
// carries.
func answerFleet(ctx context.Context, req *client.Request, w client.ResponseWriter) {
	var doc struct {
		User string `json:"user"`
	}
	_ = json.Unmarshal(req.Body, &doc)
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return
	}
	_ = w.Respond(demoCompletion("gpt-4o", "for "+doc.User, 1))
}

// load starts every requester's loop: a request, an answer or an error,
// 100-300 ms of rest (about 5 requests a second per requester).
func (f *fleet) load() {
	for i, a := range f.agents {
		if a.provider {
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for seq := 0; f.ctx.Err() == nil; seq++ {
				f.request(a.c, fmt.Sprintf("fleet-%d/%d", i, seq))
				select {
				case <-time.After(time.Duration(100+rand.IntN(200)) * time.Millisecond):
				case <-f.ctx.Done():
				}
			}
		}()
	}
}

// request sends one request and files its outcome.
func (f *fleet) request(c *client.Client, name string) {
	body, _ := json.Marshal(map[string]any{
		"model": "gpt-4o", "user": name,
		"messages": []any{map[string]any{"role": "user", "content": "Who is this for?"}},
	})
	// The deadline is the request's own, not the fleet's: stopping the
	// load lets requests in flight finish.
	ctx, cancel := context.WithTimeout(context.Background(), requestDeadline)
	defer cancel()
	start := time.Now()
	resp, err := c.Do(ctx, body)
	el := time.Since(start)
	var kind string
	var re *client.RemoteError
	switch {
	case err == nil && strings.Contains(string(resp.Body), `"for `+name+`"`):
		kind = "answered"
		f.answered.Add(1)
	case err == nil:
		kind = "wrong answer"
	case errors.Is(err, client.ErrConnectionLost):
		kind = "connection lost"
	case errors.As(err, &re):
		kind = "error reply " + string(re.Code)
	default:
		kind = "unclear: " + err.Error()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outcomes[kind]++
	if el > requestDeadline+time.Second || strings.HasPrefix(kind, "unclear") || kind == "wrong answer" {
		f.bad = append(f.bad, fmt.Sprintf("%s: %s after %v", name, kind, el))
	}
}

// waitAnswered waits until want requests in all were answered.
func (f *fleet) waitAnswered(want int64) {
	f.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for f.answered.Load() < want {
		if time.Now().After(deadline) {
			f.t.Fatalf("%d requests answered in 60 s, want %d: %v", f.answered.Load(), want, f.snapshot())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessions is each agent's session id.
func (f *fleet) sessions() []string {
	ids := make([]string, len(f.agents))
	for i, a := range f.agents {
		ids[i] = a.c.Session().ID
	}
	return ids
}

// waitBack waits until every agent has a session other than the one in
// before, and returns how long after since each got it (polled every
// 10 ms).
func (f *fleet) waitBack(before []string, since time.Time, timeout time.Duration) []time.Duration {
	f.t.Helper()
	back := make([]time.Duration, len(f.agents))
	left := len(f.agents)
	for left > 0 {
		for i, a := range f.agents {
			if back[i] == 0 {
				if id := a.c.Session().ID; id != "" && id != before[i] {
					back[i] = max(time.Since(since), time.Nanosecond)
					left--
				}
			}
		}
		if left > 0 && time.Since(since) > timeout {
			var missing []string
			for i, a := range f.agents {
				if back[i] == 0 {
					missing = append(missing, fmt.Sprintf("%s (quic %v, provider %v, session %q, stats %+v)", a.c.AgentID(), a.quic, a.provider, a.c.Session().ID, a.c.Stats()))
				}
			}
			f.t.Fatalf("%d of %d agents without a new session %v after the daemon accepted: %s", left, len(f.agents), timeout, strings.Join(missing, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return back
}

// stop ends the load and waits for the requests in flight.
func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
}

func (f *fleet) snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.outcomes)
}

// check fails the test for a request that hung, was answered with
// another's answer or ended with an unclear error, or for a reply that
// came to a request already ended (a second answer).
func (f *fleet) check() {
	f.t.Helper()
	f.t.Logf("outcomes: %v", f.snapshot())
	f.mu.Lock()
	for _, b := range f.bad {
		f.t.Error(b)
	}
	f.mu.Unlock()
	for _, a := range f.agents {
		if st := a.c.Stats(); st.LateReplies != 0 {
			f.t.Errorf("%s: %d replies came for requests already ended", a.c.AgentID(), st.LateReplies)
		}
	}
}
