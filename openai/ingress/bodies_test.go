package ingress

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// A refusal gives back what the refused body held, in all and for its
// client, in the same step that refuses it.
func TestBudgetRefusalGivesBack(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	bu := budget{max: 100, share: 60}
	steps := []struct {
		name      string
		client    netip.Addr
		held, n   int64
		want      error
		used, per int64 // after, in all and for client
	}{
		{"a takes 40", a, 0, 40, nil, 40, 40},
		{"b takes 50", b, 0, 50, nil, 90, 50},
		{"a over the budget gives its 40 back", a, 40, 20, errBodyBudget, 50, 0},
		{"a takes 50 in the room made", a, 0, 50, nil, 100, 50},
		{"b over its share gives its 50 back", b, 50, 20, errClientShare, 50, 0},
	}
	for _, s := range steps {
		err := bu.take(s.client, s.held, s.n)
		if !errors.Is(err, s.want) && (err != nil || s.want != nil) {
			t.Fatalf("%s: %v, want %v", s.name, err, s.want)
		}
		if bu.used != s.used || bu.per[s.client] != s.per {
			t.Fatalf("%s: %d held in all and %d for the client, want %d and %d", s.name, bu.used, bu.per[s.client], s.used, s.per)
		}
	}
	bu.give(a, 50)
	if bu.used != 0 || len(bu.per) != 0 {
		t.Fatalf("all given back: %d held, %d clients counted", bu.used, len(bu.per))
	}
}

// Eight bodies of the largest size from four clients grow in random
// order under a budget that holds four; a refused body's answer takes a
// while, and release runs only after it. However they interleave, four
// bodies are read whole and four are refused: refusals never leave room
// that nobody can use.
func TestBudgetContendedUploadsComplete(t *testing.T) {
	const maxBody, bodies = 1 << 20, 8
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		bu := budget{max: 4 * maxBody, share: bodyShare(4*maxBody, maxBody)}
		all := make([]*body, bodies)
		for i := range all {
			all[i] = &body{owner: &bu, client: netip.AddrFrom4([4]byte{192, 0, 2, byte(1 + i/2)})}
		}
		growing := append([]*body(nil), all...)
		var answering []*body // refused, with their answer being written
		refused := 0
		for len(growing) > 0 || len(answering) > 0 {
			if len(answering) > 0 && (len(growing) == 0 || rng.IntN(3) == 0) {
				i := rng.IntN(len(answering))
				answering[i].release()
				answering = append(answering[:i], answering[i+1:]...)
				continue
			}
			i := rng.IntN(len(growing))
			bd := growing[i]
			err := bd.grow(maxBody)
			if err != nil || cap(bd.b) == maxBody {
				growing = append(growing[:i], growing[i+1:]...)
			}
			if err != nil {
				refused++
				answering = append(answering, bd)
			}
		}
		if refused != bodies-4 || bu.used != 4*maxBody {
			t.Fatalf("seed %d: %d of %d refused, %d bytes held; want 4 read whole, holding the budget of %d", seed, refused, bodies, bu.used, bu.max)
		}
		for _, bd := range all {
			bd.release()
		}
		if bu.used != 0 || len(bu.per) != 0 {
			t.Fatalf("seed %d: all released: %d held, %d clients counted", seed, bu.used, len(bu.per))
		}
	}
}
