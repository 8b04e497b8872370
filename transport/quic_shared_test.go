package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestQUICSharedDataChannel: after ShareDataChannel, every AcquireChannel,
// concurrent or not, released or not, gets the one data stream this side
// opened; messages of many senders on it arrive on it in each sender's
// order, and the peer's answers come back on it.
func TestQUICSharedDataChannel(t *testing.T) {
	p := quicPair(t, Config{}, Config{})
	ShareDataChannel(p.client)
	ctx := testCtx(t)

	const acquirers = 16
	got := make(chan ChannelID, acquirers)
	var wg sync.WaitGroup
	for range acquirers {
		wg.Go(func() {
			ch, err := p.client.AcquireChannel(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- ch
		})
	}
	wg.Wait()
	close(got)
	ch := <-got
	if ch == ControlChannel || ch%4 != 0 {
		t.Fatalf("shared channel %d: want a client-initiated bidirectional data stream", ch)
	}
	for other := range got {
		if other != ch {
			t.Fatalf("concurrent acquisitions got channels %d and %d, want one", ch, other)
		}
	}
	p.client.ReleaseChannel(ch)
	p.client.ReleaseChannel(ch)
	if again, err := p.client.AcquireChannel(ctx); err != nil || again != ch {
		t.Fatalf("after release: channel %d, %v; want %d", again, err, ch)
	}

	const senders, each = 4, 50
	for g := range senders {
		wg.Go(func() {
			for i := range each {
				if err := p.client.Send(ctx, ch, fmt.Appendf(nil, "%d:%d", g, i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	next := make([]int, senders)
	for range senders * each {
		m := mustReceive(t, p.server)
		if m.Channel != ch {
			t.Fatalf("message on channel %d, want the shared %d", m.Channel, ch)
		}
		var g, i int
		if _, err := fmt.Sscanf(string(m.Data), "%d:%d", &g, &i); err != nil || g >= senders || i != next[g] {
			t.Fatalf("got %q, want sender %d's message %d next", m.Data, g, next[g])
		}
		next[g]++
		m.Release()
		mustSend(t, p.server, ch, []byte("answer"))
	}
	wg.Wait()
	for range senders * each {
		if m := mustReceive(t, p.client); m.Channel != ch {
			t.Fatalf("answer on channel %d, want %d", m.Channel, ch)
		}
	}
}

// TestQUICSharedDataChannelReplaced: when the peer resets the shared
// stream, the next AcquireChannel opens another one, which works.
func TestQUICSharedDataChannelReplaced(t *testing.T) {
	p := quicPair(t, Config{}, Config{})
	ch := resetSharedStream(t, p)
	fresh, err := p.client.AcquireChannel(testCtx(t))
	if err != nil || fresh == ch {
		t.Fatalf("AcquireChannel after the reset: %d, %v; want a new channel", fresh, err)
	}
	sendsOn(t, p, fresh)
}

// TestQUICSharedDataChannelAtLimit: with a peer that allows one data
// stream, the replacement of a reset shared stream waits for the peer to
// allow another (it does once the old one is gone on both sides), and a
// call whose context has ended does not wait at all.
func TestQUICSharedDataChannelAtLimit(t *testing.T) {
	p := quicPair(t, Config{}, Config{MaxIncomingChannels: 2}) // control + 1
	ch := resetSharedStream(t, p)
	ended, cancel := context.WithCancel(testCtx(t))
	cancel()
	start := time.Now()
	if got, err := p.client.AcquireChannel(ended); err == nil && got == ch {
		t.Fatalf("AcquireChannel returned the reset channel %d", ch)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("AcquireChannel with an ended context took %v", took)
	}
	short, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	fresh, err := p.client.AcquireChannel(short)
	if err != nil || fresh == ch {
		t.Fatalf("AcquireChannel at the limit: %d, %v; want a new channel once the peer allows it", fresh, err)
	}
	sendsOn(t, p, fresh)
}

// resetSharedStream shares p.client's data channel, uses it once, has the
// server reset it, and waits until the client has seen that.
func resetSharedStream(t *testing.T, p pair) ChannelID {
	t.Helper()
	ShareDataChannel(p.client)
	ctx := testCtx(t)
	ch, err := p.client.AcquireChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustSend(t, p.client, ch, []byte("first"))
	m := mustReceive(t, p.server)
	m.Release()
	srv := p.server.(*quicConn)
	srv.mu.Lock()
	str := srv.streams[ch].str
	srv.mu.Unlock()
	str.CancelRead(quicStreamAborted)
	str.CancelWrite(quicStreamAborted)
	_, err = p.client.Receive(ctx)
	if chErr := (*ChannelError)(nil); !errors.As(err, &chErr) || chErr.Channel != ch {
		t.Fatalf("client Receive after the reset: %v, want a ChannelError for %d", err, ch)
	}
	return ch
}

// sendsOn checks that a message sent on ch reaches the server on ch,
// past the server's own report of the stream it reset.
func sendsOn(t *testing.T, p pair, ch ChannelID) {
	t.Helper()
	mustSend(t, p.client, ch, []byte("second"))
	ctx := testCtx(t)
	for {
		m, err := p.server.Receive(ctx)
		if errors.As(err, new(*ChannelError)) {
			continue
		}
		if err != nil || m.Channel != ch || string(m.Data) != "second" {
			t.Fatalf("got %q on %d (%v), want \"second\" on %d", m.Data, m.Channel, err, ch)
		}
		m.Release()
		return
	}
}

// TestWSShareDataChannel: on WebSocket ShareDataChannel changes nothing.
func TestWSShareDataChannel(t *testing.T) {
	p := wsPair(t, Config{}, Config{})
	ShareDataChannel(p.client)
	if ch, err := p.client.AcquireChannel(testCtx(t)); err != nil || ch != 0 {
		t.Fatalf("AcquireChannel: %d, %v; want 0", ch, err)
	}
}
