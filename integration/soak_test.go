//go:build soak && unix

// Soak mode: the daemon holding many idle sessions for a long time under
// light traffic. It is not part of the regular suite; run it with
//
//	go test -tags soak -run 'TestSoak$' -timeout 30m ./integration/ \
//	    -soak.duration=10m -soak.ws=10000 -soak.quic=1000 -v
//
// TestSoak starts one daemon in this process, with every per-address and
// per-session limit off, and runs the clients in a second process (this
// test binary again, running TestSoakClients), so that the memory and the
// goroutines counted here are the daemon's alone. The clients open the idle
// WebSocket sessions, then the idle QUIC sessions, and the daemon's memory
// is measured after each step (live heap and goroutine stacks after a full
// GC, goroutines, RSS) and attributed per session. Then a few providers and
// requesters send -soak.rate requests per second through the daemon for
// -soak.duration while the daemon is sampled every -soak.sample. At the end
// the test requires: every request answered with exactly the bytes the
// provider sent, no idle session lost, every refused/dropped/failure counter
// of /metrics at zero, goroutines and heap of the last third of the samples
// within 10% of the first third; after the clients leave, the daemon's
// goroutines back where they started. -soak.profile=DIR writes heap and
// goroutine profiles of the daemon process with all sessions open.
// Results go to docs/benchmarks.md, section "Soak".
package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
)

var (
	soakDuration = flag.Duration("soak.duration", 10*time.Minute, "soak: how long the traffic runs with every session open")
	soakWS       = flag.Int("soak.ws", 10_000, "soak: idle WebSocket sessions")
	soakQUIC     = flag.Int("soak.quic", 1_000, "soak: idle QUIC sessions")
	soakRate     = flag.Float64("soak.rate", 50, "soak: requests per second through the daemon, in total")
	soakSample   = flag.Duration("soak.sample", 10*time.Second, "soak: sampling interval")
	soakSecurity = flag.String("soak.security", "aead", "soak: frame security of the idle sessions (none, hmac, aead)")
	soakProfile  = flag.String("soak.profile", "", "soak: directory for heap and goroutine profiles of the daemon process")
)

// soakChildEnv carries the parameters to the client process.
const soakChildEnv = "M2MD_SOAK_CHILD"

type soakParams struct {
	WSURL, QUICURL, Pin string
	WS, QUIC            int
	Rate                float64
	Security            string
	Progress            time.Duration
}

// soakMem is one measurement of the daemon process.
type soakMem struct {
	At         time.Duration
	HeapAlloc  uint64 // live heap after GC
	HeapInuse  uint64
	StackInuse uint64
	Goroutines int
	RSS        uint64
	CPU        time.Duration // the process's user+system CPU time so far
	Sessions   int
	Errors     float64 // sum of the failure counters of /metrics
	OK, Failed int64   // requests so far, as the clients report them
}

func (m soakMem) inuse() uint64 { return m.HeapInuse + m.StackInuse }

func measureSoak() soakMem {
	debug.FreeOSMemory() // a full GC, twice over for the pools
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return soakMem{
		HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse, StackInuse: ms.StackInuse,
		Goroutines: runtime.NumGoroutine(), RSS: vmRSS(), CPU: cpuTime(),
	}
}

// cpuTime reads the process's user and system CPU time (Linux; 0
// elsewhere).
func cpuTime() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may contain spaces).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// vmRSS reads the process's resident set (Linux; 0 elsewhere).
func vmRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// raiseFileLimit lifts RLIMIT_NOFILE to its hard limit and fails if that
// is below need.
func raiseFileLimit(t testing.TB, need uint64) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatalf("raise RLIMIT_NOFILE to %d: %v", rl.Max, err)
		}
	}
	if rl.Cur < need {
		t.Fatalf("RLIMIT_NOFILE is %d, the soak needs %d (raise the hard limit: ulimit -Hn)", rl.Cur, need)
	}
}

// soakFailureMetrics are the /metrics series that must stay at zero in a
// soak: nothing refused, dropped, limited or failed, no session closed.
var soakFailureMetrics = []string{
	"m2md_frames_refused_total", "m2md_queue_drops_total", "m2md_routing_failures_total",
	"m2md_limited_total", "m2md_handshake_failures_total",
	"m2md_sessions_closed_total",
}

