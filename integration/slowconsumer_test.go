package integration

import (
	"context"
	"encoding/binary"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// TestSlowConsumerMemoryBounded: a provider that never reads its connection
// while a requester floods it with 64 KiB requests. The daemon refuses what
// it cannot hand on (queue_full when the provider's send queue is full;
// provider_busy when a QUIC provider has all its streams taken), promptly, to
// a requester that keeps reading; the process's heap (daemon and both agents
// live in this test binary) grows by a bounded amount far below what was
// pushed; and the stalled session is closed (slow consumer after
// SlowConsumerGrace, or TIMEOUT since it answers no PING), its requests then
// ending in agent_gone. Every request gets exactly one final reply.
func TestSlowConsumerMemoryBounded(t *testing.T) {
	// heapBound: the provider's send queue (4 MiB), what sits in transport
	// buffers on both sides of the stalled connection (socket buffers, and
	// on QUIC one message per stream the provider allows: 100 here, 6.4 MiB),
	// and pooled buffers not yet collected. Measured: 9-15 MiB.
	const heapBound = 32 << 20
	total := 200 << 20 // bytes the requester pushes: six times the bound
	if raceEnabled {
		// The race detector slows WebSocket masking and QUIC packet
		// handling more than tenfold (6 MB/s here): under it this checks
		// the refusal, close and accounting paths for races, and the
		// memory bound is what the run without -race proves.
		total = 16 << 20
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			d := startDaemon(t, func(c *daemon.Config) {
				fastKeepalive(c)
				// The provider's send queue is bounded by bytes: twice
				// MaxPayload, at least 4 MiB. Its length in messages stays
				// the default, so the requester's queue has room for the
				// flood of small error replies.
				c.MaxPayload = 1 << 20
				// Long enough for the queue to fill before the writer's own
				// stall timer calls the provider slow, even under -race.
				c.SlowConsumerGrace = 2 * time.Second
				c.CloseTimeout = time.Second
			})
			// A QUIC agent's transport reads one message per stream ahead of
			// its receive queue, so the streams it allows bound what it
			// absorbs; 100 is plenty for an agent and keeps that bounded. A
			// small receive queue makes the stall bite sooner.
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "sink", Models: []string{"gpt-4o"}},
				transport.Config{MaxIncomingChannels: 100, ReceiveQueue: 2, ReceiveBudget: 64 << 10})
			defer prov.conn.Close() // never reads
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "flood"})
			fr := paddedFrame(t, 64<<10-256)

			// Measure what is live, not garbage awaiting a collection: with
			// the default GOGC the heap may double past its live size before
			// the collector runs, more so after earlier tests left a larger
			// live heap. At 10 %, in-use memory tracks live memory closely.
			defer debug.SetGCPercent(debug.SetGCPercent(10))
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			base := ms.HeapInuse
			var peak atomic.Uint64
			stopSampling := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stopSampling:
						return
					case <-tick.C:
					}
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peak.Load() {
						peak.Store(ms.HeapInuse)
					}
				}
			}()

			// The requester's reader: counts final replies by code and hands
			// QUIC channels back to the pool as their requests end.
			var (
				mu       sync.Mutex
				codes    = map[string]int{}
				replies  atomic.Int64
				readErr  error
				firstErr = make(map[string]time.Duration)
			)
			start := time.Now()
			readerDone := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				defer close(readerDone)
				for {
					msg, err := req.conn.Receive(ctx)
					if err != nil {
						if ctx.Err() == nil {
							readErr = err
						}
						return
					}
					kind, _ := negotiate.MessageKind(msg.Data)
					if kind != negotiate.KindData {
						// Answer PINGs: once the flood is over this session
						// is silent too, and must outlive the provider's.
						if cm, err := negotiate.ParseControl(msg.Data); err == nil && cm.Type == negotiate.TypePing {
							pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
							_ = req.conn.Send(pctx, 0, negotiate.AppendPong(nil, req.sess.ID, time.Now()))
							pcancel()
						}
						msg.Release()
						continue
					}
					dh, frm, err := negotiate.ParseData(msg.Data)
					if err != nil || !dh.IsEnd() {
						msg.Release()
						readErr = err
						return
					}
					code := errorCode(errorBody(frm))
					req.conn.ReleaseChannel(msg.Channel)
					msg.Release()
					mu.Lock()
					if codes[code] == 0 {
						firstErr[code] = time.Since(start)
					}
					codes[code]++
					mu.Unlock()
					replies.Add(1)
				}
			}()

			var sent int64
			for id := uint64(1); sent*int64(len(fr)) < int64(total); id++ {
				actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
				ch, err := req.conn.AcquireChannel(actx)
				acancel()
				if err != nil {
					mu.Lock()
					t.Logf("after %v: sent %d, replies %v", time.Since(start), sent, codes)
					mu.Unlock()
					t.Fatalf("acquire channel: %v", err)
				}
				if err := req.send(ch, 0, id, "", fr); err != nil {
					t.Fatalf("request %d: %v", id, err)
				}
				sent++
			}
			sendTime := time.Since(start)
			deadline := time.Now().Add(15 * time.Second)
			for replies.Load() < sent && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			close(stopSampling)
			wg.Wait()
			cancel()
			<-readerDone

			mu.Lock()
			defer mu.Unlock()
			grew := int64(peak.Load()) - int64(base)
			t.Logf("%s: sent %d requests (%d MiB) in %v; replies %v (first at %v); heap grew by at most %d MiB",
				tr, sent, sent*int64(len(fr))>>20, sendTime, codes, firstErr, grew>>20)
			if readErr != nil {
				t.Fatalf("requester's reader: %v", readErr)
			}
			if got := replies.Load(); got != sent {
				_, body := adminGet(t, d, "/metrics")
				for _, l := range strings.Split(body, "\n") {
					if strings.HasPrefix(l, "m2md_queue_drops") || strings.HasPrefix(l, "m2md_routing_failures") {
						t.Log(l)
					}
				}
				t.Fatalf("%d final replies for %d requests", got, sent)
			}
			refused := codes["queue_full"]
			if tr == "quic" {
				refused += codes["provider_busy"]
			}
			// Under -race the flood may be slower than the grace period, and
			// the stalled writer closes the provider before anything is
			// refused; that is right too.
			if (refused == 0 && !raceEnabled) || codes["agent_gone"] == 0 {
				t.Fatalf("replies %v: want refusals while the provider stalled and agent_gone for what it held", codes)
			}
			for c := range codes {
				switch c {
				case "queue_full", "provider_busy", "agent_gone", "no_route":
				default:
					t.Fatalf("unexpected reply code %q (%v)", c, codes)
				}
			}
			// Under -race the detector's own allocations swamp a 16 MiB
			// flood; the bound is asserted where it means something.
			if grew > heapBound && !raceEnabled {
				t.Fatalf("heap grew by %d MiB while %d MiB were pushed at a stalled reader; bound %d MiB", grew>>20, sent*int64(len(fr))>>20, heapBound>>20)
			}
			// The daemon has given up on the provider; its connection ends
			// quickly once this side closes too (a WebSocket close otherwise
			// waits 5 s for a handshake the stalled peer never reads).
			prov.conn.Close()
			waitSessions(t, d, 1)
			closed := metric(t, d, "m2md_queue_drops_total", "reason=slow_consumer_closed") + metric(t, d, "m2md_sessions_closed_total", "reason=timeout")
			if closed < 1 {
				t.Fatal("the stalled session ended neither as a slow consumer nor by TIMEOUT")
			}
		})
	}
}

