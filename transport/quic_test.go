package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

func TestQUICAcquireChannelReuse(t *testing.T) {
	p := quicPair(t, Config{}, Config{})
	ctx := testCtx(t)
	a, err := p.client.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a == ControlChannel {
		t.Fatal("AcquireChannel handed out the control channel")
	}
	b, err := p.client.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("two outstanding acquisitions share a channel")
	}
	// Streams opened by the client are client-initiated bidirectional:
	// ids ≡ 0 mod 4.
	if a%4 != 0 || b%4 != 0 {
		t.Fatalf("client channel ids %d, %d are not client bidirectional stream ids", a, b)
	}
	p.client.ReleaseChannel(b)
	p.client.ReleaseChannel(b) // double release must not hand b out twice
	p.client.ReleaseChannel(ControlChannel)
	p.client.ReleaseChannel(12345) // unknown: ignored
	c, err := p.client.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c != b {
		t.Fatalf("released channel %d was not reused (got %d)", b, c)
	}
	d, err := p.client.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d == a || d == b || d == ControlChannel {
		t.Fatalf("fresh acquisition returned a busy channel %d", d)
	}
	// The reused stream works, on both ends.
	mustSend(t, p.client, c, []byte("on a reused stream"))
	m := mustReceive(t, p.server)
	if m.Channel != c {
		t.Fatalf("arrived on %d, sent on %d", m.Channel, c)
	}
	m.Release()
}

