package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/transport"
)

// BenchmarkIdleQUICAgents measures what idle QUIC agents cost an `m2md
// serve` process: the CPU it spends in 20 s while 1,000 Go clients
// (M2MD_IDLE_AGENTS) hold sessions and send nothing but their keep-alives
// and reset probes (Options.Transport.KeepAlive, client.DefaultQUICKeepAlive),
// as a share of one core; the sub-benchmarks compare the default probe
// with one every 6 s. Figures in docs/operations.md, "Failure behaviour".
//
//	go test -run '^$' -bench BenchmarkIdleQUICAgents -benchtime 1x ./cmd/m2md
func BenchmarkIdleQUICAgents(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("M2MD_IDLE_AGENTS")); err == nil && v > 0 {
		n = v
	}
	for _, ka := range []time.Duration{client.DefaultQUICKeepAlive, 6 * time.Second} {
		b.Run("probe="+ka.String(), func(b *testing.B) {
			for range b.N {
				b.ReportMetric(idleCost(b, n, ka), "%core")
			}
		})
	}
}

// idleCost is the serve process's CPU, in percent of a core, over 20 s
// with n idle QUIC agents probing every ka.
func idleCost(b *testing.B, n int, ka time.Duration) float64 {
	quic := freePort(b, "udp")
	srv := startM2MD(b, b.TempDir(), "serve", "--quic-addr", quic, "--ws-addr", "-", "--admin-addr", "-",
		"--openai-addr", "-", "--log-format", "json", "--cert-dir", b.TempDir())
	srv.waitOutput(`"quic":"quic://`, 60*time.Second)
	cs := make([]*client.Client, n)
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := client.Dial(ctx, "quic://"+quic, client.Options{AgentID: fmt.Sprintf("idle-%d", i),
				InsecureSkipVerifyDevOnly: true, Models: []string{"gpt-4o"}, Transport: transport.Config{KeepAlive: ka}})
			if err != nil {
				b.Error(err)
				return
			}
			cs[i] = c
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	time.Sleep(3 * time.Second) // the handshakes' aftermath
	const window = 20 * time.Second
	before := cpuTicks(b, srv.cmd.Process.Pid)
	time.Sleep(window)
	used := cpuTicks(b, srv.cmd.Process.Pid) - before
	return float64(used) / (window.Seconds() * 100) * 100 // ticks are 1/100 s
}

// cpuTicks is the user and system CPU of process pid so far, in clock
// ticks (1/100 s on Linux).
func cpuTicks(b *testing.B, pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.Atoi(f[11])
	sys, _ := strconv.Atoi(f[12])
	return u + sys
}
