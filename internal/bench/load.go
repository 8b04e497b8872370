package bench

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/configerr"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/tokennative"
	"github.com/m2md/m2md/transport"
)

// Defaults of LoadConfig.
const (
	DefaultDuration    = 10 * time.Second
	DefaultWarmup      = 2 * time.Second
	DefaultConnections = 4
	DefaultProviders   = 4
	DefaultConcurrency = 32
	DefaultMaxInFlight = 4096
	DefaultTimeout     = 5 * time.Second
	// MaxDuration bounds a run's measurement and warm-up alike: the tool
	// always stops.
	MaxDuration = time.Hour
)

// LoadConfig describes a load benchmark. The zero value is a working
// default: an in-process daemon over QUIC, 4 requester connections, 4 echo
// providers, 32 requests in flight, the built-in 1 KB payload as M2M v1
// frames, security none, 10 s measured after 2 s of warm-up.
type LoadConfig struct {
	// Target is a running daemon: quic://host:port, ws://host:port/path or
	// wss://host:port/path. Empty starts a daemon in this process. The
	// payloads' "model" is then replaced by a name of the run's own, so
	// that real agents serving the model never receive benchmark traffic.
	// A zero-config `m2md serve` carries the load; a daemon with
	// per-session rate limits set (--messages-per-minute,
	// --bytes-per-second) refuses what exceeds them, and the run counts
	// those errors. The daemon must not require authentication.
	Target string
	// ProviderTarget, when set, is another daemon of the same cluster
	// (docs/operations.md, "Cluster"): the provider agents connect there
	// while the requesters connect to Target, so every request and reply
	// crosses the cluster. Same URL forms and TLS as Target.
	ProviderTarget string
	// TLS verifies the target for quic:// and wss:// (see package certs);
	// nil means the system roots. Ignored for the in-process daemon.
	TLS *tls.Config
	// DaemonMetrics is the target's Prometheus endpoint
	// (http://host:9090/metrics); when set, the M2M run reports the
	// daemon's own CPU and allocations from it.
	DaemonMetrics string
	// ProviderDaemonMetrics is ProviderTarget's Prometheus endpoint; when
	// set, the cross-node run also reports that node's own CPU, so that
	// each node's cost per round trip is known (Result.ProviderNode).
	ProviderDaemonMetrics string
	// Transport is used for the in-process daemon and for the baseline and
	// echo runs: quic (default), ws or wss. With a Target the URL decides.
	Transport string

	Duration    time.Duration // measured time; default 10 s
	Warmup      time.Duration // sent but not measured, before; 0: 2 s, negative: none
	Connections int           // requester connections; default 4
	Providers   int           // echo provider agents; default 4
	// Concurrency is the closed loop's requests in flight, over all
	// connections; default 32.
	Concurrency int
	// Rate, when positive, runs an open loop instead: this many requests
	// per second, on schedule whatever the replies do, latency measured
	// from each request's intended send time. MaxInFlight bounds the
	// requests waiting for replies (default 4096); beyond it sending waits,
	// and the wait counts in the latency.
	Rate        float64
	MaxInFlight int
	// ServiceTime is how long a provider waits before echoing a request.
	ServiceTime time.Duration
	// Timeout gives up on a request without its final reply; default 5 s.
	Timeout time.Duration

	// Payloads are sent in turn; default the built-in 1 KB sample.
	Payloads []Payload
	// Algorithm is AlgorithmM2M (default) or AlgorithmTokenNative; Encoding
	// the TokenNative tokenizer (default cl100k).
	Algorithm string
	Encoding  tokennative.Encoding
	// Security protects the M2M frames: none, hmac or aead.
	Security frame.Security
	// Traced makes every M2M request carry a trace context of its own
	// (feature trace, docs/protocol.md §4.8), sampled: what tracing costs
	// the daemon when every request is traced (it records and exports
	// spans when it runs with OTEL_* set, docs/operations.md "Traces").
	// A daemon that does not offer the feature refuses the session.
	Traced bool

	// Baseline also runs the same load through a bare relay built on the
	// same transport (the protocol's cost is the ratio); Echo also runs it
	// against a target that echoes at once (the generator's own limit).
	Baseline bool
	Echo     bool
	// Compare names another system to run the same load through, and
	// report M2M's ratio to: "nats" (an embedded nats-server in this process
	// unless NATSURL, nats.go request/reply, queue-group responders; TLS
	// when Transport is quic or wss); or, with a ProviderTarget, "single-node": the same load
	// with the providers on Target too, so that the cross-node run is
	// compared with a single-node run of the same daemons. Empty: none.
	Compare string
	// NATSURL, with Compare "nats", is a nats-server of the user's
	// (nats:// or tls://, verified with TLS) to run the NATS load through
	// instead of an embedded one. With a Target, both servers then run in
	// processes of their own, as they would be deployed, and the load
	// generator here is the only thing they share.
	NATSURL string
	// NATSTLS verifies a tls:// NATSURL; nil means the system roots.
	NATSTLS *tls.Config

	// CPUProfile and MemProfile receive a CPU profile of the M2M run's
	// measurement window and an allocation profile at its end (in-process
	// daemon; goroutines are labelled role=daemon, role=loadgen).
	CPUProfile io.Writer
	MemProfile io.Writer

	// ProfileRun names the run CPUProfile and MemProfile cover: RunM2M
	// (default), RunRelay or RunEcho; with Repeat, its first repetition.
	ProfileRun string
	// Repeat runs everything this many times, interleaved, and reports the
	// median of each figure (ratios: the median of each repetition's
	// ratio); errors are summed. Default 1.
	Repeat int

	// Progress, when set, is called a few times a second.
	Progress func(Progress)
	// CommandLine is recorded in the report.
	CommandLine string
}