func TestQUICStreamLimitWaitsForRelease(t *testing.T) {
	// The daemon allows 3 client streams: control + 2 data channels.
	p := quicPair(t, Config{}, Config{MaxIncomingChannels: 3})
	ctx := testCtx(t)
	a, err := p.client.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.client.AcquireChannel(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.client.AcquireChannel(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third AcquireChannel: %v, want to wait until the deadline", err)
	}
	got := make(chan ChannelID, 1)
	go func() {
		ch, err := p.client.AcquireChannel(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- ch
	}()
	time.Sleep(20 * time.Millisecond)
	p.client.ReleaseChannel(a)
	select {
	case ch := <-got:
		if ch != a {
			t.Fatalf("waiting AcquireChannel got %d, want the released %d", ch, a)
		}
	case <-ctx.Done():
		t.Fatal("release did not wake the waiting AcquireChannel")
	}

	// Close wakes a waiter too.
	waitErr := make(chan error, 1)
	go func() {
		_, err := p.client.AcquireChannel(context.Background())
		waitErr <- err
	}()
	time.Sleep(20 * time.Millisecond)
	p.client.Close()
	if err := <-waitErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("AcquireChannel across Close: %v", err)
	}
}

// TestQUICPeerOpenedChannel: the daemon opens a stream to deliver a
// request; the client answers on it; the channel stays the daemon's.
func TestQUICPeerOpenedChannel(t *testing.T) {
	p := quicPair(t, Config{}, Config{})
	ctx := testCtx(t)
	mustSend(t, p.client, ControlChannel, []byte("HELLO"))
	m := mustReceive(t, p.server)
	m.Release()

	ch, err := p.server.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ch%4 != 1 {
		t.Fatalf("daemon channel %d is not a server bidirectional stream id", ch)
	}
	for i := range 3 {
		mustSend(t, p.server, ch, []byte{byte(i)})
		req := mustReceive(t, p.client)
		if req.Channel != ch {
			t.Fatalf("request arrived on %d, sent on %d", req.Channel, ch)
		}
		mustSend(t, p.client, req.Channel, []byte{byte(i), 'r'})
		req.Release()
		reply := mustReceive(t, p.server)
		if reply.Channel != ch || string(reply.Data) != string([]byte{byte(i), 'r'}) {
			t.Fatalf("reply %q on %d", reply.Data, reply.Channel)
		}
		reply.Release()
	}
	// The client must not pool the daemon's stream as its own.
	p.client.ReleaseChannel(ch)
	own, err := p.client.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if own == ch {
		t.Fatal("client pooled a stream the daemon opened")
	}
}

func TestQUICServerControlSendWaitsForClient(t *testing.T) {
	p := quicPair(t, Config{}, Config{})
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.server.Send(short, ControlChannel, []byte("early")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("server Send before the control stream exists: %v", err)
	}
	sent := make(chan error, 1)
	go func() { sent <- p.server.Send(testCtx(t), ControlChannel, []byte("ACCEPT")) }()
	time.Sleep(20 * time.Millisecond)
	mustSend(t, p.client, ControlChannel, []byte("HELLO"))
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	got := mustReceive(t, p.client)
	equalMsg(t, got.Data, []byte("ACCEPT"))
	got.Release()
	// Unknown channels are refused.
	if err := p.server.Send(testCtx(t), 99, []byte("x")); !errors.Is(err, ErrUnknownChannel) {
		t.Fatalf("Send on unknown channel: %v", err)
	}
}

func TestQUICWrongALPNRejected(t *testing.T) {
	stls, ctls := testTLSConfigs(t)
	ctx := testCtx(t)

	// A client offering another protocol cannot reach an m2m listener.
	ln, err := ListenQUIC("127.0.0.1:0", stls, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Unbind()
	other := ctls.Clone()
	other.NextProtos = []string{"h3"}
	if qc, err := quic.DialAddr(ctx, ln.Addr().String(), other, nil); err == nil {
		qc.CloseWithError(0, "")
		t.Fatal("listener accepted ALPN h3")
	}

	// DialQUIC refuses a server that does not speak m2m/1.
	h3 := stls.Clone()
	h3.NextProtos = []string{"h3"}
	rawLn, err := quic.ListenAddr("127.0.0.1:0", h3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rawLn.Close()
	if c, err := DialQUIC(ctx, rawLn.Addr().String(), ctls, Config{}); err == nil {
		c.Close()
		t.Fatal("DialQUIC connected to an h3-only server")
	}
}

func TestQUICListenerClose(t *testing.T) {
	stls, ctls := testTLSConfigs(t)
	ln, err := ListenQUIC("127.0.0.1:0", stls, Config{})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := ln.Accept(context.Background())
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	ln.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	addr := ln.Addr().String()
	// Closed, it refuses a new connection at once instead of letting the
	// client wait for its handshake timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = DialQUIC(ctx, addr, ctls, Config{})
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Fatalf("dial a closed listener: %v, want CONNECTION_REFUSED", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("refusal took %v", el)
	}
	// Unbound, its port is free.
	ln.Unbind()
	ua, _ := net.ResolveUDPAddr("udp", addr)
	u, err := net.ListenUDP("udp", ua)
	if err != nil {
		t.Fatalf("port still bound after Unbind: %v", err)
	}
	u.Close()
	if _, err := ListenQUIC("127.0.0.1:0", nil, Config{}); err == nil {
		t.Fatal("ListenQUIC without a certificate succeeded")
	}
}

// TestQUICSendDeadline: a Send stuck on flow control (the peer is not
// reading) gives up at its context's deadline; if it got part of the
// message out the channel is closed for sending, and only that channel.
func TestQUICSendDeadline(t *testing.T) {
	p := quicPair(t, Config{}, Config{ReceiveQueue: 1, ReceiveBudget: 1})
	p.server.SetReadLimit(MaxReadLimit)
	ctx := testCtx(t)
	ch, err := p.client.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 4<<20)
	var sendErr error
	for range 20 { // the peer's windows are at most 24 MiB in total
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		sendErr = p.client.Send(short, ch, big)
		cancel()
		if sendErr != nil {
			break
		}
	}
	if !errors.Is(sendErr, context.DeadlineExceeded) {
		t.Fatalf("Send against a peer that does not read: %v, want deadline exceeded", sendErr)
	}
	if err := p.client.Send(ctx, ch, []byte("x")); err == nil {
		t.Log("the cut-short Send had written nothing; the channel is still whole")
	} else if !errors.Is(err, ErrProtocol) {
		t.Fatalf("Send after a cut-short Send: %v", err)
	}
	// Cancellation without a deadline works the same way.
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	other, err := p.client.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if sendErr = p.client.Send(cctx, other, big); sendErr != nil {
			break
		}
	}
	if !errors.Is(sendErr, context.Canceled) {
		t.Fatalf("cancelled Send: %v", sendErr)
	}
	// The control channel is unaffected: the connection lives on.
	mustSend(t, p.client, ControlChannel, []byte("PING"))
}

// rawQUICClient dials the listener with quic-go directly, to send what
// DialQUIC never would.
func rawQUICClient(t *testing.T) (*quic.Conn, Conn) {
	t.Helper()
	return rawQUICClientConfig(t, Config{})
}

func rawQUICClientConfig(t *testing.T, cfg Config) (*quic.Conn, Conn) {
	t.Helper()
	stls, ctls := testTLSConfigs(t)
	ln, err := ListenQUIC("127.0.0.1:0", stls, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Unbind() })
	ctx := testCtx(t)
	tc := ctls.Clone()
	tc.NextProtos = []string{ALPN}
	qc, err := quic.DialAddr(ctx, ln.Addr().String(), tc, nil)
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		qc.CloseWithError(0, "")
		server.Close()
	})
	return qc, server
}

