package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go"
)

// BenchmarkEchoBaseline is BenchmarkEcho's sequential case written straight
// against the libraries (inline reads, no receive queue, no pooling), run in
// the same process and conditions, so that the transport's own overhead can
// be read off as the difference.
func BenchmarkEchoBaseline(b *testing.B) {
	for _, size := range []int{256, 1024, 16384} {
		b.Run(fmt.Sprintf("ws-raw/seq/%d", size), func(b *testing.B) { benchRawWS(b, size) })
		b.Run(fmt.Sprintf("quic-raw/seq/%d", size), func(b *testing.B) { benchRawQUIC(b, size) })
	}
}

func benchRawWS(b *testing.B, size int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(1 << 20)
		wg.Add(1)
		defer wg.Done()
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, msg); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		b.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	msg := pattern(size, 1)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.Read(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rt/s")
	c.CloseNow()
	wg.Wait()
}

func benchRawQUIC(b *testing.B, size int) {
	stls, ctls := testTLSConfigs(b)
	stls, ctls = quicTLS(stls), quicTLS(ctls)
	ln, err := quic.ListenAddr("127.0.0.1:0", stls, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() {
		qc, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		defer qc.CloseWithError(0, "")
		s, err := qc.AcceptStream(ctx)
		if err != nil {
			return
		}
		buf := make([]byte, 4+size)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write(buf); err != nil {
				return
			}
		}
	})
	qc, err := quic.DialAddr(ctx, ln.Addr().String(), ctls, nil)
	if err != nil {
		b.Fatal(err)
	}
	s, err := qc.OpenStream()
	if err != nil {
		b.Fatal(err)
	}
	out := make([]byte, 4+size)
	binary.BigEndian.PutUint32(out, uint32(size))
	in := make([]byte, 4+size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Write(out); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(s, in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rt/s")
	qc.CloseWithError(0, "")
	wg.Wait()
}
