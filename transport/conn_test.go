package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestRoundTripSizes(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := tr.make(t, Config{}, Config{})
			if got := p.client.Transport(); got != tr.name {
				t.Fatalf("Transport() = %q", got)
			}
			if p.client.RemoteAddr() == nil || p.server.RemoteAddr() == nil {
				t.Fatal("RemoteAddr is nil")
			}
			// Up to the pre-ACCEPT limit first, then the limit is raised as
			// after ACCEPT.
			sizes := []int{0, 1, 255, 256, 1000, 4096, 65535, DefaultReadLimit}
			roundTrip(t, p, sizes)
			p.client.SetReadLimit(2 << 20)
			p.server.SetReadLimit(2 << 20)
			roundTrip(t, p, []int{DefaultReadLimit + 1, 300_000, 1 << 20, 1<<20 + 7, 2 << 20})
		})
	}
}

// roundTrip sends each size client → server, the server echoes it back,
// and both directions are checked byte for byte. Messages go on the
// control channel, except those above its 65,536-byte limit on QUIC.
func roundTrip(t *testing.T, p pair, sizes []int) {
	t.Helper()
	for i, n := range sizes {
		want := pattern(n, byte(i))
		ch := ControlChannel
		if n > DefaultReadLimit {
			var err error
			if ch, err = p.client.AcquireChannel(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}
		mustSend(t, p.client, ch, want)
		m := mustReceive(t, p.server)
		if m.Channel != ch {
			t.Fatalf("arrived on channel %d", m.Channel)
		}
		equalMsg(t, m.Data, want)
		mustSend(t, p.server, m.Channel, m.Data)
		m.Release()
		back := mustReceive(t, p.client)
		equalMsg(t, back.Data, want)
		back.Release()
	}
}

func TestReadLimitEnforced(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := tr.make(t, Config{}, Config{})
			ctx := testCtx(t)
			// Send refuses what no peer may accept.
			if err := p.client.Send(ctx, ControlChannel, make([]byte, MaxReadLimit+1)); !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("Send above MaxReadLimit: %v", err)
			}
			// The server still has the pre-ACCEPT limit. (On QUIC the
			// server stops reading at the prefix, so the Send itself may
			// already see the stream refused.)
			if err := p.client.Send(ctx, ControlChannel, make([]byte, DefaultReadLimit+1)); err != nil {
				var ce *ChannelError
				if !errors.As(err, &ce) {
					t.Fatal(err)
				}
			}
			_, err := p.server.Receive(ctx)
			if !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("Receive: %v, want ErrMessageTooLarge", err)
			}
			if tr.name == "quic" {
				var ce *ChannelError
				if !errors.As(err, &ce) || ce.Channel != ControlChannel {
					t.Fatalf("QUIC oversize error %v does not name the channel", err)
				}
			} else if tr.name == "ws" {
				// WebSocket: the connection stays open for the session to
				// say why; closing it then sends 1009.
				p.server.Close()
				_, err := p.client.Receive(ctx)
				if !errors.Is(err, ErrClosed) || websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
					t.Fatalf("client Receive after the server's Close: %v, want a 1009 close", err)
				}
			}
		})
	}
}

func TestLoweredReadLimit(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := tr.make(t, Config{}, Config{})
			p.server.SetReadLimit(100)
			mustSend(t, p.client, ControlChannel, make([]byte, 100))
			m := mustReceive(t, p.server)
			m.Release()
			mustSend(t, p.client, ControlChannel, make([]byte, 101))
			if _, err := p.server.Receive(testCtx(t)); !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("Receive: %v", err)
			}
		})
	}
}

