package bench

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestNATSRunLeavesNothing: the NATS comparison's server, providers and
// requesters are gone when its run ends, and every request came back.
func TestNATSRunLeavesNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, tr := range []string{TransportWS, TransportQUIC} { // plain TCP, then TLS
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		rep, err := RunLoad(ctx, LoadConfig{Transport: tr, Compare: CompareNATS, Duration: 500 * time.Millisecond,
			Warmup: 100 * time.Millisecond, Connections: 2, Providers: 2, Concurrency: 8})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		n := rep.NATS
		if n == nil || n.RoundTrips == 0 || n.Errors != 0 || len(n.ProviderErrors) != 0 {
			t.Fatalf("%s: NATS run %+v", tr, n)
		}
		if want := natsName(tr); !strings.HasPrefix(n.Target, "in-process ") || (want == "NATS (TLS)") != strings.HasPrefix(n.Target, "in-process tls://") {
			t.Fatalf("%s: NATS target %q", tr, n.Target)
		}
	}
	// quic-go and nats-server wind down a moment after their Close returns.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines left after the runs:\n%s", n-before, buf[:runtime.Stack(buf, true)])
	}
}
