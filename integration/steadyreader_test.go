package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// TestSlowSteadyReaderNotClosed (docs/operations.md, Slow consumers): the
// daemon's stall timer (--slow-consumer-grace) watches a batch's writes
// for progress, not for their end. A provider that reads slowly but steadily, so that writing
// all that is queued for it takes several graces while no single write
// waits one, keeps its session and gets every delivery. (One that stops
// reading is closed after the grace: TestStalledWriterClosed.)
//
// The provider's receive budget is small (and so, on QUIC, its connection
// window): 1 MiB holds 8 deliveries, so the daemon's last writes each wait
// for the provider's next read; 64 KiB is below one delivery, where a QUIC
// provider would stop taking bytes altogether if the freed budget could go
// to the stream whose body was still on its way while the connection's
// window was full of the bodies of streams waiting for budget.
func TestSlowSteadyReaderNotClosed(t *testing.T) {
	const (
		grace = time.Second
		pace  = 80 * time.Millisecond // between two reads of the provider
		n     = 25                    // deliveries: 2 s of reading, two graces
	)
	for _, tc := range []struct {
		tr     string
		budget int
	}{{"quic", 1 << 20}, {"ws", 1 << 20}, {"quic", 64 << 10}, {"ws", 64 << 10}} {
		tr := tc.tr
		t.Run(fmt.Sprintf("%s/budget%dk", tr, tc.budget>>10), func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, func(c *daemon.Config) {
				c.SlowConsumerGrace = grace
				c.CloseTimeout = time.Second
			})
			fr := paddedFrame(t, 128<<10)
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "steady-" + tr, Models: []string{"gpt-4o"}},
				transport.Config{ReceiveQueue: 2, ReceiveBudget: tc.budget})
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

// TestSlowLinkNotClosed (docs/operations.md, Slow consumers): a provider
// behind a slow link (2 MB/s from the daemon, through a throttling TCP
// relay on loopback) takes an 8 MB delivery in about 4 s, a write that
// blocks longer than the grace (1 s) although bytes go out all the time.
// The stall timer closes only a session whose connection took no bytes
// for a whole grace, so this one keeps its session and gets the delivery;
// a timer counted from the write's start would close it mid-write. Over QUIC, through a
// throttled UDP relay: TestSlowQUICLinkNotClosed.
func TestSlowLinkNotClosed(t *testing.T) {
	t.Parallel()
	const (
		grace = time.Second
		rate  = 2 << 20 // bytes a second, daemon to provider
		size  = 8 << 20
	)
	d := startDaemon(t, func(c *daemon.Config) { c.SlowConsumerGrace = grace })
	relay := throttledRelay(t, d.WSAddr().String(), rate)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := transport.DialWS(ctx, "ws://"+relay+daemon.DefaultWSPath, nil, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	prov, err := handshakeRaw(t, d, conn, negotiate.ClientConfig{AgentID: "slow-link", Models: []string{"gpt-4o"}})
	if err != nil {
		t.Fatal(err)
	}
	req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "slow-link-req"})
	slowLinkDelivery(t, d, prov, req, size, rate, grace)
}