// errorBody decodes an error frame's JSON, or nil.
func errorBody(fr []byte) []byte {
	body, err := frame.AppendDecode(nil, fr, frame.Limits{})
	if err != nil {
		return nil
	}
	return body
}

// TestStalledWriterClosed: a provider that stops reading after a few large
// deliveries, too few to fill its send queue but enough to fill the
// transport's buffers, so the daemon's writer blocks on it. Nothing more is
// sent to it: no queue_full will ever call it slow, and its keepalive
// (PINGs, the session timeout) runs in the blocked writer. It must still be
// closed, and its requests end in agent_gone, not hang forever.
func TestStalledWriterClosed(t *testing.T) {
	const grace, closeTimeout = 500 * time.Millisecond, time.Second
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, func(c *daemon.Config) {
				fastKeepalive(c)
				c.SlowConsumerGrace = grace
				c.CloseTimeout = closeTimeout
			})
			fr := paddedFrame(t, 1<<20-1024)
			// A small receive queue, so that little is absorbed before the
			// transport stops reading and the daemon's writer blocks.
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "stalled", Models: []string{"gpt-4o"}},
				transport.Config{MaxIncomingChannels: 100, ReceiveQueue: 2, ReceiveBudget: 64 << 10})
			defer prov.conn.Close() // never reads
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "stall-req"})
			const n = 8 // 8 MiB: more than the stalled side absorbs, far less than its 32 MiB send queue
			for id := uint64(1); id <= n; id++ {
				req.mustSend(req.channel(), 0, id, "", fr)
			}
			start := time.Now()
			codes := map[string]int{}
			for range n {
				r := req.recvDataAnswering(20 * time.Second)
				codes[r.code]++
				req.conn.ReleaseChannel(r.ch)
			}
			el := time.Since(start)
			t.Logf("%s: all %d requests ended after %v: %v", tr, n, el, codes)
			checkStalledCodes(t, codes)
			// Within --slow-consumer-grace of the writer blocking
			// (docs/operations.md), plus the closing connection's
			// CloseTimeout and time for a loaded machine to fill the
			// transport's buffers and schedule: not the keepalive's or the
			// session timeout's tens of seconds.
			if limit := grace + closeTimeout + 5*time.Second; el > limit {
				t.Fatalf("the stalled provider's requests ended after %v, want within %v", el, limit)
			}
			prov.conn.Close()
			waitSessions(t, d, 1)
		})
	}
}

