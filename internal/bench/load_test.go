package bench

import (
	"context"
	"errors"
	"github.com/m2md/m2md/internal/configerr"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
)

// TestLoadEndToEnd runs the real thing briefly: an in-process daemon, echo
// providers and requesters, with the bare relay and the echo target, over
// each transport and in each load shape. It checks that every request came
// back intact and that the report has the documented fields; it never
// asserts a speed.
func TestLoadEndToEnd(t *testing.T) {
	mixed := corpusPayloads(t, "req-chat-1k-03.json", "resp-chat-06.json", "stream-chunk-07.json", "req-embeddings-01.json")
	for _, tc := range []struct {
		name string
		cfg  LoadConfig
	}{
		{"quic-none-closed", LoadConfig{Transport: TransportQUIC, Baseline: true, Echo: true, Compare: CompareNATS}},
		{"ws-aead-closed-repeated", LoadConfig{Transport: TransportWS, Security: frame.SecurityAEAD, Baseline: true, Compare: CompareNATS, Repeat: 2}},
		// Responses and chunks have no routing model: they are addressed to
		// providers by agent id.
		// At most 64 in flight: a machine busy with other work may stall the
		// run, and the backlog must then stay under the daemon's limit of
		// requests outstanding per session.
		{"wss-hmac-open-corpus", LoadConfig{Transport: TransportWSS, Security: frame.SecurityHMAC, Rate: 1000, MaxInFlight: 64, Payloads: mixed, ServiceTime: time.Millisecond, Compare: CompareNATS}},
		{"quic-tokennative", LoadConfig{Transport: TransportQUIC, Algorithm: AlgorithmTokenNative, Payloads: mixed[:2]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg := tc.cfg
			cfg.Duration, cfg.Warmup = 700*time.Millisecond, 200*time.Millisecond
			cfg.Connections, cfg.Providers, cfg.Concurrency = 2, 2, 8
			rep, err := RunLoad(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			runs := []*Result{&rep.Result}
			if cfg.Baseline {
				runs = append(runs, rep.Baseline)
			}
			if cfg.Echo {
				runs = append(runs, rep.Echo)
			}
			if cfg.Compare == CompareNATS {
				runs = append(runs, rep.NATS)
				if rep.NATSRatios == nil || rep.NATSRatios.RoundTrips <= 0 {
					t.Errorf("NATS ratios %+v", rep.NATSRatios)
				}
				if cfg.Baseline && rep.RelayNATSRatios == nil {
					t.Error("no relay/NATS ratios")
				}
			}
			for _, res := range runs {
				if res == nil {
					t.Fatal("a run is missing from the report")
				}
				if res.Errors != 0 || res.WarmupErrors != 0 || len(res.ProviderErrors) != 0 {
					t.Errorf("%s: errors %v (warm-up %d), provider errors %v", res.Run, res.ErrorsByReason, res.WarmupErrors, res.ProviderErrors)
				}
				if res.RoundTrips == 0 || res.Count != res.RoundTrips {
					t.Errorf("%s: %d round trips, %d latencies", res.Run, res.RoundTrips, res.Count)
				}
				if res.Process == nil || res.Process.Allocs == 0 || res.Process.Source != "process" {
					t.Errorf("%s: process figures %+v", res.Run, res.Process)
				}
				if len(res.Timeline) == 0 {
					t.Errorf("%s: no timeline", res.Run)
				}
				// Only an open loop has a schedule to be late against.
				if open := cfg.Rate > 0; open != (res.SendLagP99US > 0) {
					t.Errorf("%s: sent late p99 %g µs in an open loop: %v", res.Run, res.SendLagP99US, open)
				}
			}
			if cfg.Baseline && (rep.Ratios == nil || rep.Ratios.RoundTrips <= 0) {
				t.Errorf("ratios %+v", rep.Ratios)
			}
			if cfg.Repeat > 1 {
				// Every repetition carries the runs compared with it.
				if len(rep.Repetitions) != cfg.Repeat {
					t.Fatalf("%d repetitions reported, want %d", len(rep.Repetitions), cfg.Repeat)
				}
				for i, rp := range rep.Repetitions {
					if rp.Baseline == nil || rp.RoundTripsRatio <= 0 || rp.NATS == nil || rp.NATSRoundTripsRatio <= 0 || rp.NATSP99Ratio <= 0 {
						t.Errorf("repetition %d: %+v", i+1, rp)
					}
				}
			}
			var m map[string]any
			decodeReport(t, rep, &m)
			for _, f := range []string{"round_trips_per_sec", "mean_us", "p50_us", "p99_us", "p999_us", "over_1ms_pct", "over_4ms_pct", "errors"} {
				if _, ok := m[f].(float64); !ok {
					t.Errorf("report has no number %q", f)
				}
			}
			var table strings.Builder
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			t.Log(table.String())
			if cfg.Rate > 0 && !strings.Contains(table.String(), "sent late p50/p99") {
				t.Error("the open loop's table does not say how late the generator sent")
			}
			if err := rep.PlotLoad(filepath.Join(t.TempDir(), "load.png")); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestLoadConfigCompare: the comparisons' settings are refused when what
// they compare is missing, with a configerr.Error naming the field at
// fault (m2md bench load shows it as its flag).
func TestLoadConfigCompare(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         LoadConfig
		field, want string // "" when valid
	}{
		{"single-node without provider target", LoadConfig{Target: "ws://127.0.0.1:1/m2m", Compare: CompareSingleNode}, "Compare", "set bench.LoadConfig.ProviderTarget"},
		{"provider metrics without provider target", LoadConfig{Target: "ws://127.0.0.1:1/m2m", ProviderDaemonMetrics: "http://127.0.0.1:2/metrics"}, "ProviderDaemonMetrics", "set bench.LoadConfig.ProviderTarget"},
		{"unknown comparison", LoadConfig{Compare: "redis"}, "Compare", "bench.LoadConfig.Compare must be nats or single-node"},
		{"nats url without the comparison", LoadConfig{NATSURL: "nats://127.0.0.1:4222"}, "NATSURL", "for bench.LoadConfig.Compare nats"},
		{"provider target without target", LoadConfig{ProviderTarget: "ws://127.0.0.1:2/m2m"}, "ProviderTarget", "needs bench.LoadConfig.Target"},
		{"nats url of another scheme", LoadConfig{Compare: CompareNATS, NATSURL: "ws://127.0.0.1:4222"}, "", "not a nats:// or tls:// URL"},
		{"nats url without a host", LoadConfig{Compare: CompareNATS, NATSURL: "nats://"}, "", "not a nats:// or tls:// URL"},
		{"both servers of their own", LoadConfig{Target: "ws://127.0.0.1:1/m2m", Compare: CompareNATS, NATSURL: "tls://127.0.0.1:4222"}, "", ""},
		{"cross-node with single-node", LoadConfig{Target: "ws://127.0.0.1:1/m2m", ProviderTarget: "ws://127.0.0.1:2/m2m", Compare: CompareSingleNode,
			DaemonMetrics: "http://127.0.0.1:3/metrics", ProviderDaemonMetrics: "http://127.0.0.1:4/metrics"}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.withDefaults()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
			var ce *configerr.Error
			if tc.field != "" && (!errors.As(err, &ce) || ce.Field != "bench.LoadConfig."+tc.field) {
				t.Fatalf("error %v names field %v, want bench.LoadConfig.%s", err, ce, tc.field)
			}
		})
	}
}
