package integration

import (
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bench"
)

// BenchmarkRoutingLoad is `m2md bench load` against one in-process daemon
// (WebSocket, mode none, 1 KB, 32 in flight, 4 requester connections, 4
// providers, 2 s after 0.5 s of warmup): the routing path under load, for
// interleaved A/B runs of a change to it. It reports the rate and the
// process's CPU per round trip, which a shared machine disturbs less:
//
//	go test ./integration -run '^$' -bench RoutingLoad -benchtime 1x -count 6
func BenchmarkRoutingLoad(b *testing.B) {
	d := startDaemon(b, nil)
	cfg := bench.LoadConfig{Target: d.url("ws"), Security: frame.SecurityNone,
		Duration: 2 * time.Second, Warmup: 500 * time.Millisecond, Connections: 4, Providers: 4, Concurrency: 32}
	for range b.N {
		cpu0 := processCPU()
		rep := runLoadClean(b, cfg)
		b.ReportMetric(rep.RoundTripsPerSec, "rt/s")
		b.ReportMetric(float64(processCPU()-cpu0)/1e3/(rep.RoundTripsPerSec*(cfg.Duration+cfg.Warmup).Seconds()), "cpu-µs/rt")
	}
}