func TestQUICPeerFramingViolations(t *testing.T) {
	framed := func(msg string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
	}
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, qc *quic.Conn)
		check func(t *testing.T, err error)
	}{
		{
			name: "data stream ends inside a message",
			write: func(t *testing.T, qc *quic.Conn) {
				ctl, _ := qc.OpenStream()
				ctl.Write(framed("HELLO"))
				s, _ := qc.OpenStream()
				s.Write(framed("hello")[:6])
				s.Close()
			},
			check: wantChannelErr(4, ErrProtocol),
		},
		{
			// A closing peer finishes its data streams, then its control
			// stream: the connection's end, not a channel error.
			name: "data streams finished, then the control stream",
			write: func(t *testing.T, qc *quic.Conn) {
				ctl, _ := qc.OpenStream()
				ctl.Write(framed("HELLO"))
				s, _ := qc.OpenStream()
				s.Write(framed("req"))
				s.Close()
				time.Sleep(20 * time.Millisecond)
				ctl.Close()
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("err = %v, want ErrClosed", err)
				}
			},
		},
		{
			name: "data stream reset",
			write: func(t *testing.T, qc *quic.Conn) {
				ctl, _ := qc.OpenStream()
				ctl.Write(framed("HELLO"))
				s, _ := qc.OpenStream()
				s.Write(framed("hello")[:6])
				s.CancelWrite(7)
			},
			check: func(t *testing.T, err error) {
				var se *quic.StreamError
				if !errors.As(err, &se) || se.ErrorCode != 7 {
					t.Fatalf("err = %v, want the peer's stream reset", err)
				}
				wantChannelErr(4, nil)(t, err)
			},
		},
		{
			name: "control stream finished",
			write: func(t *testing.T, qc *quic.Conn) {
				ctl, _ := qc.OpenStream()
				ctl.Write(framed("HELLO"))
				ctl.Close()
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("err = %v, want ErrClosed", err)
				}
			},
		},
		{
			name: "connection closed by the peer",
			write: func(t *testing.T, qc *quic.Conn) {
				ctl, _ := qc.OpenStream()
				ctl.Write(framed("HELLO"))
				time.Sleep(50 * time.Millisecond)
				qc.CloseWithError(42, "bye")
			},
			check: func(t *testing.T, err error) {
				var ae *quic.ApplicationError
				if !errors.Is(err, ErrClosed) || !errors.As(err, &ae) || ae.ErrorCode != 42 {
					t.Fatalf("err = %v, want ErrClosed wrapping the peer's application error 42", err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qc, server := rawQUICClient(t)
			tc.write(t, qc)
			ctx := testCtx(t)
			for {
				m, err := server.Receive(ctx)
				if err != nil {
					tc.check(t, err)
					return
				}
				m.Release()
			}
		})
	}
}

func wantChannelErr(ch ChannelID, is error) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var ce *ChannelError
		if !errors.As(err, &ce) || ce.Channel != ch {
			t.Fatalf("err = %v, want a ChannelError on channel %d", err, ch)
		}
		if is != nil && !errors.Is(err, is) {
			t.Fatalf("err = %v, want %v", err, is)
		}
	}
}

