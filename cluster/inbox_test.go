package cluster

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestInboxBoundHoldsAgainstUnsealed: what a client without a node key
// publishes to a node (unsealed data, oversized control messages) does
// not wait whole past the inbox's byte bound: it is dropped on arrival
// and counted.
func TestInboxBoundHoldsAgainstUnsealed(t *testing.T) {
	url := standaloneNATS(t)
	ha, hb := &recorder{gate: make(chan struct{})}, &recorder{}
	a := startNode(t, Config{URLs: []string{url}, Node: "a", Inbox: 4, InboxBytes: 1 << 20, Headroom: 200}, ha)
	b := startNode(t, Config{URLs: []string{url}, Node: "b"}, hb)
	waitFor(t, "a and b know each other", func() bool { return b.member("a") != nil && a.member("b") != nil })
	defer close(ha.gate)
	if err := b.SendRequest("a", &Request{W: 1, Requester: "r", Target: "p", Frame: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a's dispatcher held in Request", func() bool { return a.stats.Received.Load() == 1 })
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	junk := make([]byte, 1<<20)
	const sent = 100
	for i := range sent {
		junk[0] = kindRequest
		if i%2 == 1 {
			junk[0] = kindControl
		}
		if err := nc.Publish("m2md.m2md.n.a", junk); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Every junk message is either dropped and counted or (the control
	// ones under the bound) waiting.
	waitFor(t, "the junk dropped or queued", func() bool {
		return a.stats.Dropped[DropBadSignature].Load()+a.overflow.Load()+uint64(a.stats.InboxBytes.Load()>>20) >= sent
	})
	time.Sleep(100 * time.Millisecond)
	if got := a.stats.InboxBytes.Load(); got > 2<<20 {
		t.Fatalf("%d MiB of unauthenticated junk waiting in an inbox bounded to 1 MiB", got>>20)
	}
	if got := a.stats.Dropped[DropBadSignature].Load(); got != sent/2 {
		t.Fatalf("%d unsealed messages counted bad_signature, want %d", got, sent/2)
	}
}
