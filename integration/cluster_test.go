package integration

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
)

// clusterConfig makes a node of an embedded-mode cluster on loopback whose
// routes point at the given route URLs. Heartbeats are the defaults: the
// tests check the promises as shipped.
func clusterConfig(routes []string, mutate func(*cluster.Config)) func(*daemon.Config) {
	return func(c *daemon.Config) {
		c.Cluster = cluster.Config{Listen: "127.0.0.1:0", Routes: routes}
		if mutate != nil {
			mutate(&c.Cluster)
		}
		c.MessagesPerMinute = -1
		c.BytesPerSecond = -1
	}
}

// startCluster starts n daemons that form one cluster: the first listens,
// the others route to it (NATS gossips the rest of the mesh), and waits
// until every node hears every other.
func startCluster(t testing.TB, n int, mutate func(*cluster.Config), dmutate func(*daemon.Config)) []*testDaemon {
	t.Helper()
	var nodes []*testDaemon
	var seed string
	for i := range n {
		var routes []string
		if i > 0 {
			routes = []string{seed}
		}
		nodes = append(nodes, startDaemon(t, func(c *daemon.Config) {
			clusterConfig(routes, mutate)(c)
			if dmutate != nil {
				dmutate(c)
			}
		}))
		if i == 0 {
			seed = "nats://" + nodes[0].Cluster().RouteAddr.String()
			if u := nodes[0].routeUser; u != "" {
				seed = "nats://" + u + "@" + nodes[0].Cluster().RouteAddr.String()
			}
		}
	}
	waitMesh(t, nodes)
	return nodes
}

// waitMesh waits until every node hears every other one.
func waitMesh(t testing.TB, nodes []*testDaemon) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range nodes {
		for d.Cluster().Nodes != len(nodes)-1 {
			if time.Now().After(deadline) {
				t.Fatalf("node %s hears %d nodes, want %d", d.Cluster().Node, d.Cluster().Nodes, len(nodes)-1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// waitAgentAt waits until node d routes agentID to node at ("" for d
// itself).
func waitAgentAt(t testing.TB, d *testDaemon, agentID string, at *testDaemon) {
	t.Helper()
	want := ""
	if at != d {
		want = at.Cluster().Node
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if node, ok := d.AgentNode("", agentID); ok && node == want {
			return
		}
		if time.Now().After(deadline) {
			node, ok := d.AgentNode("", agentID)
			t.Fatalf("node %s routes %s to %q (known %v), want %q", d.Cluster().Node, agentID, node, ok, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitAgentGone waits until no node knows agentID.
func waitAgentGone(t testing.TB, nodes []*testDaemon, agentID string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range nodes {
		for {
			if _, ok := d.AgentNode("", agentID); !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s still knows %s", d.Cluster().Node, agentID)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// TestClusterRouting: a requester on one node reaches a provider on
// another by agent id and by model, in every security mode and over both
// transports, and a stream of chunks arrives complete and in order.
func TestClusterRouting(t *testing.T) {
	nodes := startCluster(t, 3, nil, nil)
	reqBody := corpus(t, "req-chat-1k-01.json") // model gpt-4o
	respBody := corpus(t, "resp-chat-06.json")
	for i, mode := range modes {
		for j, tr := range transports {
			t.Run(fmt.Sprintf("%s/%s", mode, tr), func(t *testing.T) {
				suffix := mode.String() + "-" + tr
				pn, rn := nodes[(i+j)%3], nodes[(i+j+1)%3]
				// Runs after the provider's own cleanup has closed it: the
				// next subtest routes gpt-4o too, and must not find it.
				t.Cleanup(func() { waitAgentGone(t, nodes, "cprov-"+suffix) })
				prov := mustDialRaw(t, pn, tr, negotiate.ClientConfig{AgentID: "cprov-" + suffix, Security: mode, Models: []string{"gpt-4o"}})
				req := mustDialRaw(t, rn, transports[1-j], negotiate.ClientConfig{AgentID: "creq-" + suffix, Security: mode})
				waitAgentAt(t, rn, prov.sess.AgentID, pn)

				for _, peer := range []string{prov.sess.AgentID, ""} {
					_, id := req.request(peer, reqBody)
					got := prov.recvData(5 * time.Second)
					if got.hdr.IsReply() || !bytes.Equal(got.body, reqBody) || got.peer != req.sess.AgentID {
						t.Fatalf("peer %q: provider got reply=%v peer=%q err=%v", peer, got.hdr.IsReply(), got.peer, got.err)
					}
					prov.reply(got.ch, got.hdr.RequestID, true, respBody)
					back := req.recvData(5 * time.Second)
					if !back.hdr.IsReply() || !back.hdr.IsEnd() || back.hdr.RequestID != id || !bytes.Equal(back.body, respBody) || back.peer != prov.sess.AgentID {
						t.Fatalf("peer %q: requester got flags %v id %d (want %d) peer %q err %v", peer, back.hdr.Flags, back.hdr.RequestID, id, back.peer, back.err)
					}
				}

				// A stream: every chunk, in order, END on the last only.
				const chunks = 50
				_, id := req.request(prov.sess.AgentID, corpus(t, "req-stream-01.json"))
				dl := prov.recvData(5 * time.Second)
				for k := range chunks {
					prov.reply(dl.ch, dl.hdr.RequestID, k == chunks-1, chunk("x", k))
				}
				for k := range chunks {
					r := req.recvData(5 * time.Second)
					if r.hdr.RequestID != id || !bytes.Equal(r.body, chunk("x", k)) || r.hdr.IsEnd() != (k == chunks-1) {
						t.Fatalf("chunk %d: id %d end %v body %.60q", k, r.hdr.RequestID, r.hdr.IsEnd(), r.body)
					}
				}
			})
		}
	}
}