// soakErrors sums the failure counters and lists their non-zero series.
func soakErrors(t testing.TB, d *testDaemon) (float64, []string) {
	t.Helper()
	_, body := adminGet(t, d, "/metrics")
	var (
		sum     float64
		nonzero []string
	)
	for line := range strings.SplitSeq(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		name, _, _ := strings.Cut(line[:sp], "{")
		if !slices.Contains(soakFailureMetrics, name) {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil || v == 0 {
			continue
		}
		sum += v
		nonzero = append(nonzero, line)
	}
	return sum, nonzero
}

func TestSoak(t *testing.T) {
	if os.Getenv(soakChildEnv) != "" {
		t.Skip("client process")
	}
	if *soakProfile != "" {
		// Record every allocation, so the profile attributes even small
		// per-session objects exactly (this slows allocation down; the
		// figures above the profile are still right).
		runtime.MemProfileRate = 1
	}
	nWS, nQUIC := *soakWS, *soakQUIC
	raiseFileLimit(t, uint64(nWS+nQUIC)+256)
	d := startDaemon(t, func(c *daemon.Config) {
		// Every other limit at its default: one address (loopback) opening
		// every session at once must not trip them.
		c.MaxSessions = nWS + nQUIC + 1000
	})
	load1 := loadAvg()
	base := measureSoak()
	t.Logf("baseline: %s; load average %s", fmtMem(base), load1)

	params := soakParams{
		WSURL: d.url("ws"), QUICURL: d.url("quic"), Pin: d.Fingerprint(),
		WS: nWS, QUIC: nQUIC, Rate: *soakRate, Security: *soakSecurity, Progress: *soakSample,
	}
	ch := startSoakChild(t, params)

	start := time.Now()
	var clientWS [2]soakMem
	ch.expectInto(t, "ws-open", 20*time.Minute, &clientWS)
	waitSessionCount(t, d, nWS, time.Minute)
	afterWS := measureSoak()
	t.Logf("%d idle WebSocket sessions opened in %v: %s", nWS, time.Since(start).Round(time.Millisecond), fmtMem(afterWS))

	start = time.Now()
	ch.send(t, "next")
	var clientQUIC soakMem
	ch.expectInto(t, "quic-open", 20*time.Minute, &clientQUIC)
	waitSessionCount(t, d, nWS+nQUIC, time.Minute)
	afterQUIC := measureSoak()
	t.Logf("%d idle QUIC sessions opened in %v: %s", nQUIC, time.Since(start).Round(time.Millisecond), fmtMem(afterQUIC))
	if dir := *soakProfile; dir != "" {
		writeProfiles(t, dir)
	}

	per := func(a, b soakMem, n int) string {
		if n == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.1f KiB (heap %.1f KiB + stacks %.1f KiB), %.2f goroutines, RSS %.1f KiB",
			kib(int64(a.inuse())-int64(b.inuse()))/float64(n),
			kib(int64(a.HeapInuse)-int64(b.HeapInuse))/float64(n),
			kib(int64(a.StackInuse)-int64(b.StackInuse))/float64(n),
			float64(a.Goroutines-b.Goroutines)/float64(n),
			kib(int64(a.RSS)-int64(b.RSS))/float64(n))
	}
	t.Logf("per idle WebSocket session: %s", per(afterWS, base, nWS))
	t.Logf("per idle QUIC session: %s", per(afterQUIC, afterWS, nQUIC))
	t.Logf("client process (package client), per idle WebSocket session: %s", per(clientWS[1], clientWS[0], nWS))
	t.Logf("client process (package client), per idle QUIC session: %s", per(clientQUIC, clientWS[1], nQUIC))

	// Traffic, sampled.
	ch.send(t, "next")
	ch.expect(t, "traffic-started", time.Minute)
	idle := nWS + nQUIC
	var samples []soakMem
	t0 := time.Now()
	tick := time.NewTicker(*soakSample)
	for time.Since(t0) < *soakDuration {
		<-tick.C
		mstart := time.Now()
		m := measureSoak()
		if el := time.Since(mstart); el > 2*time.Second {
			t.Logf("measuring took %v (GC of the daemon's heap on a busy machine)", el.Round(time.Millisecond))
		}
		m.At = time.Since(t0).Round(time.Second)
		m.Sessions = healthSessions(t, d)
		var nonzero []string
		m.Errors, nonzero = soakErrors(t, d)
		p := ch.lastProgress()
		m.OK, m.Failed = p.OK, p.Failed
		if n := len(samples); (n == 0 && m.Errors > 0) || (n > 0 && m.Errors != samples[n-1].Errors) {
			t.Logf("failure counters: %s", strings.Join(nonzero, ", "))
		}
		samples = append(samples, m)
		cpu := "?"
		if n := len(samples); n > 1 {
			prev := samples[n-2]
			cpu = fmt.Sprintf("%.0f%%", 100*float64(m.CPU-prev.CPU)/float64(m.At-prev.At))
		}
		t.Logf("t=%4v %s cpu=%s sessions=%d errors=%v requests ok=%d failed=%d load %s",
			m.At, fmtMem(m), cpu, m.Sessions, m.Errors, m.OK, m.Failed, loadAvg())
	}
	tick.Stop()
	ch.send(t, "stop")
	var res soakResult
	ch.expectInto(t, "traffic-done", 2*time.Minute, &res)
	load2 := loadAvg()
	errSum, each := soakErrors(t, d)
	sessions := healthSessions(t, d)

	t.Logf("traffic: %d requests ok, %d failed, latency p50 %v p99 %v max %v; idle sessions lost %d; load average %s",
		res.OK, res.Failed, res.P50, res.P99, res.Max, res.IdleLost, load2)
	if res.Failed > 0 || res.OK == 0 {
		t.Errorf("requests: %d ok, %d failed; first failures: %s", res.OK, res.Failed, strings.Join(res.FirstErrors, "; "))
	}
	if res.IdleLost > 0 {
		t.Errorf("%d idle sessions ended during the soak: %s", res.IdleLost, strings.Join(res.FirstErrors, "; "))
	}
	if errSum != 0 {
		t.Errorf("failure counters are not zero: %s", strings.Join(each, ", "))
	}
	if want := idle + res.TrafficClients; sessions != want {
		t.Errorf("daemon has %d sessions, want %d", sessions, want)
	}
	checkSoakGrowth(t, samples)

	// Everyone leaves; the daemon must let go of all of it.
	ch.send(t, "close")
	ch.expect(t, "closed", 10*time.Minute)
	waitSessionCount(t, d, 0, 2*time.Minute)
	var after soakMem
	deadline := time.Now().Add(30 * time.Second)
	for {
		after = measureSoak()
		if after.Goroutines <= base.Goroutines+5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("after every client left: %s (baseline %s)", fmtMem(after), fmtMem(base))
	if dir := *soakProfile; dir != "" {
		writeProfile(t, dir, "heap", "heap-after")
	}
	if after.Goroutines > base.Goroutines+5 {
		t.Errorf("%d goroutines after every session ended, %d before any", after.Goroutines, base.Goroutines)
	}
	// Nothing of a session may stay. Two things do stay that are not
	// sessions: the runtime keeps the descriptor of every goroutine it ever
	// ran, for reuse (runtime.malg in the heap profile, 485 B each
	// measured), and Go maps keep the size they had at the peak (the
	// session set, the router's tables, the base context's children,
	// quic-go's connection-ID table: under 200 B a session). Beyond those,
	// the live heap must be back within 2x of what it was before the
	// sessions came. A departed QUIC session that stayed (as they did while
	// a rearmed keepalive timer held them) costs over 30 KiB.
	kept := uint64(afterQUIC.Goroutines)*512 + uint64(nWS+nQUIC)*200
	t.Logf("live heap after leaving: %.1f MiB, of which up to %.1f MiB goroutine descriptors and maps at their peak size; before: %.1f MiB",
		mib(after.HeapAlloc), mib(kept), mib(base.HeapAlloc))
	if after.HeapAlloc > 2*base.HeapAlloc+kept {
		t.Errorf("live heap after every session left: %.1f MiB, want at most 2 x %.1f MiB + %.1f MiB",
			mib(after.HeapAlloc), mib(base.HeapAlloc), mib(kept))
	}
	ch.wait(t)
}

// checkSoakGrowth compares the mean of the last third of the samples with
// the first third: goroutines and live heap may not grow by more than 10%.
func checkSoakGrowth(t *testing.T, s []soakMem) {
	t.Helper()
	if len(s) < 3 {
		t.Logf("only %d samples: growth not judged", len(s))
		return
	}
	third := len(s) / 3
	mean := func(part []soakMem, f func(soakMem) float64) float64 {
		var sum float64
		for _, m := range part {
			sum += f(m)
		}
		return sum / float64(len(part))
	}
	for _, c := range []struct {
		name string
		f    func(soakMem) float64
	}{
		{"goroutines", func(m soakMem) float64 { return float64(m.Goroutines) }},
		{"heap in use", func(m soakMem) float64 { return float64(m.HeapInuse) }},
		{"live heap", func(m soakMem) float64 { return float64(m.HeapAlloc) }},
		{"stacks", func(m soakMem) float64 { return float64(m.StackInuse) }},
	} {
		first, last := mean(s[:third], c.f), mean(s[len(s)-third:], c.f)
		growth := (last - first) / first
		t.Logf("%s: first third %.0f, last third %.0f (%+.2f%%)", c.name, first, last, 100*growth)
		if growth > 0.10 {
			t.Errorf("%s grew %.1f%% from the first third of the soak to the last", c.name, 100*growth)
		}
	}
}

func writeProfiles(t *testing.T, dir string) {
	t.Helper()
	writeProfile(t, dir, "heap", "heap")
	writeProfile(t, dir, "goroutine", "goroutine")
}

// writeProfile writes the runtime profile name to dir/file.pprof.
func writeProfile(t *testing.T, dir, name, file string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	path := filepath.Join(dir, file+".pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s profile written to %s", name, path)
}

func kib(b int64) float64 { return float64(b) / 1024 }

func fmtMem(m soakMem) string {
	return fmt.Sprintf("goroutines %d, heap in use %.1f MiB (live %.1f MiB), stacks %.1f MiB, RSS %.1f MiB",
		m.Goroutines, kib(int64(m.HeapInuse))/1024, kib(int64(m.HeapAlloc))/1024, kib(int64(m.StackInuse))/1024, kib(int64(m.RSS))/1024)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// soakChild is the client process and its line protocol: it prints
// "SOAK <event> <json>" lines on stdout, and waits for a command line on
// stdin between phases.
type soakChild struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	events   chan [2]string
	progress atomic.Pointer[soakProgress]
}

type soakProgress struct{ OK, Failed int64 }

type soakResult struct {
	OK, Failed     int64
	P50, P99, Max  time.Duration
	IdleLost       int
	TrafficClients int
	FirstErrors    []string
}

func startSoakChild(t *testing.T, p soakParams) *soakChild {
	t.Helper()
	env, _ := json.Marshal(p)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSoakClients$", "-test.v", "-test.timeout=0")
	cmd.Env = append(os.Environ(), soakChildEnv+"="+string(env))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &soakChild{cmd: cmd, events: make(chan [2]string, 16)}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.stdin.Close()
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	go func() {
		defer close(c.events)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			rest, ok := strings.CutPrefix(line, "SOAK ")
			if !ok {
				if testing.Verbose() && strings.TrimSpace(line) != "" {
					fmt.Fprintln(os.Stderr, "  client process:", line)
				}
				continue
			}
			ev, data, _ := strings.Cut(rest, " ")
			if ev == "failure" {
				fmt.Fprintln(os.Stderr, "  client process reports a failure:", data)
				continue
			}
			if ev == "progress" {
				var p soakProgress
				if json.Unmarshal([]byte(data), &p) == nil {
					c.progress.Store(&p)
				}
				continue
			}
			c.events <- [2]string{ev, data}
		}
	}()
	return c
}

