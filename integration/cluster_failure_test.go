package integration

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// clusterOutcome is one request of TestClusterNodeKilled's load.
type clusterOutcome struct {
	start, end time.Time
	from       string
	err        error
}

// TestClusterNodeKilled: three nodes; a requester on A routes by model to
// providers on B and C, each holding requests for a while. B dies without a
// word (Crash). Requests in flight to its provider fail over to a
// provider of the model or end with agent_gone within 5 s, never hang; the provider reconnects to C (the next of its
// URLs) and serves again; a new node started in B's place joins, and a
// provider on it is reached from A.
func TestClusterNodeKilled(t *testing.T) {
	t.Parallel()
	certDir := t.TempDir() // one certificate for every node: the clients pin it once
	shared := func(c *daemon.Config) { c.CertDir = certDir }
	nodes := startCluster(t, 3, nil, shared)
	a, b, c := nodes[0], nodes[1], nodes[2]
	const model = "kill-model"
	body := []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hold on"}]}`)
	resp := corpus(t, "resp-chat-01.json")
	served := map[string]*atomic.Int64{"kprov-1": {}, "kprov-2": {}, "kprov-3": {}}
	handler := func(id string) client.Handler {
		return client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
			served[id].Add(1)
			select {
			case <-time.After(150 * time.Millisecond):
				_ = w.Respond(resp)
			case <-ctx.Done():
			}
		})
	}
	opts := func(id string) client.Options {
		return client.Options{
			AgentID: id, PinSHA256: a.Fingerprint(), Models: []string{model}, Handler: handler(id),
			Reconnect: true, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
			Transport: transport.Config{HandshakeTimeout: 2 * time.Second},
		}
	}
	// kprov-1 knows B and C; on B's death it moves to C.
	dialClient(t, b.url("ws")+","+c.url("ws"), opts("kprov-1"))
	dialClient(t, c.url("quic"), opts("kprov-2"))
	req := dialClient(t, a.url("quic"), client.Options{AgentID: "kreq", PinSHA256: a.Fingerprint()})
	waitAgentAt(t, a, "", "kprov-1", b)
	waitAgentAt(t, a, "", "kprov-2", c)

	var (
		mu       sync.Mutex
		outcomes []clusterOutcome
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	var current [8]atomic.Int64 // unix nanos each worker's request started
	for w := range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				o := clusterOutcome{start: time.Now()}
				current[w].Store(o.start.UnixNano())
				r, err := req.Do(ctx, body)
				cancel()
				o.end, o.err = time.Now(), err
				if r != nil {
					o.from = r.From
				}
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond) // no_route while the provider moves
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	waitCount := func(id string, n int64, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for served[id].Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s served %d requests, want %d", what, id, served[id].Load(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitCount("kprov-1", 10, "before the kill")
	waitCount("kprov-2", 10, "before the kill")

	killed := time.Now()
	before := served["kprov-1"].Load()
	b.Crash()
	if err := waitRun(t, b, 10*time.Second); err != nil {
		t.Fatalf("crashed daemon's Run: %v", err)
	}

	// kprov-1 re-registers through C and A routes to it again.
	waitAgentAt(t, a, "", "kprov-1", c)
	waitCount("kprov-1", before+10, "after moving to C")
	moved := time.Now()
	// Wait until every worker is past the requests it had in flight at the
	// kill (bounded: they must end within 5 s, checked below).
	for w := range current {
		for current[w].Load() < killed.UnixNano() && time.Since(killed) < 8*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
	}

	// Every request in flight at the kill was answered (failed over to a
	// provider on C: none had a reply yet, they are held 150 ms) or failed
	// with agent_gone (its provider's node is gone), within 5 s of the
	// kill.
	mu.Lock()
	var gone int
	for _, o := range outcomes {
		if o.start.After(killed) || o.end.Before(killed) {
			continue
		}
		if o.err != nil {
			if code := remoteCode(o.err); code != negotiate.CodeAgentGone {
				t.Errorf("request in flight at the kill: %v, want agent_gone", o.err)
			}
		}
		if late := o.end.Sub(killed); late > 5*time.Second {
			t.Errorf("request in flight at the kill ended %v after it, want within 5 s", late)
		}
		gone++
	}
	for _, o := range outcomes {
		// After the kill, only agent_gone or no_route (kprov-2 busy is
		// not an error: it takes them) may fail a request, and none hangs.
		if o.err != nil && o.start.After(killed) {
			switch remoteCode(o.err) {
			case negotiate.CodeAgentGone, negotiate.CodeNoRoute:
			default:
				t.Errorf("request after the kill: %v", o.err)
			}
		}
		if d := o.end.Sub(o.start); d > 5500*time.Millisecond {
			t.Errorf("a request took %v", d)
		}
	}
	mu.Unlock()
	if gone == 0 {
		t.Error("no request was in flight to the killed node: the test proves nothing")
	}
	t.Logf("%d requests in flight at the kill ended (failed over or agent_gone); provider back after %v; %v failovers", gone, moved.Sub(killed), metric(t, a, "m2md_failovers_total"))

	// A node restarted in B's place joins the cluster and is used.
	b2 := startDaemon(t, func(cfg *daemon.Config) {
		clusterConfig([]string{"nats://" + a.Cluster().RouteAddr.String()}, nil)(cfg)
		shared(cfg)
	})
	waitMesh(t, []*testDaemon{a, b2, c})
	dialClient(t, b2.url("ws"), opts("kprov-3"))
	waitAgentAt(t, a, "", "kprov-3", b2)
	waitCount("kprov-3", 10, "on the restarted node")
	if errors.Is(req.Err(), client.ErrClosed) {
		t.Fatal("requester closed")
	}
}

