package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// BenchmarkEcho measures round trips over loopback: the client sends a
// message, the server echoes it on the same channel, the client waits for
// the echo. "seq" is one request at a time; "c16" has 16 requests in flight
// on 16 channels (one WebSocket connection carries all 16). rt/s is round
// trips per second, comparable with BenchmarkEchoBaseline (bare TCP and WebSocket).
//
//	go test -run=^$ -bench=Echo -benchtime=2s -count=5 ./transport/
func BenchmarkEcho(b *testing.B) {
	for _, tr := range transports {
		for _, mode := range []struct {
			name    string
			workers int
		}{{"seq", 1}, {"c16", 16}} {
			for _, size := range []int{256, 1024, 16384} {
				b.Run(fmt.Sprintf("%s/%s/%d", tr.name, mode.name, size), func(b *testing.B) {
					benchEcho(b, tr.make, mode.workers, size)
				})
			}
		}
	}
}

func benchEcho(b *testing.B, mk pairMaker, workers, size int) {
	p := mk(b, Config{}, Config{})
	p.client.SetReadLimit(1 << 20)
	p.server.SetReadLimit(1 << 20)
	bg := context.Background()

	var serverWG sync.WaitGroup
	serverWG.Go(func() {
		for {
			m, err := p.server.Receive(bg)
			if err != nil {
				return
			}
			err = p.server.Send(bg, m.Channel, m.Data)
			m.Release()
			if err != nil {
				return
			}
		}
	})

	// With several workers one goroutine receives for all and hands each
	// echo to its worker, as a session's receive loop would.
	replies := make([]chan Message, workers)
	for i := range replies {
		replies[i] = make(chan Message, 1)
	}
	var dispatchWG sync.WaitGroup
	if workers > 1 {
		dispatchWG.Go(func() {
			for {
				m, err := p.client.Receive(bg)
				if err != nil {
					return
				}
				replies[binary.BigEndian.Uint16(m.Data)] <- m
			}
		})
	}

	msgs := make([][]byte, workers)
	chans := make([]ChannelID, workers)
	for w := range workers {
		msgs[w] = pattern(size, byte(w))
		binary.BigEndian.PutUint16(msgs[w], uint16(w))
		ch, err := p.client.AcquireChannel(bg)
		if err != nil {
			b.Fatal(err)
		}
		chans[w] = ch
	}

	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for done.Add(1) <= int64(b.N) {
				if err := p.client.Send(bg, chans[w], msgs[w]); err != nil {
					b.Error(err)
					return
				}
				var m Message
				if workers == 1 {
					var err error
					if m, err = p.client.Receive(bg); err != nil {
						b.Error(err)
						return
					}
				} else {
					m = <-replies[w]
				}
				if len(m.Data) != size {
					b.Errorf("echo of %d bytes came back with %d", size, len(m.Data))
				}
				m.Release()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rt/s")
	// Both ends are this process: what one connection costs per round
	// trip, steadier than wall time on a shared machine.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/rt")
	p.close()
	serverWG.Wait()
	dispatchWG.Wait()
}

// BenchmarkMessageRead compares reading a WebSocket message into a pooled
// buffer (readMessage, what the transport does) with io.ReadAll (what
// websocket.Conn.Read does), on an in-memory message.
func BenchmarkMessageRead(b *testing.B) {
	for _, size := range []int{256, 1024, 16384} {
		data := pattern(size, 1)
		b.Run(fmt.Sprintf("pooled/%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			r := &chunkReader{}
			probe := new([1]byte)
			for b.Loop() {
				r.data = data
				buf, err := readMessage(r, MaxReadLimit, size, probe)
				if err != nil {
					b.Fatal(err)
				}
				putBuffer(buf)
			}
		})
		b.Run(fmt.Sprintf("readall/%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			r := &chunkReader{}
			for b.Loop() {
				r.data = data
				if _, err := io.ReadAll(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSendBatch measures what a batch of 32 messages costs the sender,
// written one message at a time (Send alone, without Cork: a
// system call each on WebSocket, a stream Write each on QUIC) or as one
// batch (Cork … Uncork, as the daemon's writer does: one system call on
// WebSocket, one Write per stream on QUIC). The daemon side sends to the
// client on one channel; the client drains on its own goroutine. Compare
// the modes with benchstat -col /mode.
//
//	go test -run=^$ -bench=SendBatch -benchtime=1000x -count=5 ./transport/ | benchstat -col /mode -
func BenchmarkSendBatch(b *testing.B) {
	for _, tr := range transports {
		for _, size := range []int{256, 1024, 16384} {
			for _, mode := range []string{"per-message", "batch"} {
				b.Run(fmt.Sprintf("%s/size=%d/mode=%s", tr.name, size, mode), func(b *testing.B) {
					benchSendBatch(b, tr.make, size, mode == "batch")
				})
			}
		}
	}
}

func benchSendBatch(b *testing.B, mk pairMaker, size int, corked bool) {
	const batch, ahead = 32, 4
	p := mk(b, Config{}, Config{})
	p.client.SetReadLimit(1 << 20)
	bg := context.Background()
	// A channel both ends know: the client opens it (on QUIC, a stream the
	// daemon side learns of from its first message).
	ch, err := p.client.AcquireChannel(bg)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.client.Send(bg, ch, []byte("open")); err != nil {
		b.Fatal(err)
	}
	m, err := p.server.Receive(bg)
	if err != nil {
		b.Fatal(err)
	}
	ch = m.Channel
	m.Release()
	// The receiver hands back a token per batch received, so that at most
	// a few batches are in flight: the buffers never fill, and the figure
	// is the cost of sending, not of waiting.
	tokens := make(chan struct{}, ahead)
	for range ahead {
		tokens <- struct{}{}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 1; ; n++ {
			m, err := p.client.Receive(bg)
			if err != nil {
				return
			}
			m.Release()
			if n%batch == 0 {
				tokens <- struct{}{}
			}
		}
	})
	msg := make([]byte, size)
	b.SetBytes(int64(size * batch))
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		<-tokens
		if corked {
			p.server.Cork()
		}
		for range batch {
			if err := p.server.Send(bg, ch, msg); err != nil {
				b.Fatal(err)
			}
		}
		if corked {
			if err := p.server.Uncork(); err != nil {
				b.Fatal(err)
			}
		}
	}
	for range ahead {
		<-tokens
	}
	b.StopTimer()
	// CPU time (both ends: one process) is steadier than wall time on a
	// machine shared with other work.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N*batch), "cpu-ns/msg")
	p.close()
	wg.Wait()
}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