func (c *soakChild) lastProgress() soakProgress {
	if p := c.progress.Load(); p != nil {
		return *p
	}
	return soakProgress{}
}

func (c *soakChild) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		t.Fatalf("client process: %v", err)
	}
}

// expect waits for the client process's next event, which must be event,
// and returns its data.
func (c *soakChild) expect(t *testing.T, event string, timeout time.Duration) string {
	t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			t.Fatalf("client process ended while waiting for %s", event)
		}
		if ev[0] == "fatal" {
			t.Fatalf("client process failed: %s", ev[1])
		}
		if ev[0] != event {
			t.Fatalf("client process said %s %s, want %s", ev[0], ev[1], event)
		}
		return ev[1]
	case <-time.After(timeout):
		t.Fatalf("client process: no %s within %v", event, timeout)
		return ""
	}
}

func (c *soakChild) expectInto(t *testing.T, event string, timeout time.Duration, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(c.expect(t, event, timeout)), v); err != nil {
		t.Fatalf("client process %s: %v", event, err)
	}
}

func (c *soakChild) wait(t *testing.T) {
	t.Helper()
	c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("client process: %v", err)
		}
	case <-time.After(time.Minute):
		t.Error("client process did not exit")
	}
}

// TestSoakClients is the client process of TestSoak; on its own it skips.
func TestSoakClients(t *testing.T) {
	raw := os.Getenv(soakChildEnv)
	if raw == "" {
		t.Skip("run by TestSoak")
	}
	var p soakParams
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	report := func(event string, v any) {
		b, _ := json.Marshal(v)
		outMu.Lock()
		fmt.Fprintf(out, "SOAK %s %s\n", event, b)
		out.Flush()
		outMu.Unlock()
	}
	fatal := func(format string, args ...any) {
		report("fatal", fmt.Sprintf(format, args...))
		t.Fatalf(format, args...)
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	in := bufio.NewScanner(os.Stdin)
	next := func() string {
		if !in.Scan() {
			fatal("parent process gone")
		}
		return in.Text()
	}
	idleMode, err := parseSecurity(p.Security)
	if err != nil {
		fatal("%v", err)
	}

	var idle []*client.Client
	open := func(url, prefix string, n, parallel int) {
		got, err := dialMany(url, n, parallel, func(i int) client.Options {
			return client.Options{AgentID: fmt.Sprintf("%s-%05d", prefix, i), PinSHA256: p.Pin, Security: idleMode}
		})
		idle = append(idle, got...)
		if err != nil {
			fatal("opening %d idle sessions on %s: %d opened, then %v", n, url, len(got), err)
		}
	}
	clientBase := measureSoak()

	open(p.WSURL, "idle-ws", p.WS, 64)
	report("ws-open", [2]soakMem{clientBase, measureSoak()})
	next()
	open(p.QUICURL, "idle-quic", p.QUIC, 16)
	report("quic-open", measureSoak())
	next()

	tr, err := startSoakTraffic(t, p, func(msg string) { report("failure", msg) })
	if err != nil {
		fatal("traffic: %v", err)
	}
	report("traffic-started", map[string]int{"clients": len(tr.clients)})
	stopProgress := make(chan struct{})
	go func() {
		tk := time.NewTicker(p.Progress / 2)
		defer tk.Stop()
		lost := map[*client.Client]bool{}
		for {
			select {
			case <-tk.C:
				report("progress", soakProgress{OK: tr.ok.Load(), Failed: tr.failed.Load()})
				for _, c := range idle {
					if err := c.Err(); err != nil && !lost[c] {
						lost[c] = true
						if len(lost) <= 10 {
							report("failure", fmt.Sprintf("idle session %s ended: %v", c.AgentID(), err))
						}
					}
				}
			case <-stopProgress:
				return
			}
		}
	}()
	if cmd := next(); cmd != "stop" {
		fatal("got %q, want stop", cmd)
	}
	close(stopProgress)
	res := tr.stop()
	for _, c := range idle {
		if err := c.Err(); err != nil {
			res.IdleLost++
			if len(res.FirstErrors) < 10 {
				res.FirstErrors = append(res.FirstErrors, c.AgentID()+": "+err.Error())
			}
		}
	}
	report("traffic-done", res)
	next()
	closeMany(append(idle, tr.clients...), 64)
	report("closed", nil)
}

func parseSecurity(s string) (frame.Security, error) {
	for _, m := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown security mode %q", s)
}

// dialMany opens n clients, parallel at a time; it stops at the first
// failure and returns what it opened.
func dialMany(url string, n, parallel int, opts func(i int) client.Options) ([]*client.Client, error) {
	out := make([]*client.Client, n)
	var (
		next     atomic.Int64
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for firstErr.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				c, err := client.Dial(ctx, url, opts(i))
				cancel()
				if err != nil {
					err = fmt.Errorf("session %d: %w", i, err)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				out[i] = c
			}
		}()
	}
	wg.Wait()
	out = slices.DeleteFunc(out, func(c *client.Client) bool { return c == nil })
	if p := firstErr.Load(); p != nil {
		return out, *p
	}
	return out, nil
}