// TestClusterNodeRestartedSameID: a node that crashes and comes back under
// the same id (--cluster-node) before the others declare it dead is a new
// node to them: its old agents go at once (agent_gone for what was in
// flight), its new agents are routed to, and requests cross both ways.
// DeadAfter is long here so that the restart always beats it.
func TestClusterNodeRestartedSameID(t *testing.T) {
	slow := func(c *cluster.Config) { c.DeadAfter = 20 * time.Second }
	nodes := startCluster(t, 2, slow, nil)
	a, b := nodes[0], nodes[1]
	id := b.Cluster().Node
	old := mustDialRaw(t, b, "ws", negotiate.ClientConfig{AgentID: "rs-old", Models: []string{"rs-model"}})
	req := mustDialRaw(t, a, "ws", negotiate.ClientConfig{AgentID: "rs-req"})
	waitAgentAt(t, a, "", "rs-old", b)
	_, held := req.request("rs-old", corpus(t, "req-chat-tiny-07.json"))
	old.recvData(5 * time.Second)

	b.Crash()
	b2 := startDaemon(t, clusterConfig([]string{"nats://" + a.Cluster().RouteAddr.String()}, func(c *cluster.Config) {
		slow(c)
		c.Node = id
	}))
	req.expectError(5*time.Second, held, string(negotiate.CodeAgentGone), false)
	waitAgentGone(t, []*testDaemon{a}, "rs-old")
	prov := mustDialRaw(t, b2, "ws", negotiate.ClientConfig{AgentID: "rs-new", Models: []string{"rs-model"}})
	waitAgentAt(t, a, "", "rs-new", b2)
	roundTrip(t, req, prov)
	back := mustDialRaw(t, a, "ws", negotiate.ClientConfig{AgentID: "rs-prov-a"})
	req2 := mustDialRaw(t, b2, "ws", negotiate.ClientConfig{AgentID: "rs-req-b"})
	waitAgentAt(t, b2, "", "rs-prov-a", a)
	roundTrip(t, req2, back)
}
