package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/internal/bench"
	"github.com/m2md/m2md/tokennative"
)

func runBench(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printBenchUsage(stderr)
		return usagef("missing subcommand: load, openai, codec, conversation or table")
	}
	switch args[0] {
	case "load":
		return runBenchLoad(args[1:], stdout, stderr)
	case "openai":
		return runBenchOpenAI(args[1:], stdout, stderr)
	case "codec":
		return runBenchCodec(args[1:], stdout, stderr)
	case "table":
		return runBenchTable(args[1:], stdout, stderr)
	case "conversation":
		return runBenchConversation(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		var buf bytes.Buffer
		printBenchUsage(&buf)
		return helpError{buf.String()}
	}
	printBenchUsage(stderr)
	return usagef("unknown subcommand %q (want load, openai, codec, conversation or table)", args[0])
}

func printBenchUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: m2md bench <load|openai|codec|conversation|table> [flags]")
	fmt.Fprintln(w, "\n  load   routed request/response round trips through a daemon (in-process unless --url),")
	fmt.Fprintln(w, "         optionally against a bare relay baseline (--baseline)")
	fmt.Fprintln(w, "  openai load on an OpenAI-compatible chat endpoint (m2md serve's or any other), optionally")
	fmt.Fprintln(w, "         beside a second one (--compare), with time to first chunk when streamed")
	fmt.Fprintln(w, "  codec  bytes, cl100k tokens and encode/decode time of every wire form, per corpus file")
	fmt.Fprintln(w, "  conversation  multi-turn conversations replayed turn by turn, with and without deltas")
	fmt.Fprintln(w, "  table  one Markdown table row per 'bench load --json' report given")
	fmt.Fprintln(w, "\nRun 'm2md bench SUBCOMMAND --help' for the flags.")
}

// loadOptions are what m2md bench load's flags set: the load's Config and
// the flags read into it after parsing.
type loadOptions struct {
	cfg                                bench.LoadConfig
	pin, caFile, payload, corpus, algo string
	enc, security, jsonOut, plotOut    string
	cpuProfile, memProfile             string
	insecure                           bool
}