func closeMany(cs []*client.Client, parallel int) {
	work := make(chan *client.Client)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				_ = c.Close()
			}
		}()
	}
	for _, c := range cs {
		work <- c
	}
	close(work)
	wg.Wait()
}

// soakTraffic is the light load of the soak: two providers and two
// requesters per transport, in mixed security modes, requests spread
// evenly over time, every answer checked byte for byte.
type soakTraffic struct {
	x        *exchangeSet
	onFail   func(string) // the first failures are reported as they happen
	clients  []*client.Client
	reqs     []*client.Client
	stopping chan struct{}
	wg       sync.WaitGroup

	ok, failed atomic.Int64
	mu         sync.Mutex
	latencies  []time.Duration
	firstErrs  []string
}

func startSoakTraffic(t testing.TB, p soakParams, onFail func(string)) (*soakTraffic, error) {
	tr := &soakTraffic{x: loadExchangeSet(t), onFail: onFail, stopping: make(chan struct{})}
	modes := []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD}
	k := 0
	for _, url := range []string{p.WSURL, p.QUICURL} {
		for i := range 2 {
			mode := modes[k%len(modes)]
			k++
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c, err := client.Dial(ctx, url, client.Options{
				AgentID: fmt.Sprintf("soak-prov-%d", k), PinSHA256: p.Pin, Security: mode,
				Models: tr.x.models,
				Handler: tr.x.handler(func(int) time.Duration {
					return time.Duration(rand.IntN(20)) * time.Millisecond
				}, nil),
			})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("provider %d: %w", i, err)
			}
			tr.clients = append(tr.clients, c)
		}
	}
	for _, url := range []string{p.WSURL, p.QUICURL} {
		for i := range 2 {
			mode := modes[k%len(modes)]
			k++
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c, err := client.Dial(ctx, url, client.Options{AgentID: fmt.Sprintf("soak-req-%d", k), PinSHA256: p.Pin, Security: mode})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("requester %d: %w", i, err)
			}
			tr.clients = append(tr.clients, c)
			tr.reqs = append(tr.reqs, c)
		}
	}
	every := time.Duration(float64(time.Second) * float64(len(tr.reqs)) / p.Rate)
	for n, c := range tr.reqs {
		tr.wg.Add(1)
		go tr.requester(c, every, n)
	}
	return tr, nil
}

