package integration

import (
	"bytes"
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
	const deadAfter = 10 * time.Second
	nodes := startCluster(t, 2, func(c *cluster.Config) { c.Inbox, c.Headroom, c.DeadAfter = 1, 1, deadAfter }, nil)
	prov := mustDialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "lsprov"})
	req := mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "lsreq"})
	// The burst of a node's first messages (identity, snapshot, the
	// announcement) overflows an inbox of one too; a lost one is asked for
	// again after DeadAfter.
	waitAgentAtWithin(t, nodes[0], "", prov.sess.AgentID, nodes[1], 2*deadAfter+5*time.Second)
	body := corpus(t, "req-chat-1k-01.json")
	provDone, stop := answerEach(t, prov, body)

	lost := func() float64 {
		return metric(t, nodes[0], "m2md_cluster_dropped_total", "reason=slow_consumer") +
			metric(t, nodes[1], "m2md_cluster_dropped_total", "reason=slow_consumer")
	}
	ok, failed := 0, 0
	for round := 0; round < 30 && lost() == 0; round++ {
		o, f := burstEnds(t, req, prov.sess.AgentID, body, 256, provDone)
		ok, failed = ok+o, failed+f
	}
	close(stop)
	if err := <-provDone; err != nil {
		t.Fatal(err)
	}
	n := lost()
	if n == 0 {
		t.Fatal("30 bursts of 256 requests and NATS dropped nothing with room for two messages")
	}
	answered := metric(t, nodes[0], "m2md_cluster_lost_total", "outcome=answered") + metric(t, nodes[1], "m2md_cluster_lost_total", "outcome=answered")
	unnamed := metric(t, nodes[0], "m2md_cluster_lost_total", "outcome=unnamed") + metric(t, nodes[1], "m2md_cluster_lost_total", "outcome=unnamed")
	t.Logf("%d replies, %d queue_full; NATS dropped %v messages: %v answered, %v unnamed", ok, failed, n, answered, unnamed)
	if failed == 0 || answered+unnamed < n {
		t.Errorf("%v messages dropped, %v answered and %v unnamed, %d requests failed", n, answered, unnamed, failed)
	}
}

// TestClusterLostChunk: streams keep no hole when NATS drops a chunk. A
// provider on the other node interleaves the chunks of many streams as
// fast as it can into a requester's node with room for nine messages:
// some chunks are shed, some dropped by NATS. Each stream the requester
// sees is chunks 0, 1, 2, ... without a gap, then its END or queue_full:
// a chunk after a lost one is not delivered (the requester's node sees
// its place among the replies, cluster.Reply.N, skip), so a stream never
// looks whole with a chunk missing. Fails without that check: streams
// arrive with holes, some of them ending as if complete.
func TestClusterLostChunk(t *testing.T) {
	nodes := startCluster(t, 2, func(c *cluster.Config) { c.Inbox, c.Headroom, c.DeadAfter = 8, 1, 10*time.Second }, nil)
	prov := mustDialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "lcprov"})
	req := mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "lcreq"})
	waitAgentAt(t, nodes[0], "", prov.sess.AgentID, nodes[1])
	const streams, chunks = 16, 60
	frames := make([][]byte, chunks)
	for k := range frames {
		frames[k] = encode(t, chunk("c", k))
	}
	lost := func() float64 {
		return metric(t, nodes[0], "m2md_cluster_dropped_total", "reason=slow_consumer")
	}
	holes := 0
	for round := 0; round < 20 && lost() == 0; round++ {
		// One request at a time (none is shed on the way), then all the
		// answers at once.
		next := map[uint64]int{} // request id -> next chunk expected; -1 once ended
		var dl []*received
		for range streams {
			_, id := req.request(prov.sess.AgentID, corpus(t, "req-stream-01.json"))
			next[id] = 0
			dl = append(dl, prov.recvData(5*time.Second))
		}
		for k := range chunks {
			for _, d := range dl {
				flags := negotiate.FlagReply
				if k == chunks-1 {
					flags |= negotiate.FlagEnd
				}
				// The provider's own NOTICEs (for what was shed or lost)
				// wait in its connection: it keeps streaming regardless.
				if err := prov.send(d.ch, flags, d.hdr.RequestID, "", prov.protect(d.ch, frames[k])); err != nil {
					t.Fatal(err)
				}
			}
		}
		for open := streams; open > 0; {
			r := req.recvData(10 * time.Second)
			want, ok := next[r.hdr.RequestID]
			if !ok || want < 0 {
				t.Fatalf("round %d: reply to %d, which is not open", round, r.hdr.RequestID)
			}
			switch {
			case r.code == string(negotiate.CodeQueueFull) && r.hdr.IsEnd():
				next[r.hdr.RequestID] = -1
				open--
				continue
			case r.code != "":
				t.Fatalf("round %d: request %d: error %q", round, r.hdr.RequestID, r.code)
			}
			if !bytes.Equal(r.body, chunk("c", want)) {
				holes++
				t.Errorf("round %d: request %d: chunk %.40q where chunk %d was due", round, r.hdr.RequestID, r.body[len(r.body)-40:], want)
			}
			next[r.hdr.RequestID] = want + 1
			if r.hdr.IsEnd() {
				next[r.hdr.RequestID] = -1
				open--
			}
		}
		if holes > 0 {
			t.FailNow()
		}
	}
	if lost() == 0 {
		t.Fatal("20 rounds of 16 interleaved streams and NATS dropped nothing at the requester's node")
	}
}
