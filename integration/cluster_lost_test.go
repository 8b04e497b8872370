package integration

import (
	"testing"
	"time"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/negotiate"
)

// TestClusterLost: at-most-once with errors when NATS itself drops. With
// an inbox of one message and room for one more, bursts of requests to a
// provider on the other node overflow what NATS holds for the nodes'
// dispatchers, and NATS drops requests and replies without a word. Every
// request still ends exactly once: with its reply, or with queue_full,
// because the node that lost a message sees the gap in the sender's
// sequence numbers and the sender answers for it (cluster/seq.go). Fails
// without that: a dropped request or reply leaves its request waiting.
func TestClusterLost(t *testing.T) {
	nodes := startCluster(t, 2, func(c *cluster.Config) { c.Inbox, c.Headroom, c.DeadAfter = 1, 1, 10*time.Second }, nil)
	prov := mustDialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "lsprov"})
	req := mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "lsreq"})
	waitAgentAt(t, nodes[0], "", prov.sess.AgentID, nodes[1])
	body := corpus(t, "req-chat-1k-01.json")
	provDone, stop := answerEach(t, prov, body)

	lost := func() float64 {
		return metric(t, nodes[0], "m2md_cluster_dropped_total", "reason=slow_consumer") +
			metric(t, nodes[1], "m2md_cluster_dropped_total", "reason=slow_consumer")
	}
	ok, failed := 0, 0
	for round := 0; round < 30 && lost() == 0; round++ {
		o, f := burstEnds(t, req, prov.sess.AgentID, body, 64, provDone)
		ok, failed = ok+o, failed+f
	}
	close(stop)
	if err := <-provDone; err != nil {
		t.Fatal(err)
	}
	n := lost()
	if n == 0 {
		t.Fatal("30 bursts of 64 requests and NATS dropped nothing with room for two messages")
	}
	answered := metric(t, nodes[0], "m2md_cluster_lost_total", "outcome=answered") + metric(t, nodes[1], "m2md_cluster_lost_total", "outcome=answered")
	unnamed := metric(t, nodes[0], "m2md_cluster_lost_total", "outcome=unnamed") + metric(t, nodes[1], "m2md_cluster_lost_total", "outcome=unnamed")
	t.Logf("%d replies, %d queue_full; NATS dropped %v messages: %v answered, %v unnamed", ok, failed, n, answered, unnamed)
	if failed == 0 || answered+unnamed < n {
		t.Errorf("%v messages dropped, %v answered and %v unnamed, %d requests failed", n, answered, unnamed, failed)
	}
}
