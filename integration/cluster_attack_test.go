package integration

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// clusterPKI is a cluster CA, made by the certs package as m2md cert makes
// it, and the node certificates it issues, as files in dir.
type clusterPKI struct {
	dir          string
	caPEM, caKey []byte
}

func newClusterPKI(t testing.TB) *clusterPKI {
	t.Helper()
	dir := t.TempDir()
	caPEM, caKey, err := certs.NewCA("test cluster CA", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return &clusterPKI{dir: dir, caPEM: caPEM, caKey: caKey}
}

// issue makes node's certificate for 127.0.0.1, valid from an hour before
// now for validity (0: the default), and returns the identity option that
// uses it with trust (a CA file; "" for this PKI's CA).
func (p *clusterPKI) issue(t testing.TB, node string, now time.Time, validity time.Duration, trust string) func(*cluster.Config) {
	t.Helper()
	certPEM, keyPEM, err := certs.IssueNode(p.caPEM, p.caKey, certs.NodeRequest{Node: node, Hosts: []string{"127.0.0.1"}, Validity: validity}, now)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(p.dir, node+".pem"), filepath.Join(p.dir, node+".key")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if trust == "" {
		trust = filepath.Join(p.dir, "ca.pem")
	}
	return func(c *cluster.Config) {
		var err error
		if c.Cert, c.CA, err = cluster.LoadIdentity(certFile, keyFile, trust); err != nil {
			t.Fatal(err)
		}
	}
}

// selfSigned is a rogue's identity: a certificate for 127.0.0.1 signed by
// its own key, trusted by itself alone.
func selfSigned(t testing.TB, dir string) func(*cluster.Config) {
	t.Helper()
	certPEM, keyPEM, err := certs.NewCA("rogue", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return func(c *cluster.Config) { c.Cert, c.CA = &cert, pool }
}

// TestClusterRogueNodesCannotJoin: a node presenting a certificate the
// cluster CA did not issue (self-signed, or from another CA) or one it
// issued that has expired forms no route with the cluster: no member hears
// it, an agent it registers under a member's agent id replaces nothing, the
// members keep routing, and both ends log why.
func TestClusterRogueNodesCannotJoin(t *testing.T) {
	pki := newClusterPKI(t)
	other := newClusterPKI(t)
	var memberLog lockedBuffer
	nodes := []*testDaemon{}
	var seed string
	for i, name := range []string{"member-a", "member-b"} {
		var routes []string
		if i > 0 {
			routes = []string{seed}
		}
		id := pki.issue(t, name, time.Now(), 0, "")
		nodes = append(nodes, startDaemon(t, func(c *daemon.Config) {
			clusterConfig(routes, func(cc *cluster.Config) { id(cc); cc.Node = name })(c)
			c.Logger = zerolog.New(&memberLog)
		}))
		seed = "nats://" + nodes[0].Cluster().RouteAddr.String()
	}
	waitMesh(t, nodes)
	prov := mustDialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "bob", Models: []string{"gpt-4o"}})
	req := mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "alice"})
	waitAgentAt(t, nodes[0], "", "bob", nodes[1])

	rogues := []struct {
		name     string
		identity func(*cluster.Config)
		log      lockedBuffer
		d        *testDaemon
	}{
		{name: "self-signed", identity: selfSigned(t, t.TempDir())},
		{name: "other-CA", identity: other.issue(t, "rogue-other", time.Now(), 0, filepath.Join(pki.dir, "ca.pem"))},
		{name: "expired", identity: pki.issue(t, "rogue-expired", time.Now().Add(-72*time.Hour), 24*time.Hour, "")},
	}
	for i := range rogues {
		r := &rogues[i]
		r.d = startDaemon(t, func(c *daemon.Config) {
			clusterConfig([]string{seed}, r.identity)(c)
			c.Logger = zerolog.New(&r.log)
		})
		// The impersonation the rogue is after: the real bob's id.
		mustDialRaw(t, r.d, "ws", negotiate.ClientConfig{AgentID: "bob", Models: []string{"gpt-4o"}})
	}
	time.Sleep(2 * time.Second) // several heartbeats, and NATS's route retries
	for i := range rogues {
		r := &rogues[i]
		if n := r.d.Cluster().Nodes; n != 0 {
			t.Errorf("%s rogue hears %d nodes", r.name, n)
		}
	}
	// A rogue that checks the members' certificates sees they are not of
	// its CA; one that does not only sees its routes closed by the members
	// (TLS 1.3 reports a refused client certificate after the handshake).
	if l := rogues[0].log.String(); !strings.Contains(l, "certificate signed by unknown authority") {
		t.Errorf("self-signed rogue's log does not say why its routes failed:\n%s", l)
	}
	waitMesh(t, nodes) // the members hear each other, and only each other
	waitAgentAt(t, nodes[0], "", "bob", nodes[1])
	roundTrip(t, req, prov) // the real bob still gets alice's requests
	logs := memberLog.String()
	for _, want := range [][]string{
		{"remote error: tls: bad certificate"}, // the self-signed rogue refused theirs
		{"certificate signed by unknown authority", "CN=rogue-other"},
		{"certificate has expired", "CN=rogue-expired"},
	} {
		if !logHas(logs, want...) {
			t.Errorf("members' log has no line saying %q:\n%s", want, logs)
		}
	}
}

