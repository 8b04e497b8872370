package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// wsCorks returns the corkConns under both ends of a WebSocket pair.
func wsCorks(t *testing.T, p pair) (client, server *corkConn) {
	t.Helper()
	return p.client.(*wsConn).nc, p.server.(*wsConn).nc
}

// wssPair is wsPair over TLS: the daemon's cork sits above TLS, the
// client's below it.
func wssPair(t *testing.T) pair {
	t.Helper()
	return wsPairOn(t, Config{}, Config{}, func(h http.Handler) (string, *tls.Config, func()) {
		_, ctls := testTLSConfigs(t)
		return wssServer(t, h), ctls, func() {}
	})
}

// A corked batch leaves in one write system call, in order, and only when
// the batch ends; each side, with and without TLS.
func TestWSCorkOneWritePerBatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T) pair
	}{
		{"ws", func(t *testing.T) pair { return wsPair(t, Config{}, Config{}) }},
		{"wss", wssPair},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.make(t)
			cc, sc := wsCorks(t, p)
			for _, dir := range []struct {
				name     string
				from, to Conn
				cork     *corkConn
			}{
				{"daemon", p.server, p.client, sc},
				{"client", p.client, p.server, cc},
			} {
				const n = 32
				before := dir.cork.writes.Load()
				dir.from.Cork()
				for i := range n {
					mustSend(t, dir.from, ControlChannel, pattern(1000, byte(i)))
				}
				if got := dir.cork.writes.Load() - before; got != 0 {
					t.Fatalf("%s: %d writes before Uncork", dir.name, got)
				}
				if err := dir.from.Uncork(); err != nil {
					t.Fatal(err)
				}
				if got := dir.cork.writes.Load() - before; got != 1 {
					t.Fatalf("%s: a batch of %d took %d writes, want 1", dir.name, n, got)
				}
				for i := range n {
					m := mustReceive(t, dir.to)
					equalMsg(t, m.Data, pattern(1000, byte(i)))
					m.Release()
				}
			}
		})
	}
}

// Without a Cork a Send is written at once: a lone message at low load
// waits for nothing.
func TestWSSendAloneWritesAtOnce(t *testing.T) {
	p := wsPair(t, Config{}, Config{})
	_, sc := wsCorks(t, p)
	for i := range 5 {
		before := sc.writes.Load()
		mustSend(t, p.server, ControlChannel, pattern(100, byte(i)))
		if got := sc.writes.Load() - before; got != 1 {
			t.Fatalf("a lone Send made %d writes", got)
		}
		m := mustReceive(t, p.client)
		equalMsg(t, m.Data, pattern(100, byte(i)))
		m.Release()
	}
}

// A batch larger than the cork goes out in cork-sized writes, and frames
// larger than it go straight through; every byte arrives in order.
func TestWSCorkLargeBatch(t *testing.T) {
	p := wsPair(t, Config{}, Config{})
	p.client.SetReadLimit(1 << 20)
	_, sc := wsCorks(t, p)
	sizes := []int{16 << 10, 16 << 10, 16 << 10, 16 << 10, 16 << 10, corkMax, 3, corkMax + 1, 200_000, 10}
	total := 0
	for _, n := range sizes {
		total += n
	}
	before := sc.writes.Load()
	p.server.Cork()
	for i, n := range sizes {
		mustSend(t, p.server, ControlChannel, pattern(n, byte(i)))
	}
	if err := p.server.Uncork(); err != nil {
		t.Fatal(err)
	}
	writes := int(sc.writes.Load() - before)
	if most := total/corkMax + len(sizes); writes > most {
		t.Fatalf("%d writes for %d bytes, want at most %d", writes, total, most)
	}
	for i, n := range sizes {
		m := mustReceive(t, p.client)
		equalMsg(t, m.Data, pattern(n, byte(i)))
		m.Release()
	}
}

