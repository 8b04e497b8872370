package integration

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
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
			// The cluster package adds the configured user and password.
			seed = "nats://" + nodes[0].Cluster().RouteAddr.String()
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
func waitAgentAt(t testing.TB, d *testDaemon, org, agentID string, at *testDaemon) {
	t.Helper()
	waitAgentAtWithin(t, d, org, agentID, at, 5*time.Second)
}

// waitAgentAtWithin is waitAgentAt with its own bound: a cluster whose
// NATS drops control messages on purpose learns of an agent only when a
// node asks again, after DeadAfter.
func waitAgentAtWithin(t testing.TB, d *testDaemon, org, agentID string, at *testDaemon, within time.Duration) {
	t.Helper()
	want := ""
	if at != d {
		want = at.Cluster().Node
	}
	deadline := time.Now().Add(within)
	for {
		if node, ok := d.AgentNode(org, agentID); ok && node == want {
			return
		}
		if time.Now().After(deadline) {
			node, ok := d.AgentNode(org, agentID)
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
				waitAgentAt(t, rn, "", prov.sess.AgentID, pn)

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

// TestClusterDuplicateAgentID: the newest connection of an agent id
// anywhere wins. The older session, on another node, gets CLOSE REPLACED
// within a second; a request it held ends with agent_gone once it has
// gone; every node then routes the id, and its model, to the new session.
//
// With org secrets (production), as here. A daemon without them lets only
// the holder's own address replace a session, which a node cannot check for
// a holder on another node: there the newcomer is refused (TestClusterOpenModeDuplicate).
func TestClusterDuplicateAgentID(t *testing.T) {
	nodes := startCluster(t, 3, nil, func(c *daemon.Config) {
		c.OrgSecrets = map[string]security.Secret{"acme": testMaster}
	})
	cc := func(id string, models ...string) negotiate.ClientConfig {
		return negotiate.ClientConfig{AgentID: id, Models: models, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", id)}
	}
	for k, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			id := "cdup-" + tr
			model := "dup-model-" + tr
			oldNode, newNode, reqNode := nodes[k], nodes[(k+1)%3], nodes[(k+2)%3]
			old := mustDialRaw(t, oldNode, tr, cc(id, model))
			req := mustDialRaw(t, reqNode, tr, cc("cdupreq-"+tr))
			waitAgentAt(t, reqNode, "acme", id, oldNode)
			_, held := req.request(id, corpus(t, "req-chat-tiny-01.json"))
			old.recvData(5 * time.Second)

			start := time.Now()
			repl := mustDialRaw(t, newNode, tr, cc(id, model))
			cm := old.expectControl(5*time.Second, negotiate.TypeClose)
			if cm.Close == nil || cm.Close.Reason != negotiate.ReasonReplaced {
				t.Fatalf("old session got CLOSE %+v, want REPLACED", cm.Close)
			}
			// One NATS delivery; the bound leaves room for a loaded machine.
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("CLOSE REPLACED came %v after the new session, want within 2 s", el)
			}
			for _, d := range nodes {
				waitAgentAt(t, d, "acme", id, newNode)
			}
			old.sendControl(negotiate.AppendClose(nil, old.sess.ID, time.Now(), negotiate.ReasonReplaced, "ack"))
			expectConnClosed(t, old.conn, 5*time.Second)
			gone := req.expectError(5*time.Second, held, "agent_gone", false)
			if gone.peer != id {
				t.Fatalf("agent_gone names peer %q, want %q", gone.peer, id)
			}
			body := []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`)
			for _, peer := range []string{id, ""} {
				_, rid := req.request(peer, body)
				got := repl.recvData(5 * time.Second)
				repl.reply(got.ch, got.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
				if r := req.recvData(5 * time.Second); r.hdr.RequestID != rid || r.code != "" {
					t.Fatalf("peer %q: reply id %d code %q", peer, r.hdr.RequestID, r.code)
				}
			}
		})
	}
}

// TestClusterOrgAuthentication: every node has the same org secrets;
// authenticated agents of one org reach each other across nodes, and an
// agent of another org with the same ids reaches neither.
func TestClusterOrgAuthentication(t *testing.T) {
	other := []byte("fedcba9876543210fedcba9876543210")
	nodes := startCluster(t, 3, nil, func(c *daemon.Config) {
		c.OrgSecrets = map[string]security.Secret{"acme": testMaster, "evil": other}
	})
	cc := func(org string, master []byte, id string, models ...string) negotiate.ClientConfig {
		return negotiate.ClientConfig{AgentID: id, Security: frame.SecurityAEAD, Models: models, Org: org, AgentKey: agentKey(t, master, org, id)}
	}
	prov := mustDialRaw(t, nodes[1], "quic", cc("acme", testMaster, "oprov", "gpt-4o"))
	req := mustDialRaw(t, nodes[0], "ws", cc("acme", testMaster, "oreq"))
	evil := mustDialRaw(t, nodes[2], "ws", cc("evil", other, "oreq"))
	waitAgentAt(t, nodes[0], "acme", "oprov", nodes[1])
	if !req.sess.Params.Authenticated || !evil.sess.Params.Authenticated {
		t.Fatal("sessions not authenticated")
	}
	roundTrip(t, req, prov)
	// Same agent id in another org: neither replaced nor replacing.
	if _, ok := nodes[0].AgentNode("acme", "oreq"); !ok {
		t.Fatal("evil/oreq on node 2 replaced acme/oreq")
	}
	for _, peer := range []string{"oprov", ""} {
		_, id := evil.request(peer, corpus(t, "req-chat-1k-01.json"))
		want := "unknown_agent"
		if peer == "" {
			want = "no_route"
		}
		evil.expectError(5*time.Second, id, want, false)
	}
}

// TestClusterRouteAuthentication: with a cluster user and password, nodes
// that present them form the cluster, and a node with the wrong password
// is never joined: it hears no other node and nobody hears it.
func TestClusterRouteAuthentication(t *testing.T) {
	auth := func(c *cluster.Config) { c.User, c.Password = "m2md", "correct horse battery staple" }
	nodes := startCluster(t, 2, auth, nil)
	intruder := startDaemon(t, clusterConfig([]string{"nats://" + nodes[0].Cluster().RouteAddr.String()},
		func(c *cluster.Config) { c.User, c.Password = "m2md", "wrong" }))
	time.Sleep(1500 * time.Millisecond) // several heartbeats, and NATS's route retries
	if n := intruder.Cluster().Nodes; n != 0 {
		t.Fatalf("node with the wrong password hears %d nodes", n)
	}
	waitMesh(t, nodes) // the members still hear each other, and only each other
	// An agent registered at the intruder is unknown to the members.
	mustDialRaw(t, intruder, "ws", negotiate.ClientConfig{AgentID: "injected", Models: []string{"gpt-4o"}})
	time.Sleep(300 * time.Millisecond)
	for _, d := range nodes {
		if _, ok := d.AgentNode("", "injected"); ok {
			t.Fatal("an agent of a non-member reached the cluster")
		}
	}
}

// TestClusterOpenModeDuplicate: without org secrets a node refuses a
// newcomer whose agent id is held on another node (it cannot compare the
// holder's address), as it refuses one from another address locally.
func TestClusterOpenModeDuplicate(t *testing.T) {
	nodes := startCluster(t, 2, nil, nil)
	mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "open-dup"})
	waitAgentAt(t, nodes[1], "", "open-dup", nodes[0])
	_, err := dialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "open-dup"})
	var rej *negotiate.RejectError
	if !errors.As(err, &rej) || rej.Code != negotiate.RejectSecurityPolicy {
		t.Fatalf("second session of open-dup on another node: %v, want REJECT SECURITY_POLICY", err)
	}
}

// TestClusterCancel: a requester's CANCEL of a request served on another
// node ends it at once with cancelled, reaches the provider as CANCEL on the
// delivery's channel, and the provider's late replies are dropped.
func TestClusterCancel(t *testing.T) {
	nodes := startCluster(t, 2, nil, nil)
	feat := []negotiate.Feature{negotiate.FeatureCancel}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			prov := mustDialRaw(t, nodes[1], tr, negotiate.ClientConfig{AgentID: "ccprov-" + tr, Models: []string{"cc-" + tr}, Features: feat})
			req := mustDialRaw(t, nodes[0], tr, negotiate.ClientConfig{AgentID: "ccreq-" + tr, Features: feat})
			waitAgentAt(t, nodes[0], "", prov.sess.AgentID, nodes[1])
			body := []byte(`{"model":"cc-` + tr + `","messages":[{"role":"user","content":"x"}]}`)
			ch, id := req.request("", body)
			got := prov.recvData(5 * time.Second)
			req.sendCancel(ch, id)
			ack := req.recvData(5 * time.Second)
			if ack.hdr.RequestID != id || ack.code != string(negotiate.CodeCancelled) || ack.peer != prov.sess.AgentID {
				t.Fatalf("ack %+v", ack)
			}
			expectProviderCancel(t, prov, got)
			prov.reply(got.ch, got.hdr.RequestID, true, []byte(`{"late":1}`))
			req.expectSilence(100 * time.Millisecond)
			expectRequestFlows(t, req, prov, body)
		})
	}
}