// TestConcurrentChannels: workers send at once, each on its own channel
// (QUIC) or all on the one channel (WebSocket); every message arrives
// intact and each worker's messages in order, both ways.
func TestConcurrentChannels(t *testing.T) {
	const workers, perWorker = 8, 25
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := tr.make(t, Config{}, Config{})
			p.client.SetReadLimit(1 << 20)
			p.server.SetReadLimit(1 << 20)
			ctx := testCtx(t)

			// The server echoes everything on the channel it came in on.
			serverNext := make(map[uint16]uint16)
			serverChan := make(map[uint16]ChannelID)
			var serverErr error
			serverDone := make(chan struct{})
			go func() {
				defer close(serverDone)
				for range workers * perWorker {
					m, err := p.server.Receive(ctx)
					if err != nil {
						serverErr = err
						return
					}
					w, seq := binary.BigEndian.Uint16(m.Data), binary.BigEndian.Uint16(m.Data[2:])
					if seq != serverNext[w] {
						serverErr = fmt.Errorf("worker %d: message %d arrived as number %d", w, seq, serverNext[w])
					}
					serverNext[w]++
					if ch, ok := serverChan[w]; ok && ch != m.Channel {
						serverErr = fmt.Errorf("worker %d moved from channel %d to %d", w, ch, m.Channel)
					}
					serverChan[w] = m.Channel
					if err := p.server.Send(ctx, m.Channel, m.Data); err != nil {
						serverErr = err
						return
					}
					m.Release()
				}
			}()

			// One goroutine receives the echoes and hands them to workers.
			replies := make([]chan Message, workers)
			for i := range replies {
				replies[i] = make(chan Message, perWorker)
			}
			go func() {
				for range workers * perWorker {
					m, err := p.client.Receive(ctx)
					if err != nil {
						t.Errorf("client Receive: %v", err)
						return
					}
					replies[binary.BigEndian.Uint16(m.Data)] <- m
				}
			}()

			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					ch, err := p.client.AcquireChannel(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					defer p.client.ReleaseChannel(ch)
					sent := make([][]byte, 0, perWorker)
					for seq := range perWorker {
						// Sizes vary so that large and small messages
						// interleave; the total stays a few MB so that a
						// loaded CI machine gets through it.
						size := 4 + (seq*7919+w*104729)%20_000
						if seq%10 == 3 {
							size = 100_000 + w
						}
						msg := pattern(size, byte(seq))
						binary.BigEndian.PutUint16(msg, uint16(w))
						binary.BigEndian.PutUint16(msg[2:], uint16(seq))
						sent = append(sent, msg)
						if err := p.client.Send(ctx, ch, msg); err != nil {
							t.Error(err)
							return
						}
					}
					for seq := range perWorker {
						select {
						case m := <-replies[w]:
							if m.Channel != ch && tr.name == "quic" {
								t.Errorf("worker %d: reply on channel %d, sent on %d", w, m.Channel, ch)
							}
							if string(m.Data) != string(sent[seq]) {
								t.Errorf("worker %d: reply %d differs from message %d", w, binary.BigEndian.Uint16(m.Data[2:]), seq)
							}
							m.Release()
						case <-ctx.Done():
							t.Errorf("worker %d: reply %d missing", w, seq)
							return
						}
					}
				})
			}
			wg.Wait()
			<-serverDone
			if serverErr != nil {

				t.Fatal(serverErr)
			}
			if tr.name == "quic" && len(serverChan) != workers {
				t.Fatalf("%d workers used %d channels", workers, len(serverChan))
			}
		})
	}
}

func TestReceiveContextLeavesConnUsable(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := tr.make(t, Config{}, Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			if _, err := p.server.Receive(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Receive: %v", err)
			}
			mustSend(t, p.client, ControlChannel, []byte("still here"))
			m := mustReceive(t, p.server)
			equalMsg(t, m.Data, []byte("still here"))
			m.Release()
		})
	}
}

func TestCloseUnblocksAndIsIdempotent(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := tr.make(t, Config{}, Config{})
			mustSend(t, p.client, ControlChannel, []byte("hello"))
			m := mustReceive(t, p.server)
			m.Release()

			recvErr := make(chan error, 1)
			go func() {
				_, err := p.server.Receive(context.Background())
				recvErr <- err
			}()
			time.Sleep(20 * time.Millisecond)
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					if err := p.server.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				})
			}
			select {
			case err := <-recvErr:
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("Receive after Close: %v", err)
				}
			case <-time.After(testTimeout):
				t.Fatal("Close did not unblock Receive")
			}
			wg.Wait()
			ctx := testCtx(t)
			if err := p.server.Send(ctx, ControlChannel, []byte("x")); !errors.Is(err, ErrClosed) {
				t.Fatalf("Send after Close: %v", err)
			}
			if _, err := p.server.AcquireChannel(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("AcquireChannel after Close: %v", err)
			}
			if _, err := p.server.Receive(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("Receive after Close: %v", err)
			}
			// The peer learns of it.
			if _, err := p.client.Receive(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("peer Receive after Close: %v", err)
			}
		})
	}
}