// TestSlowUplinkReplyNotClosed (docs/protocol.md §3.4): a provider
// behind a slow uplink (1 MB/s to the daemon, through a throttling TCP
// relay on loopback) holds a request and sends its 4 MB reply in about 4
// s. The daemon PINGs it after BusyPingAfter of silence, and its PONG
// waits behind the reply on the one WebSocket stream, past
// BusyPongTimeout; the reply's bytes arriving all the while say the
// provider is alive, so its session stays and the requester gets the
// reply. Counting only whole messages as signs of life closed it mid-reply.
func TestSlowUplinkReplyNotClosed(t *testing.T) {
	t.Parallel()
	const (
		rate = 1 << 20 // bytes a second, provider to daemon
		size = 4 << 20
	)
	d := startDaemon(t, func(c *daemon.Config) {
		c.BusyPingAfter, c.BusyPongTimeout = 300*time.Millisecond, time.Second
	})
	relay := relayAtRates(t, d.WSAddr().String(), 0, rate)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := transport.DialWS(ctx, "ws://"+relay+daemon.DefaultWSPath, nil, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	prov, err := handshakeRaw(t, d, conn, negotiate.ClientConfig{AgentID: "slow-uplink", Models: []string{"gpt-4o"}})
	if err != nil {
		t.Fatal(err)
	}
	req := mustDialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "slow-uplink-req"})
	req.mustSend(0, 0, 1, "", encode(t, corpus(t, "req-chat-tiny-07.json")))
	dl := prov.recvDataAnswering(10 * time.Second)
	start := time.Now()
	prov.replyFrame(dl.ch, dl.hdr.RequestID, negotiate.FlagReply|negotiate.FlagEnd, paddedFrame(t, size))
	r := req.recvDataAnswering(30 * time.Second)
	took := time.Since(start)
	if r.code != "" || !r.hdr.IsEnd() || len(r.frame) != size {
		t.Fatalf("reply: code %q flags %v, %d bytes", r.code, r.hdr.Flags, len(r.frame))
	}
	if took < 2*time.Second {
		t.Fatalf("the reply took %v: the uplink was not slow enough to outlast BusyPongTimeout", took)
	}
	if n := metric(t, d, "m2md_sessions_closed_total", "reason=timeout"); n != 0 {
		t.Fatalf("%v sessions closed for an unanswered PING", n)
	}
}

// slowLinkDelivery sends prov, behind a link of rate bytes a second, a
// delivery of size bytes and checks that it arrives whole, slowly enough
// to prove something (two graces), without the provider being closed as a
// slow consumer, and that its reply comes back.
func slowLinkDelivery(t *testing.T, d *testDaemon, prov, req *rawAgent, size, rate int, grace time.Duration) {
	t.Helper()
	fr := paddedFrame(t, size)
	start := time.Now()
	req.mustSend(0, 0, 1, "", fr)
	dl := prov.recvDataAnswering(30 * time.Second)
	took := time.Since(start)
	if dl.hdr.IsReply() || len(dl.frame) != len(fr) {
		t.Fatalf("delivery: flags %v, %d bytes, code %q", dl.hdr.Flags, len(dl.frame), dl.code)
	}
	t.Logf("a %d MiB delivery over a %d MiB/s %s link took %v, grace %v", size>>20, rate>>20, prov.conn.Transport(), took.Round(time.Millisecond), grace)
	if took < 2*grace {
		t.Fatalf("the delivery took %v, less than two graces: the link was not slow enough to prove anything", took)
	}
	if c := metric(t, d, "m2md_queue_drops_total", "reason=slow_consumer_closed"); c != 0 {
		t.Fatalf("a provider on a slow link was closed as a slow consumer (%v)", c)
	}
	prov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-01.json"))
	if r := req.recvDataAnswering(10 * time.Second); r.code != "" || !r.hdr.IsEnd() {
		t.Fatalf("reply: code %q flags %v", r.code, r.hdr.Flags)
	}
}

// throttledRelay relays one TCP connection at a time to target on
// loopback, passing target's bytes back at rate bytes a second (the other
// way unthrottled), and returns its address. Its socket towards target reads
// little at a time, so that target's writes wait on the rate.
func throttledRelay(t testing.TB, target string, rate int) string {
	return relayAtRates(t, target, rate, 0)
}

// relayAtRates is throttledRelay with a rate each way, in bytes a second:
// down from target, up to it; 0 leaves that way unthrottled.
func relayAtRates(t testing.TB, target string, down, up int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				return
			}
			_ = tc.(*net.TCPConn).SetReadBuffer(16 << 10)
			_ = c.(*net.TCPConn).SetReadBuffer(16 << 10)
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer tc.Close()
				copyAtRate(tc, c, up)
			}()
			go func() {
				defer wg.Done()
				defer c.Close()
				copyAtRate(c, tc, down)
			}()
		}
	}()
	return ln.Addr().String()
}

// copyAtRate copies src to dst at rate bytes a second (0: at once) until
// either fails.
func copyAtRate(dst, src net.Conn, rate int) {
	if rate == 0 {
		_, _ = io.Copy(dst, src)
		return
	}
	const piece = 16 << 10
	buf := make([]byte, piece)
	next := time.Now()
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			next = next.Add(time.Duration(n) * time.Second / time.Duration(rate))
			time.Sleep(time.Until(next))
		}
		if err != nil {
			return
		}
	}
}
