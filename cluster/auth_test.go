package cluster

import (
	"crypto/rand"
	"encoding/binary"
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
