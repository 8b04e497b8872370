package integration

import (
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// TestSlowSteadyReaderNotClosed (docs/operations.md, Slow consumers): the
// daemon's stall timer (--slow-consumer-grace) watches each write, not a
// whole batch. A provider that reads slowly but steadily, so that writing
// all that is queued for it takes several graces while no single write
// waits one, keeps its session and gets every delivery. (One that stops
// reading is closed after the grace: TestStalledWriterClosed.)
func TestSlowSteadyReaderNotClosed(t *testing.T) {
	const (
		grace = time.Second
		pace  = 80 * time.Millisecond // between two reads of the provider
		n     = 25                    // deliveries: 2 s of reading, two graces
	)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, func(c *daemon.Config) {
				c.SlowConsumerGrace = grace
				c.CloseTimeout = time.Second
			})
			fr := paddedFrame(t, 128<<10)
			// A small receive budget (1 MiB, and so QUIC's window): the
			// provider's side holds 16 deliveries, so the daemon's last
			// writes each wait for the provider's next read. (Below the
			// size of a message, 64 KiB, a QUIC provider deadlocks instead:
			// see /work/notes/hq.md.)
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "steady-" + tr, Models: []string{"gpt-4o"}},
				transport.Config{ReceiveQueue: 2, ReceiveBudget: 1 << 20})
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "steady-req-" + tr})

			// All n queued for the provider at once.
			for id := uint64(1); id <= n; id++ {
				req.mustSend(req.channel(), 0, id, "", fr)
			}
			start := time.Now()
			for range n {
				time.Sleep(pace)
				dl := prov.recvDataAnswering(10 * time.Second)
				if dl.hdr.IsReply() || len(dl.frame) != len(fr) {
					t.Fatalf("delivery: flags %v, %d bytes, code %q", dl.hdr.Flags, len(dl.frame), dl.code)
				}
				prov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
			}
			took := time.Since(start)
			for range n {
				r := req.recvDataAnswering(10 * time.Second)
				if r.code != "" || !r.hdr.IsEnd() {
					t.Fatalf("reply: code %q flags %v", r.code, r.hdr.Flags)
				}
				req.conn.ReleaseChannel(r.ch)
			}
			if took < 2*grace {
				t.Fatalf("the provider read its %d deliveries in %v, less than two graces: the test proves nothing", n, took)
			}
			if c := metric(t, d, "m2md_queue_drops_total", "reason=slow_consumer_closed"); c != 0 {
				t.Fatalf("a steady reader was closed as a slow consumer (%v)", c)
			}
			t.Logf("%s: %d deliveries read steadily over %v with a grace of %v", tr, n, took.Round(time.Millisecond), grace)

		})
	}
}
