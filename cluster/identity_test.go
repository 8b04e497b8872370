package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/m2md/m2md/certs"
)

// caNodes makes nodes of one cluster whose certificates a test CA issued,
// without NATS: the test goroutine is their dispatcher, and hands them
// messages as the inbox would.
func caNodes(t testing.TB, names ...string) []*Cluster {
	t.Helper()
	now := time.Now()
	caPEM, caKey, err := certs.NewCA("m2md cluster CA", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(caPEM)
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	var out []*Cluster
	for _, node := range names {
		cp, kp, err := certs.IssueNode(caPEM, caKey, certs.NodeRequest{Node: node, Hosts: []string{"127.0.0.1"}, Validity: time.Hour}, now)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		c := &Cluster{cfg: Config{Node: node, Name: "m2md", CA: pool, Cert: &cert}, inc: node + "-inc", h: &recorder{},
			peers: make(map[string]*peer), rx: make(map[string]series)}
		if c.me, err = newSelf(&c.cfg); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// ctlFrom is control message m from node from (its identity filled in),
// signed, as it would cross NATS.
func ctlFrom(t testing.TB, from *Cluster, m ctlMsg) []byte {
	t.Helper()
	m.Node, m.Inc, m.KX, m.Cert = from.cfg.Node, from.inc, from.me.kxPub, from.me.chain
	if m.T == "" {
		m.T = "hb"
	}
	if m.TS == 0 {
		m.TS = time.Now().UnixMilli()
	}
	if m.Born == 0 {
		m.Born = from.me.born
	}
	body := marshalControl(&m)
	sig, err := sign(from.me.signer, from.signed(body))
	if err != nil {
		t.Fatal(err)
	}
	return appendControl(nil, body, sig)
}

// takeCtl hands control message b to c's authentication, as the
// dispatcher does.
func takeCtl(t testing.TB, c *Cluster, b []byte) bool {
	t.Helper()
	var cm ctlMsg
	body, sig, err := decodeControl(b, &cm)
	if err != nil {
		t.Fatal(err)
	}
	return c.authControl(&cm, body, sig)
}

// hearCtl hands control message b to what noteHeard checks.
func hearCtl(t testing.TB, c *Cluster, b []byte) bool {
	t.Helper()
	var cm ctlMsg
	body, sig, err := decodeControl(b, &cm)
	if err != nil {
		t.Fatal(err)
	}
	return c.heardFrom(&cm, body, sig)
}

// TestForgottenIncarnationKeepsCounters: when a node forgets another's
// identity (silent, not a member, for memberHorizon) and then hears the
// same incarnation again, the pair's keys are the same as before: neither
// a data message nor a control message taken before is taken again.
func TestForgottenIncarnationKeepsCounters(t *testing.T) {
	ns := caNodes(t, "a", "b")
	a, b := ns[0], ns[1]
	if !takeCtl(t, a, ctlFrom(t, b, ctlMsg{Ctr: 1})) || !takeCtl(t, b, ctlFrom(t, a, ctlMsg{Ctr: 1})) {
		t.Fatal("a and b do not take each other's first message")
	}
	inner, err := appendRequest(nil, &Request{Seq: 1, From: "b", W: 42, Requester: "r", Target: "p", Frame: []byte("pay 100")})
	if err != nil {
		t.Fatal(err)
	}
	captured := b.seal(nil, b.member("a"), inner)
	var req Request
	var rep Reply
	a.handle(inMsg{data: append([]byte(nil), captured...)}, &req, &rep)
	ha := a.h.(*recorder)
	if len(ha.reqs) != 1 {
		t.Fatalf("a took %d requests, want 1", len(ha.reqs))
	}
	ctl2 := ctlFrom(t, b, ctlMsg{Ctr: 2})
	if !takeCtl(t, a, ctl2) {
		t.Fatal("b's second message not taken")
	}

	a.member("b").lastAuth.Store(time.Now().Add(-2 * memberHorizon).UnixNano())
	a.forgetMembers(time.Now())
	if a.member("b") != nil {
		t.Fatal("a did not forget b")
	}
	if takeCtl(t, a, ctl2) {
		t.Fatal("a took b's control message (ctr 2) a second time after forgetting b")
	}
	if !takeCtl(t, a, ctlFrom(t, b, ctlMsg{Ctr: 3})) {
		t.Fatalf("a does not take b's next message after forgetting it: %v", dropsOf(a))
	}
	replayed := a.stats.Dropped[DropReplayed].Load()
	a.handle(inMsg{data: append([]byte(nil), captured...)}, &req, &rep)
	if len(ha.reqs) != 1 {
		t.Fatalf("a took the captured request again after hearing b's same incarnation anew: %d requests", len(ha.reqs))
	}
	if a.stats.Dropped[DropReplayed].Load() != replayed+1 {
		t.Fatalf("the replayed request was not counted replayed: %v", dropsOf(a))
	}
	// What b seals next is still taken.
	inner2, _ := appendRequest(nil, &Request{Seq: 2, From: "b", W: 43, Requester: "r", Target: "p", Frame: []byte("x")})
	a.handle(inMsg{data: b.seal(nil, b.member("a"), inner2)}, &req, &rep)
	if len(ha.reqs) != 2 {
		t.Fatalf("a did not take b's next request: %d requests", len(ha.reqs))
	}
}

// TestForgottenTableBounded: the counters kept of forgotten identities
// stay within maxForgotten entries.
func TestForgottenTableBounded(t *testing.T) {
	a := &Cluster{peers: map[string]*peer{}}
	for i := range maxForgotten + 10 {
		node := "n" + time.Duration(i).String()
		a.members.Store(node, &member{node: node, inc: "i"})
		a.forgetMembers(time.Now().Add(time.Duration(i) * time.Millisecond))
	}
	if len(a.forgotten) != maxForgotten {
		t.Fatalf("%d forgotten identities kept, want %d", len(a.forgotten), maxForgotten)
	}
}

// TestControlTakenOnce: every control message is taken at most once, the
// first of an incarnation too (by the dispatcher and by noteHeard), and a
// replayed one is refused by its counter before any signature is checked.
func TestControlTakenOnce(t *testing.T) {
	ns := caNodes(t, "a", "b")
	a, b := ns[0], ns[1]
	first := ctlFrom(t, b, ctlMsg{T: "snap", Ctr: 7})
	if !takeCtl(t, a, first) {
		t.Fatal("b's first message not taken")
	}
	if takeCtl(t, a, first) {
		t.Fatal("b's first message taken twice")
	}
	if hearCtl(t, a, first) {
		t.Fatal("noteHeard took b's first message, already taken, as news")
	}
	// An old counter with a signature that does not verify: refused as a
	// replay, without the verification.
	var cm ctlMsg
	body, sig, _ := decodeControl(first, &cm)
	bad := appendControl(nil, body, make([]byte, len(sig)))
	before := a.stats.Dropped[DropReplayed].Load()
	if takeCtl(t, a, bad) || a.stats.Dropped[DropReplayed].Load() != before+1 {
		t.Fatalf("an old counter with a bad signature is not counted replayed: %v", dropsOf(a))
	}
	if !hearCtl(t, a, ctlFrom(t, b, ctlMsg{Ctr: 8})) {
		t.Fatal("noteHeard does not take b's next message")
	}
}

// TestHeardOnlyWhatIsForThisNode: a control message b sent to another
// node, copied onto the control subject, is not news that b is alive.
func TestHeardOnlyWhatIsForThisNode(t *testing.T) {
	ns := caNodes(t, "a", "b")
	a, b := ns[0], ns[1]
	if !takeCtl(t, a, ctlFrom(t, b, ctlMsg{Ctr: 1})) {
		t.Fatal("b's first message not taken")
	}
	toC := ctlFrom(t, b, ctlMsg{T: "sync", To: "c", Ctr: 2})
	if takeCtl(t, a, toC) {
		t.Fatal("a took b's message to c")
	}
	if hearCtl(t, a, toC) {
		t.Fatal("noteHeard took b's message to c as news of b")
	}
	if !hearCtl(t, a, ctlFrom(t, b, ctlMsg{T: "sync", To: "a", Ctr: 3})) {
		t.Fatal("noteHeard did not take b's message to a")
	}
}

// TestBornInFutureRefused: an incarnation that says it began later than
// the control window from now is refused, or every later incarnation of
// its node would look older.
func TestBornInFutureRefused(t *testing.T) {
	ns := caNodes(t, "a", "b")
	a, b := ns[0], ns[1]
	if takeCtl(t, a, ctlFrom(t, b, ctlMsg{Ctr: 1, Born: time.Now().Add(2 * ctlWindow).UnixNano()})) {
		t.Fatal("a took an incarnation born in the future")
	}
	if a.stats.Dropped[DropStale].Load() != 1 {
		t.Fatalf("not counted stale: %v", dropsOf(a))
	}
	if !takeCtl(t, a, ctlFrom(t, b, ctlMsg{Ctr: 2})) {
		t.Fatal("a does not take b's incarnation born now")
	}
}

// BenchmarkForgedControl is the cost to a node of one forged or replayed
// control message: a forgery of a new incarnation (a node's public
// certificate copied, a signature that does not verify), a forgery for
// the incarnation known, and a captured message replayed.
func BenchmarkForgedControl(b *testing.B) {
	for _, bc := range []struct {
		name  string
		setup func(b *testing.B, a, n *Cluster) []byte
	}{
		{"new-incarnation", func(b *testing.B, a, n *Cluster) []byte {
			m := ctlFrom(b, n, ctlMsg{Ctr: 1})
			var cm ctlMsg
			body, sig, _ := decodeControl(m, &cm)
			return appendControl(nil, body, make([]byte, len(sig)))
		}},
		{"known-incarnation", func(b *testing.B, a, n *Cluster) []byte {
			takeCtl(b, a, ctlFrom(b, n, ctlMsg{Ctr: 1}))
			m := ctlFrom(b, n, ctlMsg{Ctr: 2})
			var cm ctlMsg
			body, sig, _ := decodeControl(m, &cm)
			return appendControl(nil, body, make([]byte, len(sig)))
		}},
		{"replayed", func(b *testing.B, a, n *Cluster) []byte {
			takeCtl(b, a, ctlFrom(b, n, ctlMsg{Ctr: 1}))
			m := ctlFrom(b, n, ctlMsg{Ctr: 2})
			takeCtl(b, a, m)
			return m
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ns := caNodes(b, "a", "b")
			msg := bc.setup(b, ns[0], ns[1])
			b.ResetTimer()
			for range b.N {
				if takeCtl(b, ns[0], msg) {
					b.Fatal("taken")
				}
			}
		})
	}
}

// dropsOf is what c dropped, by reason, for a test's message.
func dropsOf(c *Cluster) map[string]uint64 {
	m := map[string]uint64{}
	for _, r := range DropReasons() {
		m[r.String()] = c.stats.Dropped[r].Load()
	}
	return m
}
