package daemon

import (
	"runtime"
	"runtime/debug"
	"testing"
)

var sink [][]byte

// TestReclaimerReturnsBurstGarbage: a burst of allocations that dies, and
// no collection after it, is collected by the reclaimer; a heap without such
// garbage, or one the collector has just seen, is left alone.
func TestReclaimerReturnsBurstGarbage(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no collection but ours
	runtime.GC()
	r := newReclaimer()
	if r.check() {
		t.Fatal("reclaimer collected a heap without garbage")
	}
	for range 64 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil // 64 MiB of garbage nobody collects
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	if !r.check() {
		t.Fatal("reclaimer left 64 MiB of garbage")
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.HeapInuse > before.HeapInuse-32<<20 {
		t.Fatalf("heap in use %d MiB after the reclaimer, %d MiB before", after.HeapInuse>>20, before.HeapInuse>>20)
	}
	// A burst the collector saw live, then died: the first check sees the
	// collector at work and waits; the next, a quiet heap full of garbage.
	for range 64 {
		sink = append(sink, make([]byte, 1<<20))
	}
	runtime.GC()
	sink = nil
	if r.check() {
		t.Fatal("reclaimer collected although the collector had run")
	}
	if !r.check() {
		t.Fatal("reclaimer left a burst the collector had seen live")
	}
	if r.check() {
		t.Fatal("reclaimer collected a quiet heap twice")
	}
}