func TestQUICDialHandshakeTimeout(t *testing.T) {
	// A UDP socket that never answers.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	_, ctls := testTLSConfigs(t)
	start := time.Now()
	_, err = DialQUIC(context.Background(), pc.LocalAddr().String(), ctls, Config{HandshakeTimeout: 200 * time.Millisecond})
	if err == nil {
		t.Fatal("DialQUIC to a silent socket succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("DialQUIC gave up after %v with HandshakeTimeout 200ms", d)
	}
}

// TestQUICDataAfterControlFinished: the end of a closing peer's control
// stream can overtake its last messages on a data stream (QUIC orders
// bytes within a stream only). Receive still returns them, and fails only
// once the data stream has ended too; a peer that never finishes its data
// stream is given up on after CloseTimeout.
func TestQUICDataAfterControlFinished(t *testing.T) {
	framed := func(msg string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
	}
	recvAll := func(t *testing.T, c Conn) (got []string, err error, took time.Duration) {
		ctx := testCtx(t)
		start := time.Now()
		for {
			m, err := c.Receive(ctx)
			if err != nil {
				slices.Sort(got) // streams are not ordered among themselves
				return got, err, time.Since(start)
			}
			got = append(got, string(m.Data))
			m.Release()
		}
	}
	t.Run("data stream finished late", func(t *testing.T) {
		qc, server := rawQUICClient(t)
		ctl, _ := qc.OpenStream()
		ctl.Write(framed("HELLO"))
		s, _ := qc.OpenStream()
		s.Write(framed("chunk 0"))
		ctl.Close()
		time.Sleep(50 * time.Millisecond) // the control stream's end surely first
		s.Write(framed("chunk 1"))
		s.Close()
		got, err, _ := recvAll(t, server)
		if want := "[HELLO chunk 0 chunk 1]"; fmt.Sprint(got) != want || !errors.Is(err, ErrClosed) {
			t.Fatalf("got %v then %v, want %s then ErrClosed", got, err, want)
		}
	})
	t.Run("data stream never finished", func(t *testing.T) {
		qc, server := rawQUICClientConfig(t, Config{CloseTimeout: 300 * time.Millisecond})
		ctl, _ := qc.OpenStream()
		ctl.Write(framed("HELLO"))
		s, _ := qc.OpenStream()
		s.Write(framed("chunk 0"))
		ctl.Close()
		got, err, took := recvAll(t, server)
		if want := "[HELLO chunk 0]"; fmt.Sprint(got) != want || !errors.Is(err, ErrClosed) {
			t.Fatalf("got %v then %v, want %s then ErrClosed", got, err, want)
		}
		if took < 250*time.Millisecond || took > 3*time.Second {
			t.Fatalf("Receive ended after %v, want about CloseTimeout (300ms)", took)
		}
	})
}

// TestQUICReceiveBudget: a peer opens many streams, announces a 400 KiB
// message on each and sends part of every body. What the connection holds
// for those messages stays within its 1 MiB budget (the other streams are
// not read, and flow control holds the peer), the control stream still gets
// through, and the trickled messages fail the connection with
// ErrMessageTimeout. (The stalled streams' bytes stay within the
// connection's flow-control window, which is the budget: the test keeps
// them below it, or the peer's own control stream would have to wait.)
func TestQUICReceiveBudget(t *testing.T) {
	const budget = 1 << 20
	qc, server := rawQUICClientConfig(t, Config{ReceiveBudget: budget, MessageTimeout: 500 * time.Millisecond})
	server.SetReadLimit(MaxReadLimit)
	ctl, err := qc.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	ctl.Write(binary.BigEndian.AppendUint32(nil, 5))
	ctl.Write([]byte("HELLO"))
	m := mustReceive(t, server)
	m.Release()
	const streams = 20
	chunk := make([]byte, 32<<10)
	for range streams {
		s, err := qc.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		s.Write(binary.BigEndian.AppendUint32(nil, 400<<10))
		// Never blocks the test: quic-go buffers what flow control has
		// not let out yet.
		go s.Write(chunk)
	}
	time.Sleep(200 * time.Millisecond)
	q := server.(*quicConn).queue
	q.mu.Lock()
	held := q.held[dataPool]
	q.mu.Unlock()
	if held > budget || held == 0 {
		t.Fatalf("connection holds %d bytes for trickled messages, budget %d", held, budget)
	}
	// Control messages have headroom beyond the budget.
	ctl.Write(binary.BigEndian.AppendUint32(nil, 4))
	ctl.Write([]byte("PING"))
	m = mustReceive(t, server)
	if string(m.Data) != "PING" {
		t.Fatalf("control message %q", m.Data)
	}
	m.Release()
	start := time.Now()
	_, err = server.Receive(testCtx(t))
	if !errors.Is(err, ErrMessageTimeout) {
		t.Fatalf("Receive: %v, want ErrMessageTimeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("trickled message noticed after %v (MessageTimeout 500ms)", d)
	}
}

// TestQUICIdleDefaults: by default a QUIC connection lives through 24 s of
// silence from its peer (a network outage, a process that gets no CPU) and
// sends a keep-alive after 6 s of it, well within the 30 s after which many
// NATs forget a UDP flow (RFC 9000 §10.1.2): a vanished peer is noticed
// within IdleTimeout, 30 s.
func TestQUICIdleDefaults(t *testing.T) {
	q := quicConfig(Config{}.withDefaults())
	if q.MaxIdleTimeout != 24*time.Second || q.KeepAlivePeriod != 6*time.Second {
		t.Fatalf("idle timeout %v, keep-alive %v; want 24s, 6s", q.MaxIdleTimeout, q.KeepAlivePeriod)
	}
	if q.MaxIdleTimeout+q.KeepAlivePeriod != defaultIdleTimeout {
		t.Fatalf("a vanished peer is noticed after %v, want %v", q.MaxIdleTimeout+q.KeepAlivePeriod, defaultIdleTimeout)
	}
}

// TestQUICConcurrentSendsSmallBudget: many channels send at once to a
// peer whose receive budget holds three of their messages (and whose
// connection window is 1 MiB, eight of them). Every message arrives whole.
// Without takeDataTurn the connection stalls until MessageTimeout: the
// senders' bodies, interleaved by quic-go, fill the receiver's flow-control
// window with the bodies of messages still waiting for budget, while the
// three that hold it cannot get the rest of theirs.
func TestQUICConcurrentSendsSmallBudget(t *testing.T) {
	const (
		size    = 128 << 10
		senders = 16
		each    = 4
	)
	p := quicPair(t, Config{}, Config{ReceiveQueue: 2, ReceiveBudget: 3 * size, MessageTimeout: 5 * time.Second})
	p.server.SetReadLimit(MaxReadLimit)
	ctx := testCtx(t)
	want := map[ChannelID][]byte{}
	for i := range senders {
		ch, err := p.client.AcquireChannel(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want[ch] = pattern(size, byte(i))
	}
	sendErr := make(chan error, senders)
	for ch, msg := range want {
		go func() {
			for range each {
				if err := p.client.Send(ctx, ch, msg); err != nil {
					sendErr <- err
					return
				}
			}
			sendErr <- nil
		}()
	}
	for k := range senders * each {
		m, err := p.server.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d of %d: %v", k+1, senders*each, err)
		}
		equalMsg(t, m.Data, want[m.Channel])
		m.Release()
	}
	for range senders {
		if err := <-sendErr; err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
}

// TestQUICAnswerDuringFirstWrite: the daemon's side opens a channel and
// writes a message the peer is slow to take, so the write is still under
// way when the peer, which already knows the channel, finishes its control
// stream and only then answers on the channel. Receive waits for that
// answer: the channel counts as known to the peer from the moment its
// first bytes go out, not once the write has returned (announce).
func TestQUICAnswerDuringFirstWrite(t *testing.T) {
	qc, server := rawQUICClient(t)
	framed := func(msg string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
	}
	ctx := testCtx(t)
	ctl, err := qc.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	ctl.Write(framed("HELLO"))
	m := mustReceive(t, server)
	m.Release()
	ch, err := server.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Larger than the peer's stream window (quicInitialStreamWindow): the
	// Send stays blocked while the peer reads only the length prefix.
	sendCtx, cancelSend := context.WithCancel(ctx)
	sent := make(chan error, 1)
	go func() { sent <- server.Send(sendCtx, ch, make([]byte, 4*quicInitialStreamWindow)) }()
	defer func() {
		cancelSend()
		<-sent
	}()
	s, err := qc.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var prefix [4]byte
	if _, err := io.ReadFull(s, prefix[:]); err != nil {
		t.Fatal(err)
	}
	ctl.Close()
	time.Sleep(50 * time.Millisecond) // the control stream's end surely first
	s.Write(framed("answer"))
	s.Close()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err = server.Receive(rctx)
	if err != nil {
		t.Fatalf("Receive: %v, want the answer sent on channel %d after the peer's control stream ended", err, ch)
	}
	if string(m.Data) != "answer" || m.Channel != ch {
		t.Fatalf("got %q on %d, want the answer on %d", m.Data, m.Channel, ch)
	}
	m.Release()
	select {
	case err := <-sent:
		t.Fatalf("the Send the peer never read returned %v", err)
	default:
	}
}