// Progress reports a run under way.
type Progress struct {
	Run              string // RunM2M, RunRelay or RunEcho
	RunIndex, Runs   int    // 1-based, over all runs and repetitions
	Phase            string // "warm-up", "measure" or "drain"
	Elapsed, Total   time.Duration
	RoundTripsPerSec float64 // since the previous report
	Errors           int64
}

func (c *LoadConfig) withDefaults() (LoadConfig, error) {
	cfg := *c
	set := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if cfg.Duration == 0 {
		cfg.Duration = DefaultDuration
	}
	switch {
	case cfg.Warmup == 0:
		cfg.Warmup = DefaultWarmup
	case cfg.Warmup < 0:
		cfg.Warmup = 0 // none
	}
	set(&cfg.Connections, DefaultConnections)
	set(&cfg.Providers, DefaultProviders)
	set(&cfg.Concurrency, DefaultConcurrency)
	set(&cfg.MaxInFlight, DefaultMaxInFlight)
	set(&cfg.Repeat, 1)
	if cfg.ProfileRun == "" {
		cfg.ProfileRun = RunM2M
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Transport == "" {
		cfg.Transport = TransportQUIC
	}
	if cfg.Algorithm == "" {
		cfg.Algorithm = AlgorithmM2M
	}
	// Errors name the fields they are about, qualified (configerr), so
	// that m2md bench load shows each as its flag.
	const f = "bench.LoadConfig."
	bad := func(field, format string, args ...any) (LoadConfig, error) {
		return cfg, configerr.New(f+field, "bench: "+format, args...)
	}
	switch {
	case cfg.Duration < 0 || cfg.Duration > MaxDuration:
		return bad("Duration", f+"Duration must be between 0 and %s", MaxDuration)
	case cfg.Warmup > MaxDuration:
		return bad("Warmup", f+"Warmup must be at most %s", MaxDuration)
	case cfg.Connections < 1 || cfg.Connections > 1000:
		return bad("Connections", f+"Connections must be 1 to 1000")
	case cfg.Providers < 1 || cfg.Providers > 1000:
		return bad("Providers", f+"Providers must be 1 to 1000")
	case cfg.Concurrency < 1 || cfg.Concurrency > 100_000:
		return bad("Concurrency", f+"Concurrency must be 1 to 100000")
	case cfg.MaxInFlight < 1 || cfg.MaxInFlight > 1_000_000:
		return bad("MaxInFlight", f+"MaxInFlight must be 1 to 1000000")
	case cfg.Rate < 0 || cfg.Rate > 10_000_000:
		return bad("Rate", f+"Rate must be 0 (closed loop) to 10000000 per second")
	case cfg.Repeat < 1 || cfg.Repeat > 100:
		return bad("Repeat", f+"Repeat must be 1 to 100")
	case cfg.Compare != "" && cfg.Compare != CompareNATS && cfg.Compare != CompareSingleNode:
		return bad("Compare", f+"Compare must be %s or %s, not %q", CompareNATS, CompareSingleNode, cfg.Compare)
	case cfg.Compare == CompareSingleNode && cfg.ProviderTarget == "":
		return bad("Compare", f+"Compare %s compares a "+f+"ProviderTarget run with one on "+f+"Target alone; set "+f+"ProviderTarget", CompareSingleNode)
	case cfg.NATSURL != "" && cfg.Compare != CompareNATS:
		return bad("NATSURL", f+"NATSURL is the server for "+f+"Compare %s; set "+f+"Compare to %[1]s", CompareNATS)
	case cfg.ProviderDaemonMetrics != "" && cfg.ProviderTarget == "":
		return bad("ProviderDaemonMetrics", f+"ProviderDaemonMetrics is the metrics of the "+f+"ProviderTarget daemon; set "+f+"ProviderTarget")
	case cfg.ProfileRun != RunM2M && cfg.ProfileRun != RunRelay && cfg.ProfileRun != RunEcho && cfg.ProfileRun != RunNATS:
		return bad("ProfileRun", f+"ProfileRun must be %s, %s, %s or %s", RunM2M, RunRelay, RunEcho, RunNATS)
	case cfg.ProfileRun == RunRelay && !cfg.Baseline, cfg.ProfileRun == RunEcho && !cfg.Echo, cfg.ProfileRun == RunNATS && cfg.Compare != CompareNATS:
		return bad("ProfileRun", "cannot profile the %s run ("+f+"ProfileRun) without running it", cfg.ProfileRun)
	case cfg.ServiceTime < 0 || cfg.ServiceTime > time.Minute:
		return bad("ServiceTime", f+"ServiceTime must be 0 to 1 minute")
	case cfg.Timeout <= 0 || cfg.Timeout > 10*time.Minute:
		return bad("Timeout", f+"Timeout must be above 0 and at most 10 minutes")
	case cfg.Security > frame.SecurityAEAD:
		return bad("Security", f+"Security must be none, hmac or aead")
	case cfg.Algorithm == AlgorithmTokenNative && cfg.Security != frame.SecurityNone:
		return bad("Security", "TokenNative frames cannot be protected: "+f+"Security must be none")
	case cfg.Transport != TransportQUIC && cfg.Transport != TransportWS && cfg.Transport != TransportWSS:
		return bad("Transport", f+"Transport must be quic, ws or wss, not %q", cfg.Transport)
	case cfg.ProviderTarget != "" && cfg.Target == "":
		return bad("ProviderTarget", f+"ProviderTarget needs "+f+"Target: the requesters' daemon, another node of the provider daemon's cluster")
	case cfg.DaemonMetrics != "" && cfg.Target == "":
		return bad("DaemonMetrics", f+"DaemonMetrics are read from a target daemon ("+f+"Target); the in-process daemon is measured directly")
	}
	if cfg.Target != "" {
		ep, err := parseTarget(cfg.Target, cfg.TLS)
		if err != nil {
			return cfg, err
		}
		cfg.Transport = ep.transport
	}
	if cfg.NATSURL != "" {
		if _, err := parseNATSURL(cfg.NATSURL); err != nil {
			return cfg, err
		}
	}
	if cfg.ProviderTarget != "" {
		if _, err := parseTarget(cfg.ProviderTarget, cfg.TLS); err != nil {
			return cfg, configerr.New("bench.LoadConfig.ProviderTarget", "bench: bench.LoadConfig.ProviderTarget: %w", err)
		}
	}
	if len(cfg.Payloads) == 0 {
		p, err := BuiltinPayload(Size1KB)
		if err != nil {
			return cfg, err
		}
		cfg.Payloads = []Payload{p}
	}
	return cfg, nil
}

// RunLoad runs the load benchmark described by cfg: the M2M run, then the
// baseline and echo runs if asked for, one after the other so that they do
// not compete for the machine. It returns an error only when a run could
// not be set up; failed requests are counted in the report.
func RunLoad(ctx context.Context, cfg LoadConfig) (*LoadReport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	renamed := ""
	if cfg.Target != "" {
		// A running daemon may have real agents serving the payloads'
		// models: route the benchmark to a model only its own providers
		// serve.
		renamed = "m2md-bench-" + randomSuffix()
		cfg.Payloads = renameModels(cfg.Payloads, renamed)
	}
	ps, err := prepare(cfg.Payloads, cfg.Algorithm, cfg.Encoding)
	if err != nil {
		return nil, err
	}
	rep := &LoadReport{Config: runInfo(&cfg, ps), Machine: machine()}
	cpu0, cpuOK := machineCPU()
	rep.Config.Model = renamed
	runs := []string{RunM2M}
	if cfg.Baseline {
		runs = append(runs, RunRelay)
	}
	if cfg.Echo {
		runs = append(runs, RunEcho)
	}
	switch cfg.Compare {
	case CompareNATS:
		runs = append(runs, RunNATS)
	case CompareSingleNode:
		runs = append(runs, RunSingle)
	}
	// The single-node run routes to a model of its own: providers of the
	// cross-node run that just left must not be picked while the cluster
	// forgets them.
	psSingle := ps
	if cfg.Compare == CompareSingleNode {
		if psSingle, err = prepare(renameModels(cfg.Payloads, renamed+"-single"), cfg.Algorithm, cfg.Encoding); err != nil {
			return nil, err
		}
	}
	results := make(map[string][]*Result)
	step, steps := 0, cfg.Repeat*len(runs)
	for rep := 0; rep < cfg.Repeat; rep++ {
		// Interleaved (M2M, baseline, M2M, baseline, …) so that a change in
		// the machine's other load hits both alike.
		for _, kind := range runs {
			step++
			var res *Result
			kps := ps
			if kind == RunSingle {
				kps = psSingle
			}
			withRole(ctx, roleLoadgen, func(ctx context.Context) {
				res, err = runOnce(ctx, &cfg, kps, kind, step, steps, rep == 0)
			})
			if err != nil {
				return nil, fmt.Errorf("bench: %s run: %w", kind, err)
			}
			results[kind] = append(results[kind], res)
			if ctx.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	rep.Result = *medianResult(results[RunM2M])
	if rs := results[RunRelay]; len(rs) > 0 {
		rep.Baseline = medianResult(rs)
	}
	if rs := results[RunEcho]; len(rs) > 0 {
		rep.Echo = medianResult(rs)
	}
	if rs := results[RunNATS]; len(rs) > 0 {
		rep.NATS = medianResult(rs)
		rep.NATSRatios = ratiosOf(results[RunM2M], rs)
		if rel := results[RunRelay]; len(rel) > 0 {
			rep.RelayNATSRatios = ratiosOf(rel, rs)
		}
	}
	if rs := results[RunSingle]; len(rs) > 0 {
		rep.SingleNode = medianResult(rs)
		rep.SingleNodeRatios = ratiosOf(results[RunM2M], rs)
		rep.NodeCPURatio = nodeCPURatio(results[RunM2M], rs)
	}
	rep.Machine.finish(cpu0, cpuOK)
	rep.computeRatios(results[RunM2M], results[RunRelay])
	if cfg.Repeat > 1 {
		rep.Repetitions = repetitionsOf(results[RunM2M], results[RunRelay], results[RunNATS])
	}
	return rep, nil
}

func runInfo(cfg *LoadConfig, ps []prepared) RunInfo {
	info := RunInfo{
		Target:          cfg.Target,
		ProviderTarget:  cfg.ProviderTarget,
		Repeat:          cfg.Repeat,
		Transport:       cfg.Transport,
		Security:        cfg.Security.String(),
		Algorithm:       cfg.Algorithm,
		Payloads:        len(ps),
		Mode:            "closed",
		Concurrency:     cfg.Concurrency,
		Connections:     cfg.Connections,
		Providers:       cfg.Providers,
		DurationS:       cfg.Duration.Seconds(),
		WarmupS:         cfg.Warmup.Seconds(),
		ServiceTimeUS:   float64(cfg.ServiceTime) / 1e3,
		TimeoutS:        cfg.Timeout.Seconds(),
		StartedAt:       time.Now().UTC().Format(time.RFC3339),
		CommandLine:     cfg.CommandLine,
		InProcessDaemon: cfg.Target == "",
	}
	if cfg.Target == "" {
		info.Target = "in-process"
	}
	if cfg.Algorithm == AlgorithmTokenNative {
		info.Encoding = cfg.Encoding.String()
	}
	if cfg.Rate > 0 {
		info.Mode, info.Rate, info.MaxInFlight, info.Concurrency = "open", cfg.Rate, cfg.MaxInFlight, 0
	}
	var j, f float64
	for _, p := range ps {
		j += float64(p.json)
		f += float64(len(p.frame))
	}
	info.JSONBytes, info.FrameBytes = j/float64(len(ps)), f/float64(len(ps))
	info.PayloadName = cfg.Payloads[0].Name
	if len(ps) > 1 {
		info.PayloadName = fmt.Sprintf("%d documents", len(ps))
	}
	return info
}

// renameModels returns payloads with their top-level "model" replaced.
func renameModels(payloads []Payload, model string) []Payload {
	out := make([]Payload, len(payloads))
	for i, p := range payloads {
		out[i] = p
		if b, ok := replaceModel(p.JSON, model); ok {
			out[i].JSON = b
		}
	}
	return out
}

// setup is one run's target and agents.
type setup struct {
	target     string
	daemon     *inprocDaemon
	relay      *relayServer
	nats       *natsTarget
	requesters []*requester
	stoppers   []func() // providers
	provErrs   counters
}

func (s *setup) close() {
	var wg sync.WaitGroup
	for _, r := range s.requesters {
		wg.Go(func() { r.stop("unanswered_at_end") })
	}
	wg.Wait()
	for _, stop := range s.stoppers {
		wg.Go(stop)
	}
	wg.Wait()
	if s.relay != nil {
		s.relay.stop()
	}
	if s.nats != nil {
		s.nats.stop()
	}
	if s.daemon != nil {
		_ = s.daemon.stop()
	}
}

func agentID(role string, i int, suffix string) string {
	return fmt.Sprintf("bench-%s%d-%s", role, i+1, suffix)
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// connect starts the run's target (unless it is a running daemon) and
// connects its providers and requesters.
func connect(ctx context.Context, cfg *LoadConfig, ps []prepared, kind string, rec *recorder, clk clock, certDir string) (*setup, error) {
	if kind == RunNATS {
		return connectNATS(cfg, ps, rec, clk, certDir)
	}
	s := &setup{}
	var ep endpoint
	var err error
	switch {
	case isM2M(kind) && cfg.Target != "":
		ep, err = parseTarget(cfg.Target, cfg.TLS)
	case isM2M(kind):
		withRole(ctx, roleDaemon, func(context.Context) {
			s.daemon, err = startDaemon(certDir, frame.SecurityNone)
		})
		if err == nil {
			ep, err = s.daemon.endpoint(cfg.Transport)
		}
	default:
		withRole(ctx, roleRelay, func(context.Context) {
			s.relay, err = startRelay(cfg.Transport, kind == RunEcho, certDir)
		})
		if s.relay != nil {
			ep = s.relay.ep
		}
	}
	if err != nil {
		s.close()
		return nil, err
	}
	s.target = ep.String()
	if s.daemon != nil {
		s.target = "in-process " + s.target
	}

	maxFrame := 0
	for _, p := range ps {
		maxFrame = max(maxFrame, len(p.frame))
	}
	suffix := randomSuffix()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var providerIDs []string
	pep := ep // where the providers connect
	if kind == RunM2M && cfg.ProviderTarget != "" {
		if pep, err = parseTarget(cfg.ProviderTarget, cfg.TLS); err != nil {
			s.close()
			return nil, err
		}
	}
	if kind != RunEcho {
		mods := models(ps)
		for i := range cfg.Providers {
			switch kind {
			case RunM2M, RunSingle:
				id := agentID("p", i, suffix)
				sess, err := dialM2M(dctx, pep, negotiate.ClientConfig{AgentID: id, AgentType: "m2md-bench", Models: mods, Security: cfg.Security})
				if err != nil {
					s.close()
					return nil, fmt.Errorf("provider %d: %w", i+1, err)
				}
				p := newM2MProvider(sess, cfg.ServiceTime, maxFrame, &s.provErrs)
				go p.run()
				s.stoppers = append(s.stoppers, p.stop)
				providerIDs = append(providerIDs, id)
			case RunRelay:
				conn, err := dialTag(dctx, ep, roleProvider)
				if err != nil {
					s.close()
					return nil, fmt.Errorf("provider %d: %w", i+1, err)
				}
				p := &tagProvider{conn: conn, serviceTime: cfg.ServiceTime, errs: &s.provErrs, bufs: bufPool{size: maxFrame + tagLen}, done: make(chan struct{})}
				go p.run()
				s.stoppers = append(s.stoppers, p.stop)
			}
		}
	}
	if kind == RunM2M && cfg.ProviderTarget != "" {
		// The providers' daemon announces them to the cluster; give that
		// one NATS delivery (well under this on any LAN) before requests
		// are routed to them from the other node.
		time.Sleep(500 * time.Millisecond)
	}
	perConn := cfg.MaxInFlight
	if cfg.Rate == 0 {
		perConn = (cfg.Concurrency + cfg.Connections - 1) / cfg.Connections
	}
	for i := range cfg.Connections {
		var (
			w      wire
			tconn  transport.Conn
			sendMu *sync.Mutex
		)
		if isM2M(kind) {
			cc := negotiate.ClientConfig{AgentID: agentID("r", i, suffix), AgentType: "m2md-bench", Security: cfg.Security}
			if cfg.Traced && kind == RunM2M {
				cc.Features = []negotiate.Feature{negotiate.FeatureTrace}
			}
			sess, err := dialM2M(dctx, ep, cc)
			if err != nil {
				s.close()
				return nil, fmt.Errorf("requester %d: %w", i+1, err)
			}
			if len(cc.Features) > 0 && !sess.sess.Params.Has(negotiate.FeatureTrace) {
				s.close()
				return nil, fmt.Errorf("requester %d: the daemon does not offer feature trace (LoadConfig.Traced)", i+1)
			}
			w, tconn = &m2mWire{s: sess, providers: providerIDs, traced: len(cc.Features) > 0}, sess.conn
			if sess.shared {
				sendMu = &sess.sendMu
			}
		} else {
			c, err := dialTag(dctx, ep, roleRequester)
			if err != nil {
				s.close()
				return nil, fmt.Errorf("requester %d: %w", i+1, err)
			}
			w, tconn = &tagWire{conn: c}, c
		}
		s.requesters = append(s.requesters, newRequester(tconn, w, sendMu, ps, rec, clk, perConn, cfg.Timeout))
	}
	return s, nil
}

// runOnce runs one kind of run from set-up to tear-down.
func runOnce(ctx context.Context, cfg *LoadConfig, ps []prepared, kind string, index, runs int, first bool) (*Result, error) {
	certDir, err := os.MkdirTemp("", "m2md-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(certDir)

	// Everything ends, whatever the target does.
	hard := cfg.Warmup + cfg.Duration + cfg.Timeout + time.Minute
	ctx, cancel := context.WithTimeout(ctx, hard)
	defer cancel()

	clk := newClock()
	rec := newRecorder(clk)
	rec.open = cfg.Rate > 0
	s, err := connect(ctx, cfg, ps, kind, rec, clk, certDir)
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			s.close()
		}
	}()
	sem := s.startRequesters(cfg)

	begin := clk.now()
	winStart := begin + int64(cfg.Warmup)
	winEnd := winStart + int64(cfg.Duration)
	rec.setWindow(winStart, winEnd, tickInterval(cfg.Duration)/2)

	// Profiles cover the first repetition of the chosen run.
	profiling := first && kind == cfg.ProfileRun
	if profiling && cfg.MemProfile != nil {
		// A finer sampling rate than the default 512 KiB, so that the
		// allocations of each routed frame show up with their stacks.
		restoreRate := runtime.MemProfileRate
		runtime.MemProfileRate = 4096
		defer func() { runtime.MemProfileRate = restoreRate }()
	}
	mon := startUsageMonitor(ctx, monitor{cfg: cfg, clk: clk, rec: rec, kind: kind, index: index, runs: runs,
		begin: begin, winStart: winStart, winEnd: winEnd}, profiling)
	s.drive(ctx, cfg, clk, ps, sem, begin, winEnd)
	s.drain(ctx, cfg, sem)
	mon.stop()

	if profiling && cfg.MemProfile != nil {
		runtime.GC()
		if err := pprof.Lookup("allocs").WriteTo(cfg.MemProfile, 0); err != nil {
			return nil, err
		}
	}
	closed = true
	s.close()
	return s.result(cfg, kind, rec, mon)
}

// startRequesters starts the requesters; in an open loop it returns the
// semaphore that bounds the requests in flight (nil in a closed loop).
func (s *setup) startRequesters(cfg *LoadConfig) chan struct{} {
	open := cfg.Rate > 0
	var sem chan struct{}
	if open {
		sem = make(chan struct{}, cfg.MaxInFlight)
		for _, r := range s.requesters {
			r.release = func() { <-sem }
		}
	}
	for _, r := range s.requesters {
		r.start(open)
	}
	return sem
}

// drive sends the load until winEnd: at cfg.Rate (open loop, bounded by
// sem) or with cfg.Concurrency requests in flight (closed loop).
func (s *setup) drive(ctx context.Context, cfg *LoadConfig, clk clock, ps []prepared, sem chan struct{}, begin, winEnd int64) {
	var next atomic.Uint64
	payload := func() int { return int((next.Add(1) - 1) % uint64(len(ps))) }
	if sem != nil {
		var k atomic.Uint64
		runPaced(cfg.Rate, func(precise bool) {
			p := newPacer(precise)
			defer p.stop()
			openLoop(ctx, clk, p, begin, winEnd, cfg.Rate, slotOf(sem), func(intended int64) {
				r := s.requesters[(k.Add(1)-1)%uint64(len(s.requesters))]
				r.jobs <- job{intended: intended, payload: payload()}
			})
		})
		return
	}
	dones := make([]chan string, cfg.Concurrency)
	for i := range dones {
		dones[i] = make(chan string, 1)
	}
	chain := &closedChain{ctx: ctx, stop: winEnd, payload: payload}
	for _, r := range s.requesters {
		r.chain.Store(chain)
	}
	defer func() {
		for _, r := range s.requesters {
			r.chain.Store(nil)
		}
	}()
	closedLoop(ctx, clk, cfg.Concurrency, winEnd, func(ctx context.Context, w int, t int64) bool {
		return s.requesters[w%len(s.requesters)].roundTrip(ctx, t, payload(), dones[w])
	})
}

// drain lets the requests in flight finish (bounded by their timeout).
func (s *setup) drain(ctx context.Context, cfg *LoadConfig, sem chan struct{}) {
	drainEnd := time.Now().Add(cfg.Timeout + time.Second)
	for time.Now().Before(drainEnd) && ctx.Err() == nil {
		// Open loop: a request holds its place in sem from the moment it is
		// due until it ends, including the moment a sender has taken it off
		// its queue but not yet sent it, which the requesters cannot see.
		n := len(sem)
		for _, r := range s.requesters {
			n += r.inFlight()
		}
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// usageMonitor runs a run's monitor and reads the CPU and memory usage
// (and, when profiling, the CPU profile) over the measured window.
type usageMonitor struct {
	before, after usage
	// provBefore and provAfter are the provider node's (ProviderNode).
	provBefore, provAfter usage
	err                   error
	stopc, done           chan struct{}
}

func startUsageMonitor(ctx context.Context, m monitor, profiling bool) *usageMonitor {
	u := &usageMonitor{stopc: make(chan struct{}), done: make(chan struct{})}
	cfg := m.cfg
	fromMetrics := fromDaemonMetrics(cfg, m.kind)
	provider := m.kind == RunM2M && cfg.ProviderDaemonMetrics != ""
	readUsage := func(own, prov *usage) error {
		var err error
		if fromMetrics {
			*own, err = metricsUsage(ctx, cfg.DaemonMetrics)
		} else {
			*own = processUsage()
		}
		if err == nil && provider {
			*prov, err = metricsUsage(ctx, cfg.ProviderDaemonMetrics)
		}
		return err
	}
	m.atStart = func() {
		u.err = readUsage(&u.before, &u.provBefore)
		if profiling && cfg.CPUProfile != nil {
			if err := pprof.StartCPUProfile(cfg.CPUProfile); err != nil && u.err == nil {
				u.err = err
			}
		}
	}
	m.atEnd = func() {
		if profiling && cfg.CPUProfile != nil {
			pprof.StopCPUProfile()
		}
		if err := readUsage(&u.after, &u.provAfter); u.err == nil {
			u.err = err
		}
	}
	go func() {
		defer close(u.done)
		m.run(ctx, u.stopc)
	}()
	return u
}

// fromDaemonMetrics reports whether a run of kind reads its CPU and
// memory from the target daemon's metrics rather than this process.
func fromDaemonMetrics(cfg *LoadConfig, kind string) bool {
	return isM2M(kind) && cfg.Target != "" && cfg.DaemonMetrics != ""
}

// isM2M reports whether a run of kind goes through M2M daemons.
func isM2M(kind string) bool { return kind == RunM2M || kind == RunSingle }

func (u *usageMonitor) stop() {
	close(u.stopc)
	<-u.done
}

// result is the run's figures.
func (s *setup) result(cfg *LoadConfig, kind string, rec *recorder, u *usageMonitor) (*Result, error) {
	res := rec.result()
	res.Run = kind
	res.Target = s.target
	if p := s.provErrs.snapshot(); len(p) > 0 {
		res.ProviderErrors = p
	}
	if u.err != nil {
		return nil, u.err
	}
	if !u.after.at.IsZero() && !u.before.at.IsZero() {
		res.Process = stats(u.before, u.after, res.RoundTrips)
		if fromDaemonMetrics(cfg, kind) {
			res.Process.Source, res.Process.IncludesDaemon = "metrics", true
		} else {
			res.Process.Source, res.Process.IncludesLoad = "process", true
			switch {
			case isM2M(kind):
				res.Process.IncludesDaemon = cfg.Target == ""
			case kind == RunNATS:
				res.Process.IncludesDaemon = cfg.NATSURL == ""
			default: // the relay and the echo target run here
				res.Process.IncludesDaemon = true
			}
		}
	}
	if !u.provAfter.at.IsZero() && !u.provBefore.at.IsZero() {
		res.ProviderNode = stats(u.provBefore, u.provAfter, res.RoundTrips)
		res.ProviderNode.Source, res.ProviderNode.IncludesDaemon = "metrics", true
	}
	return &res, nil
}

// monitor marks the measurement window's edges (usage readings,
// profiling), closes the timeline's intervals and reports progress.
type monitor struct {
	cfg                     *LoadConfig
	clk                     clock
	rec                     *recorder
	kind                    string
	index, runs             int
	begin, winStart, winEnd int64
	atStart, atEnd          func()
}

// tickInterval is the timeline's resolution: about 50 points per run,
// between 100 ms and 1 s apart.
func tickInterval(d time.Duration) time.Duration {
	return min(max(d/50, 100*time.Millisecond), time.Second)
}

func (m *monitor) run(ctx context.Context, stop <-chan struct{}) {
	startT := time.NewTimer(time.Duration(m.winStart - m.clk.now()))
	endT := time.NewTimer(time.Duration(m.winEnd - m.clk.now()))
	tick := time.NewTicker(tickInterval(m.cfg.Duration))
	defer startT.Stop()
	defer endT.Stop()
	defer tick.Stop()
	started, ended := false, false
	lastOK, lastAt := int64(0), m.begin
	phase := "warm-up"
	for {
		select {
		case <-startT.C:
			started = true
			phase = "measure"
			m.atStart()
			continue
		case <-endT.C:
			if !started {
				started = true
				m.atStart()
			}
			ended = true
			phase = "drain"
			m.rec.tick(m.winEnd, int64(runDelay()))
			m.atEnd()
			continue
		case <-tick.C:
		case <-stop:
		case <-ctx.Done():
		}
		now := m.clk.now()
		select {
		case <-stop:
		case <-ctx.Done():
		default:
			m.rec.tick(now, int64(runDelay()))
			if m.cfg.Progress != nil {
				ok := m.rec.successes()
				secs := float64(now-lastAt) / 1e9
				m.cfg.Progress(Progress{
					Run: m.kind, RunIndex: m.index, Runs: m.runs, Phase: phase,
					Elapsed:          time.Duration(min(now, m.winEnd) - m.begin),
					Total:            time.Duration(m.winEnd - m.begin),
					RoundTripsPerSec: float64(ok-lastOK) / secs,
					Errors:           m.rec.errorCount(),
				})
				lastOK, lastAt = ok, now
			}
			continue
		}
		if started && !ended {
			m.atEnd()
		}
		return
	}
}

// connectNATS starts the embedded nats-server, unless the user gave one,
// and connects the run's providers and requesters to it.
func connectNATS(cfg *LoadConfig, ps []prepared, rec *recorder, clk clock, certDir string) (*setup, error) {
	s := &setup{}
	var err error
	if cfg.NATSURL != "" {
		s.nats, err = remoteNATS(cfg.NATSURL, cfg.NATSTLS)
		s.target = cfg.NATSURL
	} else {
		maxMsg := 0
		for _, p := range ps {
			maxMsg = max(maxMsg, len(p.frame)+tagLen)
		}
		withRole(context.Background(), roleRelay, func(context.Context) {
			s.nats, err = startNATS(cfg.Transport, certDir, maxMsg)
		})
		if err == nil {
			s.target = "in-process " + s.nats.url
		}
	}
	if err != nil {
		return nil, err
	}
	for i := range cfg.Providers {
		p, err := startNATSProvider(s.nats, cfg.ServiceTime, &s.provErrs)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("provider %d: %w", i+1, err)
		}
		s.stoppers = append(s.stoppers, p.stop)
	}
	perConn := cfg.MaxInFlight
	if cfg.Rate == 0 {
		perConn = (cfg.Concurrency + cfg.Connections - 1) / cfg.Connections
	}
	for i := range cfg.Connections {
		c, err := dialNATSRequester(s.nats, perConn)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("requester %d: %w", i+1, err)
		}
		s.requesters = append(s.requesters, newRequester(c, &tagWire{conn: c}, nil, ps, rec, clk, perConn, cfg.Timeout))
	}
	return s, nil
}
