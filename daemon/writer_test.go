package daemon

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// TestKickAllocatesNothing: starting a session's writer, which happens for
// every batch it writes, allocates nothing (a go statement on a method
// value allocates its closure each time).
func TestKickAllocatesNothing(t *testing.T) {
	se := &session{}
	se.ctx, se.cancel = context.WithCancel(context.Background())
	se.cancel() // the writer returns at once
	se.drainFn = se.drain
	kick := func() {
		se.kick()
		se.writers.Wait()
	}
	kick() // the runtime's first goroutine of this shape
	if n := testing.AllocsPerRun(200, kick); n != 0 {
		t.Errorf("kick allocates %.1f times", n)
	}
}

// discardConn is a transport.Conn whose Sends go nowhere: the writer's
// own work per frame (numbering, protection, counters, the stall watch)
// without a transport under it.
type discardConn struct{ sends, batches int }

func (c *discardConn) Receive(ctx context.Context) (transport.Message, error) {
	<-ctx.Done()
	return transport.Message{}, ctx.Err()
}
func (c *discardConn) Send(context.Context, transport.ChannelID, []byte) error { c.sends++; return nil }
func (c *discardConn) Cork()                                                   {}
func (c *discardConn) Uncork() error                                           { c.batches++; return nil }
func (c *discardConn) AcquireChannel(context.Context) (transport.ChannelID, error) {
	return 0, nil
}
func (c *discardConn) ReleaseChannel(transport.ChannelID) {}
func (c *discardConn) SetReadLimit(int64)                 {}
func (c *discardConn) Transport() string                  { return "ws" }
func (c *discardConn) RemoteAddr() net.Addr               { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (c *discardConn) Close() error                       { return nil }

// BenchmarkWriterBatch: the writer's pass over a batch of 32 queued 1 KB
// DATA messages (drainOnce), per message, in each security mode, over a
// connection that discards them: what the daemon's writer costs on top of
// the transport's Send.
func BenchmarkWriterBatch(b *testing.B) {
	const batch = 32
	fr, err := frame.AppendEncode(nil, corpusFile(b, "req-chat-1k-01.json"), frame.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityAEAD} {
		b.Run(mode.String(), func(b *testing.B) {
			send, err := negotiate.NewSealer(mode, make([]byte, 32), 0)
			if err != nil {
				b.Fatal(err)
			}
			conn := &discardConn{}
			srv := &Server{metrics: newMetrics(), cfg: Config{SlowConsumerGrace: DefaultSlowGrace, CloseTimeout: time.Second}}
			se := &session{srv: srv, conn: conn, send: send, m: srv.metrics.forTransport("ws"),
				queue: newSendQueue(batch, 1<<30), ctrl: make(chan outMsg, 8)}
			se.ctx, se.cancel = context.WithCancel(context.Background())
			defer se.cancel()
			se.stall = time.AfterFunc(time.Hour, func() {})
			se.stall.Stop()
			msgs := make([]outMsg, batch)
			b.ReportAllocs()
			b.SetBytes(int64(batch * len(fr)))
			for b.Loop() {
				b.StopTimer()
				for i := range msgs {
					m, ok := buildData(0, negotiate.FlagReply|negotiate.FlagEnd, uint64(i+1), "provider-1", fr, formatM2M)
					if !ok {
						b.Fatal("buildData")
					}
					msgs[i] = m
				}
				b.StartTimer()
				for _, m := range msgs {
					se.queue.push(m)
				}
				se.drainOnce()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/msg")
			if conn.sends != b.N*batch || conn.batches != b.N {
				b.Fatalf("%d sends in %d batches for %d batches of %d", conn.sends, conn.batches, b.N, batch)
			}
		})
	}
}
