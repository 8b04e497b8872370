package daemon

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// memoryCheckEvery is how often the daemon looks whether an attack (or a
// burst) has left its heap full of garbage nobody collects.
const memoryCheckEvery = 10 * time.Second

// reclaimer returns memory after a burst. The Go collector runs when the
// heap grows; a daemon that goes quiet after a burst of large messages
// (an attack, a load test) allocates too little to trigger one, so the
// burst's dead buffers stay in use, and in the process's RSS, until the
// runtime's forced collection two minutes later. When no collection has
// run for a whole check interval and the heap holds more than twice what
// was live after the reclaimer's own last collection (and reclaimSlack
// more), it collects and returns the freed memory to the OS. The base is
// the reclaimer's own: a collection the runtime ran during the burst saw
// the burst's buffers live. Under steady load the collector runs on its own
// and the reclaimer does nothing; after legitimate growth it collects once
// when the daemon goes quiet, and its base follows.
//
// No GOMEMLIMIT is set by default: the daemon's memory is bounded by its
// limits (docs/operations.md), and a soft limit below that bound would
// make the collector run without end under an attack. An operator who
// wants one sets the GOMEMLIMIT environment variable.
type reclaimer struct {
	samples    []rtmetrics.Sample
	lastCycles uint64
	base       uint64 // live heap after the reclaimer's last collection
}

// reclaimSlack keeps a small heap's ordinary growth from counting as a
// burst.
const reclaimSlack = 16 << 20

func newReclaimer() *reclaimer {
	r := &reclaimer{samples: []rtmetrics.Sample{
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}}
	var live, objects uint64
	r.lastCycles, live, objects = r.read()
	r.base = max(live, objects)
	return r
}

func (r *reclaimer) read() (cycles, live, objects uint64) {
	rtmetrics.Read(r.samples)
	return r.samples[0].Value.Uint64(), r.samples[1].Value.Uint64(), r.samples[2].Value.Uint64()
}

// check collects if the heap has been left full of garbage; it reports
// whether it did.
func (r *reclaimer) check() bool {
	cycles, _, objects := r.read()
	idle := cycles == r.lastCycles
	r.lastCycles = cycles
	if !idle || objects < 2*r.base+reclaimSlack {
		return false
	}
	debug.FreeOSMemory()
	r.lastCycles, r.base, _ = r.read()
	return true
}

// reclaimMemory runs the reclaimer until ctx ends.
func (s *Server) reclaimMemory(ctx context.Context) {
	r := newReclaimer()
	t := time.NewTicker(memoryCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if r.check() {
				s.log.Debug().Msg("returned memory after a burst")
			}
		case <-ctx.Done():
			return
		}
	}
}
