package daemon

import (
	"fmt"
	"testing"
)

func TestAffinityMapLRU(t *testing.T) {
	m := newAffinityMap(2 * affinityShards) // two entries per shard
	// Doc ids 1, 17 and 33 share shard 1.
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

func TestAffinityMapBounded(t *testing.T) {
	const max = 1024
	m := newAffinityMap(max)
	for doc := range uint64(10 * max) {
		m.record("org", fmt.Sprintf("req-%d", doc%7), doc+1, "p")
	}
	if n := m.len(); n != max {
		t.Fatalf("%d entries, want %d", n, max)
	}
	// The newest entries are the ones kept.
	for doc := uint64(10*max - 100); doc < 10*max; doc++ {
		if _, ok := m.lookup("org", fmt.Sprintf("req-%d", doc%7), doc+1); !ok {
			t.Fatalf("recent doc %d evicted", doc+1)
		}
	}
	if m := newAffinityMap(1); len(m.shards[0].entries) != 0 || m.shards[0].max != 1 {
		t.Error("a tiny map still needs one entry per shard")
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
