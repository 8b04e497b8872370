package client

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/m2md/m2md/frame"
)

// benchBody is a real 1 KB chat request from the corpus, re-addressed to
// the test agent's echo model.
func benchBody(b *testing.B) []byte {
	body, err := os.ReadFile("../testdata/corpus/req-chat-1k-01.json")
	if err != nil {
		b.Fatal(err)
	}
	if !bytes.Contains(body, []byte(`"model"`)) {
		b.Fatal("corpus request without a model")
	}
	return bytes.Replace(body, []byte(`"model"`), []byte(`"model":"echo","original_model"`), 1)
}

// BenchmarkDo measures a Do round trip through the real daemon to the
// "models" agent's echo model and back: encode, protect, send, the
// daemon's verify/re-protect and routing, the agent's receive, decode,
// encode and send, the same again on the way back. Client, daemon and agent
// share the machine and this process: B/op and allocs/op count all three.
func BenchmarkDo(b *testing.B) {
	body := benchBody(b)
	d := startDaemon(b)
	for _, tr := range transports {
		for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityAEAD} {
			b.Run(tr+"/"+mode.String(), func(b *testing.B) {
				c := dial(b, d, tr, Options{Security: mode})
				ctx := context.Background()
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := c.Do(ctx, body); err != nil {
						b.Fatal(err)
					}
				}
				st := c.Stats()
				b.ReportMetric(st.SendRatio(), "json/wire")
			})
		}
	}
}

// BenchmarkDoParallel is BenchmarkDo with many requests in flight.
func BenchmarkDoParallel(b *testing.B) {
	body := benchBody(b)
	d := startDaemon(b)
	for _, tr := range transports {
		b.Run(tr, func(b *testing.B) {
			c := dial(b, d, tr, Options{Security: frame.SecurityAEAD})
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := c.Do(ctx, body); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
