package daemon

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/leakcheck"
	"github.com/m2md/m2md/internal/testkit"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// TestKickAllocatesNothing: starting a session's writer, which happens for
// every batch it writes, allocates nothing, whether a new goroutine runs it
// (a go statement on a closure made each time would allocate it) or an
// idle worker of the pool does.
func TestKickAllocatesNothing(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		srv := &Server{pool: newWriterPool()}
		if !pooled {
			srv.pool.maxIdle = 0
		}
		se := testWriterSession(srv)
		kick := func() {
			se.kick()
			se.writers.Wait()
			if pooled {
				waitIdle(t, srv.pool, 1, false)
			}
		}
		kick() // the runtime's first goroutine of this shape
		if n := testing.AllocsPerRun(200, kick); n != 0 {
			t.Errorf("pooled=%v: kick allocates %.1f times", pooled, n)
		}
		srv.pool.close()
	}
}

// TestWriterPoolReuses: a writer started while a worker waits runs on that
// worker; only writers that find none get a goroutine of their own; idle
// workers leave when no writer has started for a while, and when the
// daemon stops.
func TestWriterPoolReuses(t *testing.T) {
	p := newWriterPool()
	p.maxIdle = 2
	srv := &Server{pool: p}
	a, b, c := testWriterSession(srv), testWriterSession(srv), testWriterSession(srv)

	for range 100 {
		a.kick()
		a.writers.Wait()
		waitIdle(t, p, 1, false)
	}
	// One, or a few more if a kick came while the worker had counted
	// itself idle but was not yet waiting; without the pool, 100.
	if n := p.spawned.Load(); n > 5 {
		t.Errorf("100 writers one after another started %d goroutines, want 1", n)
	}

	// Three writers at once, blocked in Send: the idle workers take what
	// they can, the rest start goroutines of their own, and all but
	// maxIdle exit when done.
	before := p.spawned.Load()
	block := make(chan struct{})
	for _, se := range []*session{a, b, c} {
		buf := []byte{0}
		se.ctrl <- outMsg{buf: &buf, kind: msgControl} // the writer calls Send
		se.conn = &blockingConn{release: block}
		se.kick()
	}
	close(block)
	for _, se := range []*session{a, b, c} {
		se.writers.Wait()
	}
	// Every writer has ended; the workers beyond maxIdle exit once they
	// count themselves, the others wait.
	waitWorkers(t, p, 2, "three writers ended")
	waitIdle(t, p, 2, true)
	if p.spawned.Load() == before {
		t.Error("three writers at once with at most two idle workers started no goroutine")
	}

	// A tick after writers started keeps the workers; the next, with no
	// writer since, sends them away.
	p.tick()
	if n := p.idle.Load(); n != 2 {
		t.Errorf("a tick right after writers ran left %d idle workers, want 2", n)
	}
	p.tick()
	waitIdle(t, p, 0, true)
	waitWorkers(t, p, 0, "retired")

	a.kick() // a worker starts again after retirement, and leaves at close
	a.writers.Wait()
	waitIdle(t, p, 1, true)
	p.close()
	waitWorkers(t, p, 0, "closed")
}

// waitWorkers waits until at most n goroutines run p's workers.
func waitWorkers(t *testing.T, p *writerPool, n int, when string) {
	t.Helper()
	ours := fmt.Sprintf("(*writerPool).run(%p", p) // their stacks name the pool
	deadline := time.Now().Add(5 * time.Second)
	for left := leakcheck.Goroutines(ours); len(left) > n; left = leakcheck.Goroutines(ours) {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers once %s, want at most %d: idle workers stayed\n%s", len(left), when, n, strings.Join(left, "\n\n"))
		}
		time.Sleep(time.Millisecond)
	}
}

// testWriterSession is a session whose writer finds nothing to write.
func testWriterSession(srv *Server) *session {
	se := &session{srv: srv, conn: &discardConn{}, ctrl: make(chan outMsg, 8),
		queue: newSendQueue(8, 1<<20), m: newMetrics().forTransport("ws")}
	se.ctx, se.cancel = context.WithCancel(context.Background())
	se.runWriter = func() { srv.pool.run(se) }
	se.machine = negotiate.NewMachine(negotiate.RoleServer, time.Now())
	se.stall = time.AfterFunc(time.Hour, func() {})
	se.stall.Stop()
	se.timer = time.AfterFunc(time.Hour, func() {})
	se.timer.Stop()
	return se
}

// waitIdle waits until n workers of p are idle, or at least n unless
// exact.
func waitIdle(t testing.TB, p *writerPool, n int32, exact bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for k := p.idle.Load(); k != n && (exact || k < n); k = p.idle.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers, want %d", k, n)
		}
		runtime.Gosched()
	}
}

// blockingConn is a discardConn whose Send waits for release.
type blockingConn struct {
	discardConn
	release chan struct{}
}

func (c *blockingConn) Send(ctx context.Context, ch transport.ChannelID, b []byte) error {
	<-c.release
	return c.discardConn.Send(ctx, ch, b)
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
	fr, err := frame.AppendEncode(nil, testkit.CorpusFile(b, "req-chat-1k-01.json"), frame.Limits{})
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

func (c *discardConn) Abort() { c.Close() }
