package integration

import (
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
)

// TestQUICFloodAtDefaultLimits: a QUIC stream flood at the daemon's
// default limits (16 MiB max payload, the default receive budget), where an
// attacker's streams can announce the largest messages: 200 streams each
// send 1 MiB of a 16 MiB message and stall. The heap's peak stays within
// the bound the defaults state (twice the receive budget and slack), and
// once the session is closed nothing holds the flood's buffers: after a
// collection the heap is back near where it started.
//
// At these limits quic-go's flow-control windows, which start small and
// grow round trip by round trip, let only some 10 MiB through before the
// message timeout, budget or not: the receive budget itself is put to the
// test by TestQUICStreamFloodHeldToBudget, whose smaller messages fill it.
func TestQUICFloodAtDefaultLimits(t *testing.T) {
	const (
		streams = 200
		timeout = 2 * time.Second
		// What may survive the session: quic-go's and the collector's
		// bookkeeping, well under half a receive budget (17 MiB), which is
		// what one flood's buffers held on to would take.
		leftBound = 8 << 20
	)
	d := startDaemon(t, func(c *daemon.Config) { c.MessageTimeout = timeout })
	by := startBystander(t, d, "ws")
	heap := watchHeap()
	base := heap.base
	qc, ctl := rawQUICSession(t, d, "flood")
	body := make([]byte, 1<<20)
	var writers sync.WaitGroup
	for range streams {
		s, err := qc.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		writers.Go(func() {
			// The largest DATA message announced, 1 MiB of it sent.
			s.Write(binary.BigEndian.AppendUint32(nil, negotiate.MaxPayloadLimit+512))
			s.Write(body)
		})
	}
	expectCloseError(t, ctl, timeout+10*time.Second)
	grew := heap.done()
	qc.CloseWithError(0, "")
	writers.Wait()
	by.check(t, 10)

	// The daemon reads one receive budget (MaxPayload + 512 + 1 MiB), quic-go
	// buffers as much again (the connection window), and 12 MiB of slack for
	// the bystander, the attacker's buffers and the collector's lag. Sent at
	// the daemon: streams × 1 MiB = 200 MiB.
	budget := int64(negotiate.MaxPayloadLimit + 512 + 1<<20)
	bound := 2*budget + 12<<20
	// The closed connections wind down a moment after CloseWithError, and
	// pooled buffers outlive one collection (sync.Pool's victim cache).
	var left int64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if left = int64(ms.HeapInuse) - int64(base); left <= leftBound || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%d streams × 1 MiB of a 16 MiB message: heap grew by %.1f MiB at its peak (bound %.1f MiB), %.1f MiB left after the session and a collection (bound %.1f MiB)",
		streams, float64(grew)/(1<<20), float64(bound)/(1<<20), float64(left)/(1<<20), float64(leftBound)/(1<<20))
	if raceEnabled {
		return // the race detector's shadow memory is heap of its own
	}
	if grew > bound {
		t.Errorf("heap grew by %d MiB, bound %d MiB", grew>>20, bound>>20)
	}
	if left > leftBound {
		t.Errorf("%d MiB of heap still in use after the session closed and a collection, bound %d MiB", left>>20, leftBound>>20)
	}
}
