package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/daemon"
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

// BenchmarkDoTraced is BenchmarkDo with every request traced and sampled:
// the request carries its caller's span context, the daemon records a span
// for it and exports it over OTLP/HTTP (batched, as m2md serve does from
// OTEL_EXPORTER_OTLP_ENDPOINT) to a collector that reads and drops what it
// gets, and the provider's handler gets the daemon's span as its parent.
// Against BenchmarkDo it is the cost of tracing on the routing path
// (docs/benchmarks.md, "Traces").
func BenchmarkDoTraced(b *testing.B) {
	body := benchBody(b)
	var exported atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		exported.Add(n)
	}))
	b.Cleanup(sink.Close)
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(sink.URL+"/v1/traces"))
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	d := startDaemonWith(b, func(c *daemon.Config) { c.TracerProvider = tp }, Options{})
	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 15: 0x36}, SpanID: trace.SpanID{0xb7, 7: 1}, TraceFlags: trace.FlagsSampled,
	})
	for _, tr := range transports {
		b.Run(tr+"/"+frame.SecurityAEAD.String(), func(b *testing.B) {
			c := dial(b, d, tr, Options{Security: frame.SecurityAEAD})
			ctx := trace.ContextWithSpanContext(context.Background(), caller)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Do(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	if err := tp.ForceFlush(context.Background()); err != nil || exported.Load() == 0 {
		b.Fatalf("no spans exported (%v)", err)
	}
}