// logHas reports whether one line of logs contains every one of want.
func logHas(logs string, want ...string) bool {
	for _, line := range strings.Split(logs, "\n") {
		all := true
		for _, w := range want {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// recordingRelay forwards TCP connections to target and keeps every byte
// that crosses it, in both directions: a passive observer on the link.
type recordingRelay struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	rec    bytes.Buffer
	wg     sync.WaitGroup
	conns  []net.Conn
}

func startRelay(t testing.TB, target string) *recordingRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingRelay{ln: ln, target: target}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *recordingRelay) accept() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			in.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, in, out)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(out, in)
		go r.pipe(in, out)
	}
}

func (r *recordingRelay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			r.rec.Write(buf[:n])
			r.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (r *recordingRelay) recorded() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.rec.Bytes())
}

func (r *recordingRelay) close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// TestClusterRouteRecorderSeesNothing: a passive recorder of the route
// link between two nodes with mutual TLS (and, as well, a cluster
// password) records the routes' bytes, among them a request of an aead
// session and its reply crossing the link, and finds neither the password
// nor any of their text.
func TestClusterRouteRecorderSeesNothing(t *testing.T) {
	const password = "correct-horse-battery-staple"
	secret := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"the launch code is ZEBRA-4471-QUARTZ"}]}`)
	answer := []byte(`{"id":"r1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"acknowledged MARMALADE-9"}}]}`)
	pki := newClusterPKI(t)
	a := startDaemon(t, clusterConfig(nil, func(c *cluster.Config) {
		pki.issue(t, "node-a", time.Now(), 0, "")(c)
		c.User, c.Password = "m2md", password
	}))
	relay := startRelay(t, a.Cluster().RouteAddr.String())
	b := startDaemon(t, clusterConfig([]string{"nats://" + relay.ln.Addr().String()}, func(c *cluster.Config) {
		pki.issue(t, "node-b", time.Now(), 0, "")(c)
		c.User, c.Password = "m2md", password
	}))
	nodes := []*testDaemon{a, b}
	waitMesh(t, nodes)

	prov := mustDialRaw(t, b, "ws", negotiate.ClientConfig{AgentID: "rprov", Security: frame.SecurityAEAD, Models: []string{"gpt-4o"}})
	req := mustDialRaw(t, a, "ws", negotiate.ClientConfig{AgentID: "rreq", Security: frame.SecurityAEAD})
	waitAgentAt(t, a, "", "rprov", b)
	before := len(relay.recorded())
	_, id := req.request("rprov", secret)
	got := prov.recvData(5 * time.Second)
	if !bytes.Equal(got.body, secret) {
		t.Fatalf("provider got %q (err %v)", got.body, got.err)
	}
	prov.reply(got.ch, got.hdr.RequestID, true, answer)
	back := req.recvData(5 * time.Second)
	if back.hdr.RequestID != id || !bytes.Equal(back.body, answer) {
		t.Fatalf("requester got id %d body %q (err %v)", back.hdr.RequestID, back.body, back.err)
	}
	rec := relay.recorded()
	if crossed := len(rec) - before; crossed < len(secret)+len(answer) {
		t.Fatalf("the relay saw %d bytes during the round trip: the request did not cross it", crossed)
	}
	for _, s := range []string{password, "ZEBRA-4471", "MARMALADE", `"pass"`, "gpt-4o", "rprov", "rreq"} {
		if bytes.Contains(rec, []byte(s)) {
			t.Errorf("the recorder saw %q on the route link", s)
		}
	}
}
