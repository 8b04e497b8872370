package integration

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// udpRelay stands between one QUIC agent and the daemon on loopback, as a
// link does: the daemon's datagrams reach the agent at most rate bytes a
// second through a queue of relayQueue datagrams that drops what does not
// fit (a router's tail drop); the agent's go through unthrottled. Dark
// drops everything both ways, as a network outage does; darkUp only what
// the agent sends, darkDown only what the daemon sends. Delay holds every
// datagram that long (nanoseconds), cutUpAfter and cutDownAfter, when
// positive, are the bytes still passed that way before the link goes dark
// for good: on QUIC, a path lost mid-message.
type udpRelay struct {
	front *net.UDPConn // the agent sends here
	back  *net.UDPConn // connected to the daemon
	rate  int          // bytes a second towards the agent; 0: unlimited
	agent atomic.Pointer[net.UDPAddr]
	dark  atomic.Bool

	darkUp, darkDown         atomic.Bool
	delay                    atomic.Int64
	cutUpAfter, cutDownAfter atomic.Int64
	wg                       sync.WaitGroup
}

const relayQueue = 256 // datagrams: about 340 KB, 160 ms at 2 MiB/s

type datagram struct {
	b  []byte
	at time.Time
}

func newUDPRelay(t testing.TB, target net.Addr, rate int) *udpRelay {
	t.Helper()
	front, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.DialUDP("udp", nil, target.(*net.UDPAddr))
	if err != nil {
		front.Close()
		t.Fatal(err)
	}
	r := &udpRelay{front: front, back: back, rate: rate}
	queue := make(chan datagram, relayQueue)
	r.wg.Add(3)
	go func() { // agent to daemon
		defer r.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			r.agent.Store(from)
			if !r.pass(n, &r.darkUp, &r.cutUpAfter) {
				continue
			}
			if d := time.Duration(r.delay.Load()); d > 0 {
				p := bytes.Clone(buf[:n])
				r.wg.Add(1)
				time.AfterFunc(d, func() {
					defer r.wg.Done()
					_, _ = back.Write(p)
				})
				continue
			}
			_, _ = back.Write(buf[:n])
		}
	}()
	go func() { // daemon to the link's queue
		defer r.wg.Done()
		defer close(queue)
		for {
			buf := make([]byte, 64<<10)
			n, err := back.Read(buf)
			if err != nil {
				return
			}
			if !r.pass(n, &r.darkDown, &r.cutDownAfter) {
				continue
			}
			select {
			case queue <- datagram{buf[:n], time.Now()}:
			default: // the queue is full: the datagram is lost
			}
		}
	}()
	go func() { // the link: the queue to the agent at rate
		defer r.wg.Done()
		next := time.Now()
		for p := range queue {
			time.Sleep(time.Until(p.at.Add(time.Duration(r.delay.Load()))))
			if to := r.agent.Load(); to != nil && !r.dark.Load() && !r.darkDown.Load() {
				_, _ = front.WriteToUDP(p.b, to)
			}
			if r.rate == 0 {
				continue
			}
			if now := time.Now(); next.Before(now) {
				next = now // an idle link saves no credit
			}
			next = next.Add(time.Duration(len(p.b)) * time.Second / time.Duration(r.rate))
			time.Sleep(time.Until(next))
		}
	}()
	t.Cleanup(func() {
		front.Close()
		back.Close()
		r.wg.Wait()
	})
	return r
}

// pass reports whether a datagram of n bytes goes on, one way (dark is
// that way's black hole, cutAfter its bytes left before the link dies).
func (r *udpRelay) pass(n int, dark *atomic.Bool, cutAfter *atomic.Int64) bool {
	if r.dark.Load() || dark.Load() {
		return false
	}
	if left := cutAfter.Load(); left > 0 && cutAfter.Add(-int64(n)) <= 0 {
		cutAfter.Store(0)
		r.dark.Store(true)
	}
	return true
}

func (r *udpRelay) addr() string { return r.front.LocalAddr().String() }

// dialRelayedQUIC is a raw QUIC agent of d whose connection goes through r.
func dialRelayedQUIC(t testing.TB, d *testDaemon, r *udpRelay, cc negotiate.ClientConfig, tc transport.Config) *rawAgent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := transport.DialQUIC(ctx, r.addr(), d.clientTLS(t), tc)
	if err != nil {
		t.Fatal(err)
	}
	a, err := handshakeRaw(t, d, conn, cc)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestSlowQUICLinkNotClosed is TestSlowLinkNotClosed over QUIC, through a
// throttled UDP relay (docs/operations.md, Slow consumers): a provider 2
// MiB/s from the daemon takes a 4 MiB delivery in over 2 s, every write
// of it waiting on flow control and congestion control longer than the 1 s
// grace while bytes flow, and keeps its session; a provider behind the
// same link that stops reading is closed as a slow consumer within the
// grace and the close's own timeout, and its requests end with agent_gone.
func TestSlowQUICLinkNotClosed(t *testing.T) {
	const (
		grace        = time.Second
		closeTimeout = time.Second
		rate         = 2 << 20
	)
	t.Run("steady", func(t *testing.T) {
		t.Parallel()
		const size = 4 << 20
		d := startDaemon(t, func(c *daemon.Config) { c.SlowConsumerGrace = grace })
		relay := newUDPRelay(t, d.QUICAddr(), rate)
		prov := dialRelayedQUIC(t, d, relay, negotiate.ClientConfig{AgentID: "slow-quic-link", Models: []string{"gpt-4o"}}, transport.Config{})
		req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "slow-quic-link-req"})
		slowLinkDelivery(t, d, prov, req, size, rate, grace)
	})
	t.Run("stopped", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, func(c *daemon.Config) {
			c.SlowConsumerGrace = grace
			c.CloseTimeout = closeTimeout
		})
		relay := newUDPRelay(t, d.QUICAddr(), rate)
		// Never reads; a small budget, so that little is absorbed before
		// its transport stops taking bytes.
		prov := dialRelayedQUIC(t, d, relay, negotiate.ClientConfig{AgentID: "stopped-quic-link", Models: []string{"gpt-4o"}},
			transport.Config{MaxIncomingChannels: 100, ReceiveQueue: 2, ReceiveBudget: 64 << 10})
		defer prov.conn.Close()
		req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "stopped-quic-link-req"})
		fr := paddedFrame(t, 1<<20-1024)
		const n = 8 // more than the link, the relay's queue and the stopped side absorb
		for id := uint64(1); id <= n; id++ {
			req.mustSend(0, 0, id, "", fr)
		}
		start := time.Now()
		codes := map[string]int{}
		for range n {
			codes[req.recvDataAnswering(20*time.Second).code]++
		}
		el := time.Since(start)
		t.Logf("all %d requests ended after %v: %v", n, el, codes)
		checkStalledCodes(t, codes)
		if c := metric(t, d, "m2md_queue_drops_total", "reason=slow_consumer_closed"); c == 0 {
			t.Fatalf("the stopped provider's session did not end as a slow consumer")
		}
		// 8 MiB at 2 MiB/s would take 4 s if it flowed: it must end sooner,
		// within the grace, the close and time for a loaded machine.
		if limit := grace + closeTimeout + 5*time.Second; el > limit {
			t.Fatalf("the stopped provider's requests ended after %v, want within %v", el, limit)
		}
	})
}
