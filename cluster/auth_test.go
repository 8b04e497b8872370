package cluster

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/chacha20poly1305"
)

// ghost makes c know node as an authenticated identity that is not a
// member (it never heard its heartbeats): what c would know of a node that
// declared it dead, or one it declared dead. The returned function seals
// a data message from node for c, with the next nonce.
func ghost(t testing.TB, c *Cluster, node string) func(inner []byte) []byte {
	t.Helper()
	key := make([]byte, chacha20poly1305.KeySize)
	_, _ = rand.Read(key)
	aead, err := chacha20poly1305.New(key)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{node: node, inc: "ghost", tx: aead, rx: aead}
	c.members.Store(node, m)
	var n uint64
	return func(inner []byte) []byte {
		n++
		b := []byte{kindSealed}
		b = binary.BigEndian.AppendUint64(b, n)
		b = append(append(b, byte(len(node))), node...)
		var nonce [chacha20poly1305.NonceSize]byte
		binary.BigEndian.PutUint64(nonce[4:], n)
		return aead.Seal(b, nonce[:], inner, b)
	}
}

// TestNonMemberDataDropped: replies, cancels, notices and gap reports from
// a node that is not a member (authenticated, but never heard as a member
// or declared dead) reach no Handler method and are counted unknown_node;
// a message naming another node than the one whose seal it came in is
// counted forbidden.
func TestNonMemberDataDropped(t *testing.T) {
	url := standaloneNATS(t)
	ha := &recorder{}
	a := startNode(t, Config{URLs: []string{url}, Node: "a"}, ha)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	seal := ghost(t, a, "ghost")
	rep, _ := appendReply(nil, &Reply{Seq: 1, From: "ghost", W: 3, End: true, Provider: "p", Frame: []byte("#M2M")})
	cn, _ := appendCancel(nil, &Cancel{Seq: 2, From: "ghost", W: 3})
	nt, _ := appendNotice(nil, &Notice{Seq: 3, From: "ghost", W: 3, Code: "queue_full", Message: "m"})
	lost, _ := appendGap(nil, &gapMsg{Kind: kindLost, Seq: 4, First: 1, Last: 1, From: "ghost"})
	void, _ := appendGap(nil, &gapMsg{Kind: kindVoid, Seq: 5, From: "ghost"})
	other, _ := appendCancel(nil, &Cancel{Seq: 6, From: "b", W: 3})
	for _, m := range [][]byte{rep, cn, nt, lost, void, other} {
		if err := nc.Publish("m2md.m2md.n.a", seal(m)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "five non-member messages counted", func() bool {
		return a.stats.Dropped[DropUnknownNode].Load() == 5 && a.stats.Dropped[DropForbidden].Load() == 1
	})
	ha.mu.Lock()
	defer ha.mu.Unlock()
	if len(ha.reps) != 0 || len(ha.cancels) != 0 || len(ha.notices) != 0 || len(ha.lost) != 0 {
		t.Fatalf("a non-member's data reached the Handler: %d replies, %d cancels, %d notices, %d lost", len(ha.reps), len(ha.cancels), len(ha.notices), len(ha.lost))
	}
}

// TestForgedControlDropped: control messages that a node's key did not
// sign, that name another node than their certificate, that repeat a
// counter, that fall outside the time window or announce an agent of an org
// without the org's proof are dropped, each counted by its reason, and
// change nothing a Handler sees.
func TestForgedControlDropped(t *testing.T) {
	url := standaloneNATS(t)
	ha, hb := &recorder{}, &recorder{}
	a := startNode(t, Config{URLs: []string{url}, Node: "a", OrgKey: func(org string) []byte {
		if org == "acme" {
			return []byte("0123456789abcdef0123456789abcdef")
		}
		return nil
	}}, ha)
	b := startNode(t, Config{URLs: []string{url}, Node: "b"}, hb)
	waitFor(t, "a hears b", func() bool { return a.Stats().Nodes.Load() == 1 })
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// The attacker's own identity: a key and certificate of its own.
	evil, err := newSelf(&Config{Node: "evil"})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(m ctlMsg, signer *self, mutate func(*ctlMsg)) []byte {
		m.Inc, m.Ctr, m.TS, m.Born, m.KX, m.Cert = "evil-inc", 1, time.Now().UnixMilli(), time.Now().UnixNano(), signer.kxPub, signer.chain
		if mutate != nil {
			mutate(&m)
		}
		body := marshalControl(&m)
		sig, err := sign(signer.signer, b.signed(body))
		if err != nil {
			t.Fatal(err)
		}
		return appendControl(nil, body, sig)
	}
	up := ctlMsg{T: "up", Node: "b", Seq: 1, Agent: &Agent{ID: "bob", Session: "forged", Stamp: 1 << 62}}
	// Claims node b with evil's certificate (which names evil).
	claimB := mk(up, evil, nil)
	// b's certificate, but evil's signature.
	badSig := mk(up, evil, func(m *ctlMsg) { m.Cert = b.me.chain; m.Inc = b.inc; m.Ctr = 1 << 40 })
	// An hour old.
	stale := mk(ctlMsg{T: "hb", Node: "evil"}, evil, func(m *ctlMsg) { m.TS -= time.Hour.Milliseconds() })
	for _, m := range [][]byte{claimB, badSig, stale} {
		if err := nc.Publish("m2md.m2md.ctl", m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "forgeries counted", func() bool {
		return a.stats.Dropped[DropBadCertificate].Load() >= 1 && a.stats.Dropped[DropBadSignature].Load() >= 1 && a.stats.Dropped[DropStale].Load() >= 1
	})

	// A captured heartbeat of b, shown again: its counter was taken.
	hbs := make(chan []byte, 1)
	sub, err := nc.Subscribe("m2md.m2md.ctl", func(m *nats.Msg) {
		var cm ctlMsg
		if _, _, err := decodeControl(m.Data, &cm); err == nil && cm.Node == "b" {
			select {
			case hbs <- m.Data:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	captured := <-hbs
	_ = sub.Unsubscribe()
	replayed := a.stats.Dropped[DropReplayed].Load()
	if err := nc.Publish("m2md.m2md.ctl", captured); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replay counted", func() bool { return a.stats.Dropped[DropReplayed].Load() > replayed })

	// An agent of org acme announced by a node (evil, a node in its own
	// right here) that cannot prove it holds acme's secret.
	forbidden := a.stats.Dropped[DropForbidden].Load()
	// (A snapshot: the first word of a node is answered with a request
	// for one, and what it announces meanwhile waits for it.)
	evilUp := mk(ctlMsg{T: "snap", Node: "evil", Seq: 1, Agents: []Agent{{Org: "acme", ID: "bob", Session: "forged", Stamp: 1, Proof: make([]byte, 32)}}}, evil, func(m *ctlMsg) { m.Ctr = 2 })
	if err := nc.Publish("m2md.m2md.ctl", evilUp); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unproven agent counted", func() bool { return a.stats.Dropped[DropForbidden].Load() > forbidden })
	ha.mu.Lock()
	defer ha.mu.Unlock()
	for _, ag := range ha.up {
		if ag.Session == "forged" {
			t.Fatalf("a forged announcement reached the Handler: %+v", ag)
		}
	}
}

// FuzzOpen: no input makes the sealed-message decoder panic; what opens
// was sealed by the sender's key, and seals again to the same bytes.
func FuzzOpen(f *testing.F) {
	c := &Cluster{cfg: Config{Name: DefaultName, Node: "b"}}
	key := bytes.Repeat([]byte{7}, chacha20poly1305.KeySize)
	aead, err := chacha20poly1305.New(key)
	if err != nil {
		f.Fatal(err)
	}
	c.members.Store("a", &member{node: "a", inc: "i", rx: aead, tx: aead})
	sender := &Cluster{cfg: Config{Name: DefaultName, Node: "a"}}
	m := &member{node: "b", tx: aead}
	req, _ := appendRequest(nil, &Request{Seq: 1, From: "a", W: 1, Requester: "r", Target: "p", Frame: []byte("#M2M")})
	f.Add(sender.seal(nil, m, req))
	cn, _ := appendCancel(nil, &Cancel{Seq: 2, From: "a", W: 9})
	f.Add(sender.seal(nil, m, cn))
	f.Add([]byte{kindSealed, 0, 0, 0, 0, 0, 0, 0, 1, 1, 'x', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := bytes.Clone(b)
		inner, from, n, ok := c.open(b)
		if !ok {
			return
		}
		if from.node != "a" || n == 0 {
			t.Fatalf("opened from %q nonce %d", from.node, n)
		}
		var nonce [chacha20poly1305.NonceSize]byte
		binary.BigEndian.PutUint64(nonce[4:], n)
		head := orig[:len(orig)-len(inner)-chacha20poly1305.Overhead]
		if again := aead.Seal(bytes.Clone(head), nonce[:], inner, head); !bytes.Equal(again, orig) {
			t.Fatalf("%x opens to %x, which seals to %x", orig, inner, again)
		}
	})
}

// BenchmarkSealOpen is what authentication adds to a data message crossing
// nodes: sealing on the sender, opening on the receiver (1 KB request; a
// round trip is two of these). cpu-ns/op is the process's CPU time per
// operation, which a loaded machine disturbs less than ns/op.
func BenchmarkSealOpen(b *testing.B) {
	aead, err := chacha20poly1305.New(bytes.Repeat([]byte{7}, chacha20poly1305.KeySize))
	if err != nil {
		b.Fatal(err)
	}
	rx := &Cluster{cfg: Config{Name: DefaultName, Node: "0123456789abcdef"}}
	rx.members.Store("fedcba9876543210", &member{node: "fedcba9876543210", rx: aead})
	tx := &Cluster{cfg: Config{Name: DefaultName, Node: "fedcba9876543210"}}
	to := &member{node: "0123456789abcdef", tx: aead}
	req, _ := appendRequest(nil, &Request{Seq: 1, From: "fedcba9876543210", W: 1, Org: "acme", Requester: "requester-1", Target: "provider-1", Frame: make([]byte, 1024)})
	buf := make([]byte, 0, 2048)
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		sealed := tx.seal(buf[:0], to, req)
		if _, _, _, ok := rx.open(sealed); !ok {
			b.Fatal("open")
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestNodeFollowsCertificate: a node's id is its certificate's CommonName.
// Without Config.Node it is taken from the certificate; another id is
// refused at start, since every other node would drop this node's messages
// as speaking for a node its certificate does not name.
func TestNodeFollowsCertificate(t *testing.T) {
	cert, err := ephemeralCert("node-7")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Config{Listen: "127.0.0.1:0", Cert: cert, CA: x509.NewCertPool()}.withDefaults()
	if err != nil || got.Node != "node-7" {
		t.Fatalf("node %q, err %v; want node-7 from the certificate", got.Node, err)
	}
	if _, err := (Config{Listen: "127.0.0.1:0", Cert: cert, CA: x509.NewCertPool(), Node: "node-8"}).withDefaults(); err == nil || !strings.Contains(err.Error(), "cluster.Config.Node") {
		t.Fatalf("a node id other than the certificate's was taken (err %v)", err)
	}
}