// settings are m2md bench load's flags, each with the LoadConfig field it
// sets ("" for the command's own).
func (o *loadOptions) settings() settings {
	cfg := &o.cfg
	return settings{
		{"bench.LoadConfig.Target", "url", strVar(&cfg.Target, ""), "daemon `URL` (quic://host:port, ws://host:port/m2m, wss://…); empty: start one in-process"},
		{"bench.LoadConfig.ProviderTarget", "provider-target", strVar(&cfg.ProviderTarget, ""), "daemon `URL` of another node of the --url daemon's cluster: the providers connect there, so every request crosses the cluster"},
		{"bench.LoadConfig.Transport", "transport", strVar(&cfg.Transport, bench.TransportQUIC), "`transport` of the in-process daemon and the baseline: quic, ws or wss"},
		{"bench.LoadConfig.TLS bench.LoadConfig.NATSTLS", "pin", strVar(&o.pin, ""), "SHA-256 `fingerprint` of the daemon's certificate (quic://, wss://); default: the development\ncertificate in ./certs when there is one, as the demo does"},
		{"bench.LoadConfig.TLS bench.LoadConfig.NATSTLS", "ca-file", strVar(&o.caFile, ""), "PEM `file` of CAs to verify the daemon at --url against"},
		{"bench.LoadConfig.TLS bench.LoadConfig.NATSTLS", "insecure", boolVar(&o.insecure), "accept any certificate from the daemon at --url (development only)"},
		{"bench.LoadConfig.DaemonMetrics", "daemon-metrics", strVar(&cfg.DaemonMetrics, ""), "the daemon's Prometheus `URL` (http://127.0.0.1:9090/metrics): report its own CPU and allocations"},
		{"bench.LoadConfig.ProviderDaemonMetrics", "provider-daemon-metrics", strVar(&cfg.ProviderDaemonMetrics, ""), "the --provider-target daemon's Prometheus `URL`: report that node's CPU too, and with --compare single-node\nthe cross/single ratio with a machine per node"},
		{"bench.LoadConfig.Duration", "duration", durationVar(&cfg.Duration, bench.DefaultDuration), "measured time"},
		{"bench.LoadConfig.Warmup", "warmup", durationVar(&cfg.Warmup, bench.DefaultWarmup), "load before measuring, not measured (0: none)"},
		{"bench.LoadConfig.Connections", "connections", intVar(&cfg.Connections, bench.DefaultConnections), "requester connections"},
		{"bench.LoadConfig.Providers", "providers", intVar(&cfg.Providers, bench.DefaultProviders), "echo provider agents"},
		{"bench.LoadConfig.Concurrency", "concurrency", intVar(&cfg.Concurrency, bench.DefaultConcurrency), "closed loop: requests in flight over all connections"},
		{"bench.LoadConfig.Rate", "rate", floatVar(&cfg.Rate, 0), "open loop: `n` requests per second on a fixed schedule, latency from the intended send time (0: closed loop)"},
		{"bench.LoadConfig.MaxInFlight", "max-in-flight", intVar(&cfg.MaxInFlight, bench.DefaultMaxInFlight), "open loop: most requests waiting for replies"},
		{"bench.LoadConfig.ServiceTime", "service-time", durationVar(&cfg.ServiceTime, 0), "how long providers wait before echoing"},
		{"bench.LoadConfig.Timeout", "timeout", durationVar(&cfg.Timeout, bench.DefaultTimeout), "give up on a request after this"},
		{"bench.LoadConfig.Payloads", "payload", strVar(&o.payload, bench.Size1KB), "built-in payload `size`: " + strings.Join(bench.BuiltinSizes(), ", ")},
		{"bench.LoadConfig.Payloads", "corpus", strVar(&o.corpus, ""), "`folder` of JSON documents to send in turn instead of the built-in payload"},
		{"bench.LoadConfig.Algorithm", "algo", strVar(&o.algo, bench.AlgorithmM2M), "wire `form` of the frames sent: m2m or tokennative"},
		{"bench.LoadConfig.Encoding", "encoding", strVar(&o.enc, "cl100k"), "TokenNative `tokenizer`: cl100k or o200k"},
		{"bench.LoadConfig.Security", "security", strVar(&o.security, "none"), "frame security `mode`: none, hmac or aead"},
		{"bench.LoadConfig.Traced", "traced", boolVar(&cfg.Traced), "every M2M request carries a sampled trace context of its own (feature trace): with a daemon run with OTEL_* set, what tracing every request costs"},
		{"bench.LoadConfig.Baseline", "baseline", boolVar(&cfg.Baseline), "also run the same load through a bare relay on the same transport (no M2M protocol) and report the ratio"},
		{"bench.LoadConfig.Compare", "compare", strVar(&cfg.Compare, ""), "`system`: also run the same load through another system and report the ratio: nats (embedded nats-server in this process unless --nats-url,\nnats.go request/reply, queue-group responders; TLS when --transport is quic or wss), or single-node (with --provider-target:\nthe providers on the --url daemon too, so the cross-node run is compared with a single-node one)"},
		{"bench.LoadConfig.NATSURL", "nats-url", strVar(&cfg.NATSURL, ""), "with --compare nats: the `URL` of a nats-server of yours (nats://host:port, tls://…) instead of an embedded one;\nwith --url, both servers run in processes of their own, as deployed (--pin, --ca-file, --insecure verify tls://)"},
		{"bench.LoadConfig.Echo", "echo", boolVar(&cfg.Echo), "also run the load generator against a target that echoes at once (the generator's own limit)"},
		{"", "json", strVar(&o.jsonOut, ""), "write every figure to this JSON `file`"},
		{"", "plot", strVar(&o.plotOut, ""), "draw latency percentiles and throughput over time into this `file` (.svg or .png)"},
		{"bench.LoadConfig.CPUProfile", "cpuprofile", strVar(&o.cpuProfile, ""), "write a CPU profile of the measurement window to `file` (goroutines labelled role=daemon|loadgen)"},
		{"bench.LoadConfig.MemProfile", "memprofile", strVar(&o.memProfile, ""), "write an allocation profile to `file` at the end of the profiled run"},
		{"bench.LoadConfig.ProfileRun", "profile-run", strVar(&cfg.ProfileRun, bench.RunM2M), "the `run` --cpuprofile and --memprofile cover: m2m, relay, echo or nats"},
		{"bench.LoadConfig.Repeat", "repeat", intVar(&cfg.Repeat, 1), "run everything this many times, interleaved, and report medians"},
	}
}