func (tr *soakTraffic) requester(c *client.Client, every time.Duration, n int) {
	defer tr.wg.Done()
	// Stagger the requesters over one interval.
	time.Sleep(every * time.Duration(n) / time.Duration(len(tr.reqs)))
	tk := time.NewTicker(every)
	defer tk.Stop()
	var calls sync.WaitGroup
	defer calls.Wait()
	var inFlight atomic.Int64
	for k := n; ; k++ {
		select {
		case <-tk.C:
		case <-tr.stopping:
			return
		}
		if inFlight.Load() >= 100 {
			tr.fail("requester " + c.AgentID() + ": 100 requests outstanding")
			continue
		}
		i := k % len(tr.x.reqs)
		inFlight.Add(1)
		calls.Add(1)
		go func() {
			defer calls.Done()
			defer inFlight.Add(-1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			resp, err := c.Do(ctx, tr.x.reqs[i])
			el := time.Since(start)
			if err == nil {
				err = tr.x.check(i, resp)
			}
			if err != nil {
				tr.fail(fmt.Sprintf("%s request %d after %v: %v", c.AgentID(), i, el, err))
				return
			}
			tr.ok.Add(1)
			tr.mu.Lock()
			tr.latencies = append(tr.latencies, el)
			tr.mu.Unlock()
		}()
	}
}

func (tr *soakTraffic) fail(msg string) {
	tr.failed.Add(1)
	tr.mu.Lock()
	if len(tr.firstErrs) < 10 {
		tr.firstErrs = append(tr.firstErrs, msg)
		tr.onFail(time.Now().Format("15:04:05.000 ") + msg)
	}
	tr.mu.Unlock()
}

// stop ends the traffic, waits for the requests in flight and sums up.
func (tr *soakTraffic) stop() soakResult {
	close(tr.stopping)
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	res := soakResult{OK: tr.ok.Load(), Failed: tr.failed.Load(), TrafficClients: len(tr.clients), FirstErrors: tr.firstErrs}
	for _, c := range tr.clients {
		if err := c.Err(); err != nil {
			res.Failed++
			res.FirstErrors = append(res.FirstErrors, c.AgentID()+" ended: "+err.Error())
		}
	}
	if n := len(tr.latencies); n > 0 {
		slices.Sort(tr.latencies)
		res.P50, res.P99, res.Max = tr.latencies[n/2], tr.latencies[n*99/100], tr.latencies[n-1]
	}
	return res
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