// Close inside a batch writes the batch before the close frame: nothing
// Send returned for is lost, and Close does not wait for the Uncork.
func TestWSCloseInsideCork(t *testing.T) {
	p := wsPair(t, Config{}, Config{})
	p.server.Cork()
	for i := range 10 {
		mustSend(t, p.server, ControlChannel, pattern(500, byte(i)))
	}
	done := make(chan struct{})
	go func() {
		p.server.Close()
		close(done)
	}()
	for i := range 10 {
		m := mustReceive(t, p.client)
		equalMsg(t, m.Data, pattern(500, byte(i)))
		m.Release()
	}
	if _, err := p.client.Receive(testCtx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after the batch: %v, want ErrClosed", err)
	}
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("Close inside a Cork did not return")
	}
	p.server.Uncork() // nothing is held any more; a later Send fails
	if err := p.server.Send(testCtx(t), ControlChannel, []byte{1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
}

// Concurrent Sends join each other's batches; each goroutine's messages
// still arrive in its order, and never more writes than messages.
func TestWSConcurrentSendsBatch(t *testing.T) {
	p := wsPair(t, Config{}, Config{})
	cc, _ := wsCorks(t, p)
	const senders, each = 8, 200
	before := cc.writes.Load()
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := range each {
				msg := fmt.Appendf(nil, "%d %d", g, i)
				if err := p.client.Send(context.Background(), ControlChannel, msg); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	next := make([]int, senders)
	for range senders * each {
		m := mustReceive(t, p.server)
		var g, i int
		if _, err := fmt.Sscanf(string(m.Data), "%d %d", &g, &i); err != nil {
			t.Fatal(err)
		}
		m.Release()
		if i != next[g] {
			t.Fatalf("sender %d: message %d arrived when %d was due", g, i, next[g])
		}
		next[g]++
	}
	wg.Wait()
	if w := cc.writes.Load() - before; w > senders*each {
		t.Fatalf("%d writes for %d messages", w, senders*each)
	}
}

// A peer that stops reading blocks the batch's write, and Close still ends
// within the close timeout instead of waiting on it forever.
func TestWSCloseEndsStuckBatch(t *testing.T) {
	accepted := make(chan Conn, 1)
	stop := make(chan struct{})
	srvURL := wsServerCfg(t, Config{CloseTimeout: 300 * time.Millisecond}, func(c Conn) {
		accepted <- c
		<-stop
	})
	defer close(stop)
	ctx := testCtx(t)
	client, err := DialWS(ctx, srvURL, nil, Config{ReceiveQueue: 1, ReceiveBudget: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server := <-accepted
	// The client's receive queue holds one message, so its reader stops
	// and TCP's buffers fill: the batch's write blocks.
	blocked := make(chan error, 1)
	go func() {
		server.Cork()
		msg := make([]byte, 60<<10)
		for range 400 {
			if err := server.Send(context.Background(), ControlChannel, msg); err != nil {
				server.Uncork()
				blocked <- err
				return
			}
		}
		blocked <- server.Uncork()
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	server.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v with a stuck batch", d)
	}
	select {
	case err := <-blocked:
		if err == nil {
			t.Fatal("the stuck batch reported success")
		}
	case <-time.After(testTimeout):
		t.Fatal("the stuck batch's writer never returned")
	}
}

func wsServerCfg(t *testing.T, cfg Config, serve func(Conn)) string {
	t.Helper()
	srv := httptest.NewServer(NewWSHandler(cfg, serve))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/m2m"
}

// An ended context polls: messages that have arrived are still returned,
// and an empty queue answers at once with the context's error.
func TestReceivePollsWithEndedContext(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := tr.make(t, Config{}, Config{})
			done, cancel := context.WithCancel(context.Background())
			cancel()
			p.client.Cork()
			for i := range 3 {
				mustSend(t, p.client, ControlChannel, pattern(64, byte(i)))
			}
			if err := p.client.Uncork(); err != nil {
				t.Fatal(err)
			}
			m := mustReceive(t, p.server)
			equalMsg(t, m.Data, pattern(64, 0))
			m.Release()
			deadline := time.Now().Add(testTimeout)
			for i := 1; i < 3; {
				m, err := p.server.Receive(done)
				if errors.Is(err, context.Canceled) && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond) // not arrived yet
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				equalMsg(t, m.Data, pattern(64, byte(i)))
				m.Release()
				i++
			}
			start := time.Now()
			if _, err := p.server.Receive(done); !errors.Is(err, context.Canceled) {
				t.Fatalf("poll of an empty queue: %v", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("poll of an empty queue took %v", d)
			}
		})
	}
}

// On QUIC a corked batch is one Write per stream: the messages held for a
// channel are framed into one buffer. Every message arrives, in order on
// its channel; nothing is written before Uncork; a lone Send is written at
// once.
func TestQUICCorkOneWritePerStream(t *testing.T) {
	p := quicPair(t, Config{}, Config{})
	qc := p.client.(*quicConn)
	mustSend(t, p.client, ControlChannel, []byte("hello")) // the daemon side learns of the control stream
	m := mustReceive(t, p.server)
	m.Release()
	ch, err := p.client.AcquireChannel(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	const n = 32
	before := qc.cork.writes.Load()
	p.client.Cork()
	for i := range n {
		mustSend(t, p.client, ch, pattern(1000, byte(i)))
		if i%10 == 0 {
			mustSend(t, p.client, ControlChannel, pattern(100, byte(i)))
		}
	}
	if got := qc.cork.writes.Load() - before; got != 0 {
		t.Fatalf("%d writes before Uncork", got)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = p.server.Receive(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("before Uncork the peer received: %v", err)
	}
	if err := p.client.Uncork(); err != nil {
		t.Fatal(err)
	}
	if got := qc.cork.writes.Load() - before; got != 2 {
		t.Fatalf("a batch on 2 streams took %d writes", got)
	}
	next := map[ChannelID]int{}
	for range n + 4 {
		m := mustReceive(t, p.server)
		i := next[m.Channel]
		switch m.Channel {
		case ch:
			equalMsg(t, m.Data, pattern(1000, byte(i)))
		case ControlChannel:
			equalMsg(t, m.Data, pattern(100, byte(i*10)))
		default:
			t.Fatalf("message on channel %d", m.Channel)
		}
		next[m.Channel]++
		m.Release()
	}
	before = qc.cork.writes.Load()
	mustSend(t, p.client, ch, []byte("alone"))
	m = mustReceive(t, p.server)
	equalMsg(t, m.Data, []byte("alone"))
	m.Release()
	if got := qc.cork.writes.Load() - before; got != 0 {
		t.Fatalf("a lone Send was held (%d batch writes)", got)
	}
}

// Close inside a batch on QUIC writes what the batch holds before the
// control stream ends: the peer reads every message, then the end.
func TestQUICCloseInsideCork(t *testing.T) {
	p := quicPair(t, Config{}, Config{})
	p.client.Cork()
	for i := range 5 {
		mustSend(t, p.client, ControlChannel, pattern(300, byte(i)))
	}
	done := make(chan struct{})
	go func() {
		p.client.Close()
		close(done)
	}()
	for i := range 5 {
		m := mustReceive(t, p.server)
		equalMsg(t, m.Data, pattern(300, byte(i)))
		m.Release()
	}
	if _, err := p.server.Receive(testCtx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after the batch: %v, want ErrClosed", err)
	}
	p.server.Close() // ends the client's linger
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("Close inside a Cork did not return")
	}
	p.client.Uncork()
}