func runBenchLoad(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench load", "bench load [flags]\n\nSends request/response round trips through the M2M daemon from its own requester\nconnections to its own echo providers, and prints a table. Without --url it starts\na daemon in this process (loopback only).", stderr)
	var o loadOptions
	flags := o.settings()
	flags.register(fs)
	alias(fs, "target", "url")
	alias(fs, "algorithm", "algo")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.readFlags(); err != nil {
		return err
	}
	closeProfiles, err := o.openProfiles()
	if err != nil {
		return err
	}
	defer closeProfiles()
	cfg := o.cfg
	cfg.CommandLine = "m2md bench load " + strings.Join(args, " ")
	if cfg.Warmup == 0 {
		cfg.Warmup = -1 // asked for: the library's 0 is its default
	}
	if bar := newBar(stderr, loadRuns(cfg)*(max(cfg.Warmup, 0)+cfg.Duration).Milliseconds(), "load"); bar != nil {
		per := max(cfg.Warmup, 0) + cfg.Duration
		cfg.Progress = func(p bench.Progress) {
			_ = bar.Set64(int64(p.RunIndex-1)*per.Milliseconds() + p.Elapsed.Milliseconds())
			bar.Describe(fmt.Sprintf("%-5s %-7s %9.0f rt/s  %d errors", p.Run, p.Phase, p.RoundTripsPerSec, p.Errors))
		}
		defer bar.Clear()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunLoad(ctx, cfg)
	if err != nil {
		return flags.translate(err)
	}
	if cfg.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err := o.writeReport(rep, stdout); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Figures of a run where most requests failed measure the failure.
	if err := rep.Check(); err != nil {
		return err // "m2md bench: most requests failed: …"
	}
	return nil
}

// readFlags checks the flags bench.RunLoad does not, and sets the
// LoadConfig fields they name rather than hold: modes, TLS, payloads.
func (o *loadOptions) readFlags() error {
	cfg := &o.cfg
	mode, err := parseSecurity("security", o.security)
	if err != nil {
		return err
	}
	cfg.Security = mode
	switch o.enc {
	case "cl100k", "cl100k_base":
		cfg.Encoding = tokennative.Cl100k
	case "o200k", "o200k_base":
		cfg.Encoding = tokennative.O200k
	default:
		return usagef("--encoding must be cl100k or o200k, not %q", o.enc)
	}
	if o.algo != bench.AlgorithmM2M && o.algo != bench.AlgorithmTokenNative {
		return usagef("--algo must be m2m or tokennative, not %q", o.algo)
	}
	cfg.Algorithm = o.algo
	if o.plotOut != "" && !strings.HasSuffix(o.plotOut, ".svg") && !strings.HasSuffix(o.plotOut, ".png") {
		return usagef("--plot file must end in .svg or .png")
	}
	if (o.cpuProfile != "" || o.memProfile != "") && cfg.Target != "" && cfg.ProfileRun == bench.RunM2M {
		return usagef("--cpuprofile and --memprofile profile this process; the daemon at --url is elsewhere")
	}
	if err := checkWritable(map[string]string{"json": o.jsonOut, "plot": o.plotOut, "cpuprofile": o.cpuProfile, "memprofile": o.memProfile}); err != nil {
		return err
	}
	if cfg.Target != "" {
		if cfg.TLS, err = targetTLS("url", cfg.Target, o.pin, o.caFile, o.insecure); err != nil {
			return err
		}
	}
	if strings.HasPrefix(cfg.NATSURL, "tls://") {
		if cfg.NATSTLS, err = targetTLS("nats-url", cfg.NATSURL, o.pin, o.caFile, o.insecure); err != nil {
			return err
		}
	}
	if o.corpus != "" {
		cfg.Payloads, err = bench.LoadCorpus(o.corpus)
		return err
	}
	p, err := bench.BuiltinPayload(o.payload)
	if err != nil {
		return usagef("%v", err)
	}
	cfg.Payloads = []bench.Payload{p}
	return nil
}

// openProfiles creates the --cpuprofile and --memprofile files; closeAll
// closes those it opened.
func (o *loadOptions) openProfiles() (closeAll func(), err error) {
	var files []*os.File
	closeAll = func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, p := range []struct {
		path string
		w    *io.Writer
	}{{o.cpuProfile, &o.cfg.CPUProfile}, {o.memProfile, &o.cfg.MemProfile}} {
		if p.path == "" {
			continue
		}
		f, err := os.Create(p.path)
		if err != nil {
			closeAll()
			return nil, err
		}
		files = append(files, f)
		*p.w = f
	}
	return closeAll, nil
}

// loadRuns is how many runs cfg asks for: the M2M run and each it is
// compared with, as many times as it is repeated.
func loadRuns(cfg bench.LoadConfig) int64 {
	runs := 1
	for _, on := range []bool{cfg.Baseline, cfg.Echo, cfg.Compare != ""} {
		if on {
			runs++
		}
	}
	return int64(runs * max(cfg.Repeat, 1))
}

// writeReport prints rep's table and writes the --json and --plot files.
func (o *loadOptions) writeReport(rep *bench.LoadReport, stdout io.Writer) error {
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if o.jsonOut != "" {
		if err := writeFileWith(o.jsonOut, rep.WriteJSON); err != nil {
			return err
		}
	}
	if o.plotOut != "" {
		return rep.PlotLoad(o.plotOut)
	}
	return nil
}

func runBenchCodec(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench codec", "bench codec [flags]\n\nEncodes every JSON file of a corpus folder in every wire form (raw JSON, gzip+Base64,\nBrotli+Base64, zstd, M2M v1 text and binary, TokenNative text and binary per tokenizer),\nchecks each decodes back byte for byte, and reports bytes, cl100k tokens and\nencode/decode times per size class.", stderr)
	var (
		corpus, csvOut, jsonOut, plotOut string
		minTime                          time.Duration
		markdown                         bool
	)
	fs.StringVar(&corpus, "corpus", "testdata/corpus", "`folder` of JSON documents (searched recursively)")
	fs.DurationVar(&minTime, "min-time", bench.DefaultMinTime, "time each encode and decode over at least this long")
	fs.StringVar(&csvOut, "csv", "", "write one line per document and form to this CSV `file`")
	fs.StringVar(&jsonOut, "json", "", "write every row and the summary to this JSON `file`")
	fs.StringVar(&plotOut, "plot", "", "draw bytes and tokens per size class into this `file` (.svg or .png)")
	fs.BoolVar(&markdown, "markdown", false, "print the tables in Markdown")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if minTime <= 0 || minTime > time.Minute {
		return usagef("--min-time must be above 0 and at most 1m")
	}
	if plotOut != "" && !strings.HasSuffix(plotOut, ".svg") && !strings.HasSuffix(plotOut, ".png") {
		return usagef("--plot file must end in .svg or .png")
	}
	if err := checkWritable(map[string]string{"csv": csvOut, "json": jsonOut, "plot": plotOut}); err != nil {
		return err
	}
	payloads, err := bench.LoadCorpus(corpus)
	if err != nil {
		return err
	}
	cfg := bench.CodecConfig{Payloads: payloads, MinTime: minTime}
	if bar := newBar(stderr, int64(len(payloads)), "codec"); bar != nil {
		cfg.Progress = func(done, _ int) { _ = bar.Set(done) }
		defer bar.Clear()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunCodec(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	write := rep.WriteTable
	if markdown {
		write = rep.WriteMarkdown
	}
	if err := write(stdout); err != nil {
		return err
	}
	if csvOut != "" {
		if err := writeFileWith(csvOut, rep.WriteCSV); err != nil {
			return err
		}
	}
	if jsonOut != "" {
		if err := writeFileWith(jsonOut, rep.WriteJSON); err != nil {
			return err
		}
	}
	if plotOut != "" {
		return rep.PlotCodec(plotOut)
	}
	return nil
}

func runBenchConversation(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench conversation", "bench conversation --corpus DIR [flags]\n\nReplays each conversation folder of DIR (turn-01.json, turn-02.json, …) through a daemon:\na requester agent sends each turn, two provider agents answer with the assistant message the\nnext turn contains. Once with conversation deltas (feature delta) and once without (the\nbaseline); every request and response is checked byte for byte. Reports JSON and wire bytes\n(DATA messages, as the daemon counts them) per direction, the ratios, per-turn latency and CPU.\nWithout --target it starts a daemon in this process (loopback only).", stderr)
	var (
		cfg                                    bench.ConversationConfig
		pin, caFile, security, jsonOut, corpus string
		insecure                               bool
	)
	fs.StringVar(&corpus, "corpus", "testdata/corpus/conversations", "`folder` of conversation folders")
	fs.StringVar(&cfg.Target, "target", "", "daemon `URL` (quic://host:port, ws://host:port/m2m, wss://…); empty: start one in-process")
	fs.StringVar(&cfg.Transport, "transport", bench.TransportQUIC, "`transport` of the in-process daemon: quic, ws or wss")
	fs.StringVar(&pin, "pin", "", "SHA-256 `fingerprint` of the daemon's certificate (quic://, wss://); default: the development\ncertificate in ./certs when there is one")
	fs.StringVar(&caFile, "ca-file", "", "PEM `file` of CAs to verify the daemon at --target against")
	fs.BoolVar(&insecure, "insecure", false, "accept any certificate from the daemon at --target (development only)")
	fs.StringVar(&security, "security", "none", "frame security `mode`: none, hmac or aead")
	fs.BoolVar(&cfg.ProviderLeaves, "provider-leaves", false, "close the provider of the first conversation in its middle: every turn must still complete, with one full resend")
	fs.DurationVar(&cfg.TurnTimeout, "timeout", bench.DefaultTurnTimeout, "give up on a turn after this")
	fs.StringVar(&jsonOut, "json", "", "write every figure to this JSON `file`")
	alias(fs, "url", "target")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	mode, err := parseSecurity("security", security)
	if err != nil {
		return err
	}
	cfg.Security, cfg.Corpus = mode, corpus
	if err := checkWritable(map[string]string{"json": jsonOut}); err != nil {
		return err
	}
	if cfg.Target != "" {
		if cfg.TLS, err = targetTLS("target", cfg.Target, pin, caFile, insecure); err != nil {
			return err
		}
	}
	cfg.CommandLine = "m2md bench conversation " + strings.Join(args, " ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunConversation(ctx, cfg)
	if err != nil {
		return err
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if jsonOut != "" {
		if err := writeFileWith(jsonOut, rep.WriteJSON); err != nil {
			return err
		}
	}
	if err := rep.Check(); err != nil {
		return err
	}
	return nil
}

// targetTLS verifies the daemon at target (given with --flag): against pin,
// the CAs in caFile, nothing (insecure), or by default the local development
// daemon's certificate in certs.DefaultDevDir, as the demo finds it.
func targetTLS(flag, target, pin, caFile string, insecure bool) (*tls.Config, error) {
	if pin == "" && caFile == "" && !insecure && !strings.HasPrefix(target, "ws://") {
		dir, err := certs.DefaultDevDir()
		if err != nil {
			return nil, usagef("--%s %s needs its server's certificate: --pin FINGERPRINT ('m2md serve' prints its own), --ca-file or --insecure (%v)", flag, target, err)
		}
		fp, err := certFingerprint(filepath.Join(dir, certs.DevCertFile))
		if err != nil {
			return nil, usagef("--%s %s needs its server's certificate: --pin FINGERPRINT ('m2md serve' prints its own), --ca-file or --insecure; there is no development certificate in %s to pin", flag, target, dir)
		}
		pin = fp
	}
	tc, err := certs.ClientTLSConfig(certs.ClientOptions{PinSHA256: pin, CAFile: caFile, InsecureSkipVerify: insecure})
	if err != nil {
		return nil, usagef("%v", err)
	}
	return tc, nil
}

func runBenchTable(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench table", "bench table [--plot FILE.png] FILE.json...\n\nPrints one Markdown table row per report written by 'm2md bench load --json'.", stderr)
	plotOut := fs.String("plot", "", "also draw the M2M/relay ratios of the reports with a baseline into this `file` (.svg or .png)")
	perRep := fs.Bool("repetitions", false, "one row per repetition (reports made with --repeat), with each run's CPU wait")
	if err := fs.Parse(args); err != nil {
		return flagError(fs, err)
	}
	if fs.NArg() == 0 {
		return usagef("name at least one report")
	}
	if *plotOut != "" && !strings.HasSuffix(*plotOut, ".svg") && !strings.HasSuffix(*plotOut, ".png") {
		return usagef("--plot file must end in .svg or .png")
	}
	if err := checkWritable(map[string]string{"plot": *plotOut}); err != nil {
		return err
	}
	var reps []*bench.LoadReport
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		rep, err := bench.ReadLoadReport(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		reps = append(reps, rep)
	}
	write := bench.WriteLoadMarkdown
	if *perRep {
		write = bench.WriteRepetitionsMarkdown
	}
	if err := write(stdout, reps); err != nil {
		return err
	}
	if *plotOut != "" {
		return bench.PlotLoadRatios(*plotOut, reps)
	}
	return nil
}

// newBar returns a progress bar on stderr when it is a terminal, else nil:
// logs and pipes get no control characters.
func newBar(stderr io.Writer, max int64, what string) *progressbar.ProgressBar {
	if !isTerminal(stderr) {
		return nil
	}
	return progressbar.NewOptions64(max,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetPredictTime(true),
	)
}

// checkWritable fails, naming the flag, when a file an output flag names
// could not be written: found before a run of minutes, not after it.
func checkWritable(files map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(files)) {
		path := files[name]
		if path == "" {
			continue
		}
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return fmt.Errorf("--%s %s is a folder, not a file", name, path)
		}
		f, err := os.CreateTemp(filepath.Dir(path), ".m2md-write-check-*")
		if err != nil {
			return fmt.Errorf("--%s %s cannot be written: %v", name, path, err)
		}
		f.Close()
		os.Remove(f.Name())
	}
	return nil
}

// writeFileWith writes what write produces to path, only if it succeeds.
func writeFileWith(path string, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
