package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bench"
)

// TestClusterBenchProviderTarget: m2md bench load with --provider-target
// puts the providers on another node, so every round trip crosses the
// cluster; every request comes back. With --compare single-node the same
// run also measures the providers on the requesters' node, and with both
// nodes' metrics it reports each node's CPU and the ratio per node.
func TestClusterBenchProviderTarget(t *testing.T) {
	certDir := t.TempDir()
	nodes := startCluster(t, 2, nil, func(c *daemon.Config) { c.CertDir = certDir })
	pin, err := certs.ClientTLSConfig(certs.ClientOptions{PinSHA256: nodes[0].Fingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	metrics := func(d *testDaemon) string { return "http://" + d.AdminAddr().String() + "/metrics" }
	for _, tc := range []struct {
		tr      string
		mode    frame.Security
		compare bool
	}{{"quic", frame.SecurityNone, false}, {"ws", frame.SecurityAEAD, true}} {
		t.Run(tc.tr+"-"+tc.mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cfg := bench.LoadConfig{
				Target: nodes[0].url(tc.tr), ProviderTarget: nodes[1].url(tc.tr), TLS: pin.Clone(),
				Security: tc.mode, Duration: 700 * time.Millisecond, Warmup: 200 * time.Millisecond,
				Connections: 2, Providers: 2, Concurrency: 8,
			}
			if tc.compare {
				cfg.Compare = bench.CompareSingleNode
				cfg.DaemonMetrics, cfg.ProviderDaemonMetrics = metrics(nodes[0]), metrics(nodes[1])
				cfg.Repeat = 2 // medians of the per-node figures too
			}
			rep, err := bench.RunLoad(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if rep.RoundTrips == 0 || rep.Errors != 0 {
				t.Fatalf("%d round trips, %d errors %v", rep.RoundTrips, rep.Errors, rep.ErrorsByReason)
			}
			if rep.Config.ProviderTarget != nodes[1].url(tc.tr) {
				t.Fatalf("report's provider target %q", rep.Config.ProviderTarget)
			}
			if !tc.compare {
				if rep.SingleNode != nil || rep.ProviderNode != nil {
					t.Fatalf("single-node run or provider node figures not asked for: %+v %+v", rep.SingleNode, rep.ProviderNode)
				}
				return
			}
			s := rep.SingleNode
			if s == nil || s.RoundTrips == 0 || s.Errors != 0 || rep.SingleNodeRatios == nil {
				t.Fatalf("single-node run %+v, ratios %+v", s, rep.SingleNodeRatios)
			}
			if r := rep.SingleNodeRatios.RoundTrips; r <= 0 {
				t.Fatalf("cross/single %v", r)
			}
			// Each node's own CPU, from its metrics: both work in the
			// cross-node run; the provider node has none in the single-node one.
			for name, p := range map[string]*bench.ProcessStats{"requesters' node": rep.Process, "providers' node": rep.ProviderNode, "single node": s.Process} {
				if p == nil || p.Source != "metrics" || p.CPUPerRoundTripUS <= 0 {
					t.Fatalf("%s: %+v", name, p)
				}
			}
			if s.ProviderNode != nil {
				t.Fatalf("single-node run has provider node figures %+v", s.ProviderNode)
			}
			if rep.NodeCPURatio <= 0 {
				t.Fatalf("node CPU ratio %v", rep.NodeCPURatio)
			}
			var table strings.Builder
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"M2M cross-node", "M2M single-node", "cross/single", "provider node CPU/rt", "with a machine per node"} {
				if !strings.Contains(table.String(), want) {
					t.Errorf("table lacks %q:\n%s", want, table.String())
				}
			}
		})
	}
}

// TestClusterLoadSpread: four providers of one model spread unevenly over
// three nodes (two on B, one on C, one on A itself), requesters on A and C
// routing by model. Each node picks the least outstanding among the
// providers it sees, so per-provider counts stay within 20% of even.
func TestClusterLoadSpread(t *testing.T) {
	certDir := t.TempDir()
	nodes := startCluster(t, 3, nil, func(c *daemon.Config) { c.CertDir = certDir })
	a, b, c := nodes[0], nodes[1], nodes[2]
	const model = "spread-model"
	body := []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"spread"}]}`)
	resp := corpus(t, "resp-chat-01.json")
	place := []*testDaemon{b, b, c, a}
	counts := make([]atomic.Int64, len(place))
	for i, d := range place {
		id := fmt.Sprintf("spread-%d", i)
		dialClient(t, d.url("ws"), client.Options{AgentID: id, Models: []string{model},
			Handler: client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
				counts[i].Add(1)
				time.Sleep(5 * time.Millisecond) // a provider with real service time
				_ = w.Respond(resp)
			})})
		for _, n := range nodes {
			waitAgentAt(t, n, "", id, d)
		}
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	const perWorker = 30
	for k, d := range []*testDaemon{a, c} {
		req := dialClient(t, d.url("quic"), client.Options{AgentID: fmt.Sprintf("spread-req-%d", k), PinSHA256: d.Fingerprint()})
		for range 8 {
			wg.Go(func() {
				for range perWorker {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					if _, err := req.Do(ctx, body); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
					cancel()
				}
			})
		}
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d requests failed; the first: %v", n, firstErr.Load())
	}
	total := int64(2 * 8 * perWorker)
	even := float64(total) / float64(len(place))
	var got []int64
	for i := range counts {
		got = append(got, counts[i].Load())
	}
	t.Logf("per-provider requests %v (even: %.0f)", got, even)
	for i, n := range got {
		if dev := math.Abs(float64(n)-even) / even; dev > 0.2 {
			t.Errorf("provider %d on its node took %d requests, %.0f%% from even", i, n, 100*dev)
		}
	}
}

// BenchmarkClusterCrossNode is the cross-node round trip against the
// single-node one, in one process (both daemons with their NATS servers and
// the generator share it): WebSocket, 1 KB, 32 in flight, 4 requester
// connections, 4 providers, 2 s per iteration. It reports the rate and the
// process's CPU per round trip, which a shared machine disturbs less than
// the rate; with -cpuprofile it shows where a crossing's time goes:
//
//	go test ./integration -run '^$' -bench ClusterCrossNode -benchtime 1x -count 5
func BenchmarkClusterCrossNode(b *testing.B) {
	nodes, pin := benchCluster(b)
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityAEAD} {
		for _, kind := range []string{"single", "cross"} {
			b.Run("ws-"+mode.String()+"/"+kind, func(b *testing.B) {
				cfg := bench.LoadConfig{Target: nodes[0].url("ws"), TLS: pin.Clone(), Security: mode,
					Duration: 2 * time.Second, Warmup: 500 * time.Millisecond, Connections: 4, Providers: 4, Concurrency: 32}
				if kind == "cross" {
					cfg.ProviderTarget = nodes[1].url("ws")
				}
				for range b.N {
					cpu0 := processCPU()
					rep := runLoadClean(b, cfg)
					b.ReportMetric(rep.RoundTripsPerSec, "rt/s")
					// Warmup and measured trips alike use CPU: per second
					// of the run, not per counted trip.
					b.ReportMetric(float64(processCPU()-cpu0)/1e3/(rep.RoundTripsPerSec*(cfg.Duration+cfg.Warmup).Seconds()), "cpu-µs/rt")
				}
			})
		}
	}
}

// BenchmarkClusterInboxSizes is cross-node load with 1 KB and 16 KB payloads
// at 32 and 256 in flight, at the default --cluster-inbox and
// --cluster-inbox-bytes (WebSocket, none, 4 requester connections, 4
// providers, 4 s after 1 s of warmup). Every request must come back: a
// healthy node keeps its inbox near empty, so neither bound sheds
// anything; it reports the rate and what the nodes shed or dropped (0):
//
//	go test ./integration -run '^$' -bench ClusterInboxSizes -benchtime 1x -count 3
func BenchmarkClusterInboxSizes(b *testing.B) {
	nodes, pin := benchCluster(b)
	lost := func() float64 {
		n := 0.0
		for _, d := range nodes {
			n += metric(b, d, "m2md_cluster_dropped_total", "reason=inbox_full") + metric(b, d, "m2md_cluster_dropped_total", "reason=slow_consumer")
		}
		return n
	}
	for _, size := range []string{bench.Size1KB, bench.Size16KB} {
		p, err := bench.BuiltinPayload(size)
		if err != nil {
			b.Fatal(err)
		}
		for _, inFlight := range []int{32, 256} {
			b.Run(fmt.Sprintf("%s/%d", size, inFlight), func(b *testing.B) {
				cfg := bench.LoadConfig{Target: nodes[0].url("ws"), ProviderTarget: nodes[1].url("ws"), TLS: pin.Clone(), Security: frame.SecurityNone,
					Duration: 4 * time.Second, Warmup: time.Second, Connections: 4, Providers: 4, Concurrency: inFlight, Payloads: []bench.Payload{p}}
				for range b.N {
					lost0 := lost()
					rep := runLoadClean(b, cfg)
					b.ReportMetric(rep.RoundTripsPerSec, "rt/s")
					b.ReportMetric(rep.RoundTripsPerSec*float64(len(p.JSON))/(1<<20), "MiB/s")
					b.ReportMetric(lost()-lost0, "shed+dropped")
				}
			})
		}
	}
}

// benchCluster starts two clustered daemons with one certificate, and a
// TLS configuration that pins it.
func benchCluster(b *testing.B) ([]*testDaemon, *tls.Config) {
	certDir := b.TempDir()
	nodes := startCluster(b, 2, nil, func(c *daemon.Config) { c.CertDir = certDir })
	pin, err := certs.ClientTLSConfig(certs.ClientOptions{PinSHA256: nodes[0].Fingerprint()})
	if err != nil {
		b.Fatal(err)
	}
	return nodes, pin
}

// runLoadClean runs cfg's load, which must end without an error.
func runLoadClean(b *testing.B, cfg bench.LoadConfig) *bench.LoadReport {
	rep, err := bench.RunLoad(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if rep.Errors != 0 {
		b.Fatalf("%d errors %v", rep.Errors, rep.ErrorsByReason)
	}
	return rep
}
