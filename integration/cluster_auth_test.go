package integration

import (
	"bytes"
	"encoding/binary"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// TestClusterForgeryRefused: a NATS client on the cluster's NATS but
// without a node's key - a plain client of an existing NATS deployment
// (--nats-url), or one on a rogue server that joined the embedded routes
// with the cluster password - reads every cluster subject while alice
// asks bob (another node) over an aead session, then announces acme/bob,
// injects a forged request from alice's node as "ceo", and replays every
// message it captured. It reads no request or reply text; bob is not
// replaced and gets nothing forged or replayed, alice no second reply;
// every drop is counted, and the two nodes go on serving.
func TestClusterForgeryRefused(t *testing.T) {
	orgs := func(c *daemon.Config) { c.OrgSecrets = map[string]security.Secret{"acme": testMaster} }
	for _, mode := range []string{"external", "embedded"} {
		t.Run(mode, func(t *testing.T) {
			var nodes []*testDaemon
			var attacker string
			if mode == "external" {
				_, natsURL := startNATS(t)
				for range 2 {
					nodes = append(nodes, startDaemon(t, func(c *daemon.Config) {
						c.Cluster = cluster.Config{URLs: []string{natsURL}}
						orgs(c)
					}))
				}
				waitMesh(t, nodes)
				attacker = natsURL
			} else {
				const user, password = "m2md", "correct horse battery staple"
				nodes = startCluster(t, 2, func(c *cluster.Config) { c.User, c.Password = user, password }, orgs)
				attacker = rogueServer(t, nodes[0].Cluster().RouteAddr.String(), user, password)
			}
			forgeAndReplay(t, nodes, attacker)
		})
	}
}

// rogueServer runs a nats-server that joins the embedded routes at route
// with the cluster's password (stolen: the routes carry no more than it)
// and returns its client URL.
func rogueServer(t *testing.T, route, user, password string) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true, MaxPayload: cluster.MaxMessage,
		Cluster: server.ClusterOpts{Name: cluster.DefaultName, Host: "127.0.0.1", Port: server.RANDOM_PORT, Username: user, Password: password},
		Routes:  []*url.URL{{Scheme: "nats", Host: route, User: url.UserPassword(user, password)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("rogue nats-server did not start")
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.NumRoutes() < 2 { // to both nodes: NATS gossips the mesh
		if time.Now().After(deadline) {
			t.Fatalf("rogue server has %d routes, want 2", s.NumRoutes())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "nats://" + s.Addr().String()
}

func forgeAndReplay(t *testing.T, nodes []*testDaemon, natsURL string) {
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	var captured []*nats.Msg
	sub, err := nc.Subscribe("m2md.>", func(m *nats.Msg) { mu.Lock(); captured = append(captured, m); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	countSealed := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, m := range captured {
			if len(m.Data) > 0 && m.Data[0] == 0x09 {
				n++
			}
		}
		return n
	}
	// The subscription's interest reaches every server before the
	// attacker hears the nodes' heartbeats.
	waitUntil(t, "the attacker hears heartbeats", func() bool { mu.Lock(); defer mu.Unlock(); return len(captured) >= 4 })

	a, b := nodes[0], nodes[1]
	// Every reason is on /metrics from the start, at zero, so that an
	// alert on its rate sees the first forgery.
	_, body := adminGet(t, b, "/metrics")
	for _, r := range cluster.DropReasons() {
		if !strings.Contains(body, `m2md_cluster_dropped_total{reason="`+r.String()+`"} 0`) {
			t.Fatalf("/metrics lacks m2md_cluster_dropped_total{reason=%q} at zero", r)
		}
	}
	cc := func(id string) negotiate.ClientConfig {
		return negotiate.ClientConfig{AgentID: id, Org: "acme", AgentKey: agentKey(t, testMaster, "acme", id), Security: frame.SecurityAEAD}
	}
	bob := mustDialRaw(t, b, "ws", cc("bob"))
	alice := mustDialRaw(t, a, "ws", cc("alice"))
	waitAgentAt(t, a, "acme", "bob", b)

	secret := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"the launch code is swordfish-7431"}]}`)
	answer := []byte(`{"choices":[{"message":{"role":"assistant","content":"noted: swordfish-7431"}}]}`)
	_, id := alice.request("bob", secret)
	got := bob.recvData(5 * time.Second)
	if !bytes.Equal(got.body, secret) || got.peer != "alice" {
		t.Fatalf("bob got peer %q err %v", got.peer, got.err)
	}
	bob.reply(got.ch, got.hdr.RequestID, true, answer)
	if back := alice.recvData(5 * time.Second); back.hdr.RequestID != id || !bytes.Equal(back.body, answer) {
		t.Fatalf("alice got id %d code %q", back.hdr.RequestID, back.code)
	}
	waitUntil(t, "the attacker captures the request and the reply", func() bool { return countSealed() >= 2 })
	mu.Lock()
	old := append([]*nats.Msg(nil), captured...)
	mu.Unlock()
	for _, m := range old {
		if bytes.Contains(m.Data, []byte("swordfish")) {
			t.Fatalf("a NATS client read request or reply text on %s", m.Subject)
		}
	}

	// Forgeries: bob announced by a node of the attacker's making, a
	// request in the clear from a's node id as "ceo", and one in a seal
	// that is not a's.
	announce := []byte("\x03" + `{"t":"up","node":"evil","inc":"x","seq":1,"agent":{"org":"acme","id":"bob","session":"s1","node":"evil","stamp":9000000000000000000}}`)
	req := []byte{0x01}
	req = binary.BigEndian.AppendUint64(req, 1<<40)
	req = binary.BigEndian.AppendUint64(req, 7)
	req = append(req, 0)
	for _, s := range []string{a.Cluster().Node, "acme", "ceo", "bob"} {
		req = append(append(req, byte(len(s))), s...)
	}
	req = append(req, secret...)
	sealed := []byte{0x09}
	sealed = binary.BigEndian.AppendUint64(sealed, 1<<40)
	sealed = append(append(sealed, byte(len(a.Cluster().Node))), a.Cluster().Node...)
	sealed = append(sealed, bytes.Repeat([]byte{0x5a}, 64)...)
	bSubj := "m2md.m2md.n." + b.Cluster().Node
	for _, m := range []*nats.Msg{{Subject: "m2md.m2md.ctl", Data: announce}, {Subject: bSubj, Data: req}, {Subject: bSubj, Data: sealed}} {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// Replays: everything captured, to where it went.
	for _, m := range old {
		if err := nc.Publish(m.Subject, m.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{"malformed", "bad_signature", "replayed"} {
		waitMetric(t, b, 1, "m2md_cluster_dropped_total", "reason="+reason)
	}
	waitMetric(t, a, 1, "m2md_cluster_dropped_total", "reason=replayed")
	bob.expectSilence(300 * time.Millisecond)
	alice.expectSilence(100 * time.Millisecond)
	if !b.SessionOpen(bob.sess.ID) {
		t.Fatal("the real bob was replaced")
	}
	waitAgentAt(t, a, "acme", "bob", b)
	waitAgentAt(t, b, "acme", "bob", b)
	roundTrip(t, alice, bob)
	if n := a.Cluster().Nodes; n != 1 {
		t.Fatalf("node a hears %d nodes, want 1 (no node of the attacker's making)", n)
	}
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nodeRecorder is a cluster.Handler for a bare cluster node in a test.
type nodeRecorder struct {
	mu      sync.Mutex
	up      []cluster.Agent
	replies []cluster.Reply
}

func (r *nodeRecorder) AgentUp(a cluster.Agent) { r.mu.Lock(); r.up = append(r.up, a); r.mu.Unlock() }
func (r *nodeRecorder) AgentDown(cluster.Agent) {}
func (r *nodeRecorder) NodeDown(string)         {}
func (r *nodeRecorder) Request(*cluster.Request) {
}
func (r *nodeRecorder) Reply(p *cluster.Reply) {
	c := *p
	c.Frame = bytes.Clone(p.Frame)
	r.mu.Lock()
	r.replies = append(r.replies, c)
	r.mu.Unlock()
}
func (r *nodeRecorder) Cancel(*cluster.Cancel) {}
func (r *nodeRecorder) Notice(*cluster.Notice) {}
func (r *nodeRecorder) Lost(*cluster.Lost)     {}

// TestClusterStrangerRefused: a node that a daemon declared dead (it heard
// nothing from it for a second) while that node still hears the daemon -
// a one-way partition - sends a request for one of the daemon's agents.
// The daemon does not count it as a member, so it refuses the request with
// an error reply rather than deliver it: the provider gets nothing, and the
// requester's node gets its answer instead of waiting.
func TestClusterStrangerRefused(t *testing.T) {
	t.Parallel()
	_, natsURL := startNATS(t)
	a := startDaemon(t, func(c *daemon.Config) { c.Cluster = cluster.Config{URLs: []string{natsURL}} })
	prov := mustDialRaw(t, a, "ws", negotiate.ClientConfig{AgentID: "sprov"})
	h := &nodeRecorder{}
	// Node b says it is alive once, at its start, and then not for ten
	// seconds: a declares it dead after one.
	b, err := cluster.Start(cluster.Config{URLs: []string{natsURL}, Node: "quiet", Heartbeat: 10 * time.Second, DeadAfter: 30 * time.Second}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waitUntil(t, "b learns sprov", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.up) == 1 })
	waitMetric(t, a, 1, "m2md_cluster_nodes_down_total")
	if err := b.SendRequest(a.Cluster().Node, &cluster.Request{W: 1, Requester: "remote-req", Target: "sprov", Frame: chatFrame(t, 1)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "b gets its answer", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.replies) == 1 })
	r := h.replies[0]
	body, err := frame.AppendDecode(nil, r.Frame, frame.Limits{})
	if err != nil || r.W != 1 || !r.End || r.N != cluster.Unnumbered || !bytes.Contains(body, []byte("agent_gone")) {
		t.Fatalf("b got reply w %d end %v n %d body %q (%v), want the final error agent_gone", r.W, r.End, r.N, body, err)
	}
	prov.expectSilence(200 * time.Millisecond)
}

// TestClusterRequestOnlyAsAnnouncedAgent: a node (one that holds a
// certificate and acme's secret, and announced acme/x) sends requests into
// a daemon's node. The one as acme/x is delivered; one as x in globex (an
// org whose secret it lacks) and one as acme/ceo (an agent it never
// announced) are refused with an error reply, counted forbidden, and reach
// no provider.
func TestClusterRequestOnlyAsAnnouncedAgent(t *testing.T) {
	globexMaster := []byte("fedcba9876543210fedcba9876543210")
	_, natsURL := startNATS(t)
	a := startDaemon(t, func(c *daemon.Config) {
		c.Cluster = cluster.Config{URLs: []string{natsURL}}
		c.OrgSecrets = map[string]security.Secret{"acme": testMaster, "globex": globexMaster}
	})
	prov := mustDialRaw(t, a, "ws", negotiate.ClientConfig{AgentID: "prov", Org: "acme", AgentKey: agentKey(t, testMaster, "acme", "prov")})
	gprov := mustDialRaw(t, a, "ws", negotiate.ClientConfig{AgentID: "gprov", Org: "globex", AgentKey: agentKey(t, globexMaster, "globex", "gprov")})
	acmeKey, err := cluster.OrgAnnounceKey(testMaster, "acme")
	if err != nil {
		t.Fatal(err)
	}
	h := &nodeRecorder{}
	rogue, err := cluster.Start(cluster.Config{URLs: []string{natsURL}, Node: "rogue", OrgKey: func(org string) []byte {
		if org == "acme" {
			return acmeKey[:]
		}
		return nil
	}}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	rogue.Announce(cluster.Agent{Org: "acme", ID: "x", Session: "s1", Stamp: time.Now().UnixNano()})
	waitUntil(t, "a learns acme/x at the rogue node", func() bool { n, ok := a.AgentNode("acme", "x"); return ok && n == "rogue" })
	node := a.Cluster().Node
	for i, r := range []cluster.Request{
		{W: 1, Org: "globex", Requester: "x", Target: "gprov"},
		{W: 2, Org: "acme", Requester: "ceo", Target: "prov"},
		{W: 3, Org: "acme", Requester: "x", Target: "prov"},
	} {
		r.Frame = chatFrame(t, i)
		if err := rogue.SendRequest(node, &r); err != nil {
			t.Fatal(err)
		}
	}
	got := prov.recvData(5 * time.Second)
	if got.err != nil || got.peer != "x" {
		t.Fatalf("prov got peer %q (%v), want the request of x", got.peer, got.err)
	}
	waitUntil(t, "the rogue node gets two refusals", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.replies) == 2 })
	for _, r := range h.replies {
		body, err := frame.AppendDecode(nil, r.Frame, frame.Limits{})
		if err != nil || (r.W != 1 && r.W != 2) || !r.End || !bytes.Contains(body, []byte("unknown_agent")) {
			t.Fatalf("rogue got reply w %d end %v body %q (%v), want the final error unknown_agent for w 1 or 2", r.W, r.End, body, err)
		}
	}
	waitMetric(t, a, 2, "m2md_cluster_dropped_total", "reason=forbidden")
	prov.expectSilence(200 * time.Millisecond)
	gprov.expectSilence(10 * time.Millisecond)
}
