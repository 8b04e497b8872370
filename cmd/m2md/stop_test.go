package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/internal/daemontest"
)

// TestClusterNodeStopped: of two `m2md serve` processes clustered over
// loopback with default settings, one stopped with SIGSTOP for 3 s (a
// process starved of CPU: GC, a noisy neighbour, a paused container) and
// continued is not declared dead by the other, nor does it declare the
// other dead when it wakes to heartbeats 3 s old (dead after 4 s). The
// request sent through the running node to the stopped node's provider
// while it sleeps is answered once it wakes, once; the provider keeps its
// session.
func TestClusterNodeStopped(t *testing.T) {
	t.Parallel()
	type node struct {
		p            *proc
		ws, admin, r string
	}
	nodes := make([]node, 2)
	for i := range nodes {
		nodes[i] = node{ws: freePort(t, "tcp"), admin: freePort(t, "tcp"), r: freePort(t, "tcp")}
	}
	for i := range nodes {
		n := &nodes[i]
		n.p = startM2MD(t, t.TempDir(), "serve", "--quic-addr", "-", "--openai-addr", "-", "--log-format", "json",
			"--ws-addr", n.ws, "--admin-addr", n.admin, "--cert-dir", t.TempDir(),
			"--cluster-node", "node-"+strconv.Itoa(i), "--cluster-listen", n.r, "--cluster-routes", "nats://"+nodes[1-i].r)
		n.p.waitOutput(`"ws":"ws://`, 60*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prov, err := client.Dial(ctx, "ws://"+nodes[1].ws+"/m2m", client.Options{AgentID: "stop-prov", Models: []string{"gpt-4o"},
		Handler: client.HandlerFunc(func(_ context.Context, _ *client.Request, w client.ResponseWriter) {
			_ = w.Respond(demoCompletion("gpt-4o", "from the stopped node", 1))
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()
	req, err := client.Dial(ctx, "ws://"+nodes[0].ws+"/m2m", client.Options{AgentID: "stop-req"})
	if err != nil {
		t.Fatal(err)
	}
	defer req.Close()
	// The provider's announcement reaches node-0.
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := req.Do(rctx, chatRequest(false))
		rcancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node-0 never routed to the provider on node-1: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := nodes[1].p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	answered := make(chan error, 1)
	go func() {
		resp, err := req.Do(ctx, chatRequest(false))
		if err == nil && !strings.Contains(string(resp.Body), "from the stopped node") {
			t.Errorf("answer %s", resp.Body)
		}
		answered <- err
	}()
	time.Sleep(3*time.Second - time.Since(stopped))
	if err := nodes[1].p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("the request sent while node-1 was stopped: %v", err)
		}
		t.Logf("the request sent while node-1 was stopped for 3 s was answered %v after the stop", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the request sent while node-1 was stopped is still unanswered 10 s after it continued")
	}
	time.Sleep(time.Second) // a late verdict would come by now
	for i, n := range nodes {
		m, err := daemontest.FetchMetrics(n.admin)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(m, "\nm2md_cluster_nodes_down_total 0\n") || !strings.Contains(m, "\nm2md_cluster_nodes 1\n") {
			t.Errorf("node-%d after node-1's 3 s stop:\n%s", i, grepLines(m, "m2md_cluster_nodes"))
		}
	}
	if st := prov.Stats(); st.Reconnects != 0 || st.Deliveries != 2 {
		t.Errorf("provider: %d reconnects, %d deliveries; want 0 and 2", st.Reconnects, st.Deliveries)
	}
	if st := req.Stats(); st.LateReplies != 0 {
		t.Errorf("%d replies came for requests already ended", st.LateReplies)
	}
}

// grepLines is the lines of text that begin with prefix.
func grepLines(text, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			b.WriteString(line)
		}
	}
	return b.String()
}
