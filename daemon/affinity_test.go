package daemon

import (
	"fmt"
	"testing"
)

func TestAffinityMapLRU(t *testing.T) {
	m := newAffinityMap(2)
	m.record("", "req", 1, "p1")
	m.record("", "req", 17, "p2")
	if p, ok := m.lookup("", "req", 1); !ok || p != "p1" { // 1 is now the most recent
		t.Fatalf("lookup 1 = %q, %v", p, ok)
	}
	m.record("", "req", 33, "p3") // evicts 17, the least recently used
	if _, ok := m.lookup("", "req", 17); ok {
		t.Error("17 survived eviction")
	}
	for doc, want := range map[uint64]string{1: "p1", 33: "p3"} {
		if p, ok := m.lookup("", "req", doc); !ok || p != want {
			t.Errorf("lookup %d = %q, %v; want %q", doc, p, ok, want)
		}
	}
	m.record("", "req", 1, "p4") // re-recorded: moves, no new entry
	if p, _ := m.lookup("", "req", 1); p != "p4" || m.len() != 2 {
		t.Errorf("re-record: %q, %d entries", p, m.len())
	}
	// Org and requester are part of the key.
	for _, k := range []struct{ org, req string }{{"acme", "req"}, {"", "other"}} {
		if _, ok := m.lookup(k.org, k.req, 1); ok {
			t.Errorf("%+v sees req's document", k)
		}
	}
}

// --affinity-entries N keeps exactly the N most recently used documents,
// whatever their ids: a base survives N-1 later documents and goes with
// the Nth (docs/operations.md "Conversation affinity").
func TestAffinityMapBoundExact(t *testing.T) {
	for _, n := range []int{1, 20, DefaultAffinityEntries} {
		cfg, err := Config{AffinityEntries: n}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		m := newAffinityMap(cfg.AffinityEntries)
		m.record("org", "req", 1, "p")
		for doc := range uint64(n - 1) { // ids of every residue, as requesters choose
			m.record("org", fmt.Sprintf("req-%d", doc%7), 1000+doc*17, "p")
		}
		if _, ok := m.lookup("org", "req", 1); !ok || m.len() != n {
			t.Fatalf("N=%d: the base went after %d later documents (%d entries)", n, n-1, m.len())
		}
		// Looked up, it is the most recent: N-1 more keep it, the Nth does not.
		for doc := range uint64(n) {
			m.record("org", "other", 1<<40+doc, "p")
			m.mu.Lock()
			_, ok := m.index[affinityKey{"org", "req", 1}] // without touching it
			m.mu.Unlock()
			if want := doc < uint64(n-1); ok != want {
				t.Fatalf("N=%d: after %d more documents the base is kept: %v", n, doc+1, ok)
			}
		}
		if m.len() != n {
			t.Fatalf("N=%d: %d entries", n, m.len())
		}
	}
}

// One org's traffic does not evict another's documents while the other
// holds fewer: each keeps its share, and an org alone uses the whole map.
func TestAffinityMapOrgShares(t *testing.T) {
	const n = 20
	m := newAffinityMap(n)
	for doc := range uint64(n) {
		m.record("quiet", "req", doc+1, "p")
	}
	if m.orgLen("quiet") != n {
		t.Fatalf("an org alone holds %d of %d", m.orgLen("quiet"), n)
	}
	for doc := range uint64(10 * n) {
		m.record("noisy", "req", doc+1, "p")
	}
	if q, z := m.orgLen("quiet"), m.orgLen("noisy"); q != n/2 || z != n/2 || m.len() != n {
		t.Fatalf("quiet %d, noisy %d of %d: want equal shares", q, z, n)
	}
	// The quiet org kept its most recent half.
	for doc := range uint64(n) {
		_, ok := m.lookup("quiet", "req", doc+1)
		if want := doc >= n/2; ok != want {
			t.Errorf("quiet doc %d kept: %v", doc+1, ok)
		}
	}
	// A third org takes its share from the largest, down to a third each.
	for doc := range uint64(10 * n) {
		m.record("third", "req", doc+1, "p")
	}
	for _, org := range []string{"quiet", "noisy", "third"} {
		if c := m.orgLen(org); c < n/3 || c > n/3+1 {
			t.Errorf("%s holds %d of %d with three orgs", org, c, n)
		}
	}
}

// Recording and looking up in a full map allocate nothing: the hot path of
// every request that carries a doc_id.
func TestAffinityMapAllocatesNothing(t *testing.T) {
	m := newAffinityMap(4096)
	reqs := make([]string, 64)
	for i := range reqs {
		reqs[i] = fmt.Sprintf("requester-%d", i)
	}
	doc := uint64(0)
	step := func() {
		doc++
		r := reqs[doc%uint64(len(reqs))]
		m.record("org", r, doc, "provider")
		if _, ok := m.lookup("org", r, doc); !ok {
			t.Fatal("lost")
		}
	}
	for range 100_000 { // fill and churn past the bound
		step()
	}
	if n := testing.AllocsPerRun(10_000, step); n != 0 {
		t.Errorf("record + lookup allocate %.2f times", n)
	}
}

func BenchmarkAffinityMap(b *testing.B) {
	m := newAffinityMap(DefaultAffinityEntries)
	doc := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		doc++
		m.record("org", "requester", doc, "provider")
		m.lookup("org", "requester", doc-1)
	}
}