// checkStalledCodes: the requests to a stalled provider end in agent_gone
// (the provider was closed with them), or were refused before that.
func checkStalledCodes(t testing.TB, codes map[string]int) {
	t.Helper()
	if codes["agent_gone"] == 0 {
		t.Fatalf("codes %v: the stalled provider's deliveries should end in agent_gone", codes)
	}
	for c := range codes {
		switch c {
		case "agent_gone", "no_route", "queue_full", "provider_busy":
		default:
			t.Fatalf("codes %v", codes)
		}
	}
}

// paddedFrame is a gpt-4o request frame of exactly size bytes whose payload
// is filler: the daemon routes by header and never looks further, and
// building it costs nothing (Brotli on a megabyte is slow under -race).
// It does not decode; these tests' providers never read it.
func paddedFrame(t testing.TB, size int) []byte {
	t.Helper()
	fr := encode(t, corpus(t, "req-chat-tiny-07.json")) // gpt-4o
	var h frame.Header
	if err := frame.ReadHeader(fr, &h); err != nil {
		t.Fatal(err)
	}
	lenAt := frame.PrefixLen + h.HeaderLen
	out := make([]byte, size)
	copy(out, fr[:lenAt+8])
	for i := lenAt + 8; i < size; i++ {
		out[i] = byte(i * 7)
	}
	binary.LittleEndian.PutUint32(out[lenAt:], uint32(size-lenAt-8))
	if err := frame.ReadHeader(out, &h); err != nil || string(h.Model) != "gpt-4o" {
		t.Fatalf("padded frame: %v", err)
	}
	return out
}