// TestLastWordsSurviveClose: a message sent right before Close reaches the
// peer (REJECT then close, CLOSE acknowledgement then close).
func TestLastWordsSurviveClose(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for i := range 10 {
				p := tr.make(t, Config{}, Config{})
				mustSend(t, p.client, ControlChannel, []byte("HELLO"))
				m := mustReceive(t, p.server)
				m.Release()
				last := pattern(20_000, byte(i))
				mustSend(t, p.server, ControlChannel, last)
				closed := make(chan time.Duration, 1)
				go func() {
					start := time.Now()
					p.server.Close()
					closed <- time.Since(start)
				}()
				got := mustReceive(t, p.client)
				equalMsg(t, got.Data, last)
				got.Release()
				if _, err := p.client.Receive(testCtx(t)); !errors.Is(err, ErrClosed) {
					t.Fatalf("after the last message: %v, want ErrClosed", err)
				}
				p.client.Close()
				if d := <-closed; d > time.Second {
					t.Fatalf("server Close took %v although the client closed too", d)
				}
				p.close()
			}
		})
	}
}

func TestNoGoroutineLeaks(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			runtime.GC()
			before := runtime.NumGoroutine()
			func() {
				p := tr.make(t, Config{}, Config{})
				ctx := testCtx(t)
				for range 3 {
					ch, err := p.client.AcquireChannel(ctx)
					if err != nil {
						t.Fatal(err)
					}
					mustSend(t, p.client, ch, []byte("request"))
					m := mustReceive(t, p.server)
					mustSend(t, p.server, m.Channel, []byte("reply"))
					m.Release()
					r := mustReceive(t, p.client)
					r.Release()
				}
				// One side blocked in Receive at Close time.
				go p.client.Receive(context.Background())
				p.close()
			}()
			checkNoLeaks(t, before)
		})
	}
}

// TestAbortDoesNotWaitForThePeer: Abort ends a connection whose peer is
// alive but neither reads nor closes at once, where Close (QUIC) waits
// CloseTimeout for the peer to finish; the peer learns of it, and the
// aborted side's calls fail with ErrClosed.
func TestAbortDoesNotWaitForThePeer(t *testing.T) {
	const closeTimeout = 10 * time.Second
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := tr.make(t, Config{}, Config{CloseTimeout: closeTimeout})
			mustSend(t, p.client, ControlChannel, []byte("hello"))
			m := mustReceive(t, p.server)
			m.Release()
			mustSend(t, p.server, ControlChannel, pattern(20_000, 1)) // never read
			start := time.Now()
			p.server.Abort()
			if d := time.Since(start); d > closeTimeout/2 {
				t.Fatalf("Abort took %v; it must not wait for the peer (CloseTimeout %v)", d, closeTimeout)
			}
			p.server.Abort() // idempotent, and Close after it too
			p.server.Close()
			ctx := testCtx(t)
			if err := p.server.Send(ctx, ControlChannel, []byte("x")); !errors.Is(err, ErrClosed) {
				t.Fatalf("Send after Abort: %v", err)
			}
			for {
				m, err := p.client.Receive(ctx)
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Fatalf("peer Receive after Abort: %v, want ErrClosed", err)
					}
					break
				}
				m.Release() // what arrived before the abort may be read
			}
		})
	}
}

// The side that accepted a connection counts what it receives
// (ReadProgress): at least every byte of every message, with the framing
// on the network transports, exactly the messages in process. The
// daemon's liveness check reads it to tell a peer sending a large message
// slowly from one that is gone.
func TestBytesRead(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := tr.make(t, Config{}, Config{})
			rp, ok := p.server.(ReadProgress)
			if !ok {
				t.Fatalf("%T does not report ReadProgress", p.server)
			}
			before := rp.BytesRead()
			sent := 0
			for i, n := range []int{1, 1000, 65535} {
				mustSend(t, p.client, ControlChannel, pattern(n, byte(i)))
				m := mustReceive(t, p.server)
				m.Release()
				sent += n
				got := int(rp.BytesRead() - before)
				if got < sent || (tr.name == "inproc" && got != sent) || got > sent+64*(i+1) {
					t.Fatalf("after %d bytes of messages: BytesRead grew by %d", sent, got)
				}
			}
		})
	}
}
