package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/internal/daemontest"
)

// TestLoadTraced: with Traced, every request of the M2M run carries a
// sampled trace context of its own, so a daemon that records spans records
// one per request, each in a trace of its own; without it, none.
func TestLoadTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	d := daemontest.Start(t, func(c *daemon.Config) { c.TracerProvider = tp })
	for _, traced := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		rep, err := RunLoad(ctx, LoadConfig{Target: d.URL("ws"), Traced: traced, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond,
			Connections: 1, Providers: 1, Concurrency: 4})
		cancel()
		if err != nil {
			t.Fatalf("traced %v: %v", traced, err)
		}
		traces := map[string]bool{}
		routed := 0
		for _, s := range rec.Ended() {
			if strings.HasPrefix(s.Name(), "route ") {
				routed++
				if !s.SpanContext().IsSampled() || !s.Parent().IsRemote() {
					t.Fatalf("span %q: sampled %v, remote parent %v", s.Name(), s.SpanContext().IsSampled(), s.Parent().IsRemote())
				}
				traces[s.SpanContext().TraceID().String()] = true
			}
		}
		switch {
		case !traced && routed != 0:
			t.Fatalf("untraced run: %d spans recorded", routed)
		case traced && (int64(routed) < rep.Result.RoundTrips || len(traces) != routed):
			t.Fatalf("traced run: %d round trips, %d spans in %d traces", rep.Result.RoundTrips, routed, len(traces))
		}
	}
}
