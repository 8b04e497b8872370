package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/m2md/m2md/internal/bench"
)

// openAIFlags names the flag of each OpenAIConfig field, for its errors.
var openAIFlags = map[string]string{
	"URL": "url", "Compare": "compare", "Connections": "connections", "Rate": "rate", "MaxInFlight": "max-in-flight",
	"Duration": "duration", "Warmup": "warmup", "Slice": "slice", "Timeout": "timeout", "MaxResponseBytes": "max-response-bytes",
}

func runBenchOpenAI(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench openai", "bench openai [flags]\n\nLoads an OpenAI-compatible chat completions endpoint (m2md serve's, a provider's, another\ngateway's) and prints latency percentiles, throughput and errors. With --compare, a second\nendpoint takes turns with the first in the same run, and the ratios are printed.", stderr)
	var (
		cfg                   bench.OpenAIConfig
		corpus, file, payload string
		jsonOut, keyEnv       string
	)
	fs.StringVar(&cfg.URL, "url", bench.DefaultOpenAIURL, "base `URL` of the endpoint, as the SDKs take it (requests go to URL/chat/completions)")
	fs.StringVar(&cfg.Compare, "compare", "", "base `URL` of a second endpoint to run in the same run, in alternating slices, with the ratios")
	fs.StringVar(&cfg.APIKey, "api-key", "", "`key` sent as a bearer token (--api-key-env keeps it out of the process list)")
	fs.StringVar(&keyEnv, "api-key-env", "", "environment `variable` holding the key sent as a bearer token")
	fs.StringVar(&cfg.CompareAPIKey, "compare-api-key", "", "`key` for --compare, if not --api-key")
	fs.StringVar(&corpus, "corpus", "", "`folder` whose chat completion requests (*.json) are sent in turn, such as testdata/corpus")
	fs.StringVar(&file, "file", "", "`file` of requests: one JSON document, or one request a line")
	fs.StringVar(&payload, "payload", bench.Size1KB, "built-in chat request `size` when neither --corpus nor --file: "+strings.Join(bench.BuiltinSizes(), ", "))
	fs.StringVar(&cfg.Model, "model", "", "`model` to put in every request instead of its own")
	fs.BoolVar(&cfg.Stream, "stream", false, "ask for streamed answers and measure the time to the first chunk too")
	fs.BoolVar(&cfg.Traced, "traced", false, "send every request with a sampled W3C traceparent of its own: against an endpoint that records traces, what tracing every request costs")
	fs.IntVar(&cfg.Connections, "connections", bench.DefaultOpenAIConnections, "closed loop: `requests` in flight, one per connection; open loop: the most connections per endpoint")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: `requests` per second on a fixed schedule, latency from each one's intended time (0: closed loop)")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", bench.DefaultMaxInFlight, "open loop: the most `requests` waiting for answers; beyond it sending waits, and the wait counts")
	fs.DurationVar(&cfg.Duration, "duration", bench.DefaultDuration, "measured `time` per endpoint")
	fs.DurationVar(&cfg.Warmup, "warmup", bench.DefaultWarmup, "`time` sent but not measured, per endpoint, first (0: none)")
	fs.DurationVar(&cfg.Slice, "slice", bench.DefaultSlice, "with --compare: each endpoint's `turn`")
	fs.DurationVar(&cfg.Timeout, "timeout", bench.DefaultOpenAITimeout, "give up on a request without its full answer after this")
	fs.Int64Var(&cfg.MaxResponseBytes, "max-response-bytes", bench.DefaultMaxResponseBytes, "the largest answer `bytes` accepted")
	fs.StringVar(&jsonOut, "json", "", "write every figure to this JSON `file` (- for stdout, instead of the table)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Zero in the library means the default; here it was asked for.
	if cfg.Warmup == 0 {
		cfg.Warmup = -1 // none
	}
	switch {
	case cfg.Connections < 1:
		return usagef("--connections must be at least 1")
	case cfg.MaxInFlight < 1:
		return usagef("--max-in-flight must be at least 1")
	case cfg.Duration <= 0:
		return usagef("--duration must be above 0")
	case cfg.Slice <= 0:
		return usagef("--slice must be above 0")
	case cfg.Timeout <= 0:
		return usagef("--timeout must be above 0")
	case cfg.MaxResponseBytes < 1:
		return usagef("--max-response-bytes must be at least 1")
	}
	if keyEnv != "" {
		if cfg.APIKey != "" {
			return usagef("give --api-key or --api-key-env, not both")
		}
		if cfg.APIKey = os.Getenv(keyEnv); cfg.APIKey == "" {
			return usagef("--api-key-env %s: the variable is empty or not set", keyEnv)
		}
	}
	if corpus != "" && file != "" {
		return usagef("give --corpus or --file, not both")
	}
	if jsonOut != "-" {
		if err := checkWritable(map[string]string{"json": jsonOut}); err != nil {
			return err
		}
	}
	var err error
	switch {
	case corpus != "":
		all, err := bench.LoadCorpus(corpus)
		if err != nil {
			return err
		}
		if cfg.Requests = bench.ChatRequests(all); len(cfg.Requests) == 0 {
			return fmt.Errorf("--corpus %s holds no chat completion request (a JSON object with \"messages\")", corpus)
		}
	case file != "":
		if cfg.Requests, err = bench.LoadRequests(file); err != nil {
			return err
		}
	default:
		p, err := bench.BuiltinPayload(payload)
		if err != nil {
			return usagef("--payload: %v", err)
		}
		cfg.Requests = []bench.Payload{p}
	}
	cfg.CommandLine = "m2md bench openai " + strings.Join(redactKeys(args), " ")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunOpenAI(ctx, cfg)
	var ce *bench.OpenAIConfigError
	if errors.As(err, &ce) && openAIFlags[ce.Field] != "" {
		return usagef("--%s %s", openAIFlags[ce.Field], ce.Reason)
	}
	if err != nil {
		return err
	}
	switch jsonOut {
	case "-":
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
	case "":
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
	default:
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
		if err := writeFileWith(jsonOut, rep.WriteJSON); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return rep.Check()
}

// redactKeys hides API keys from the command line the report records.
func redactKeys(args []string) []string {
	out := make([]string, len(args))
	hide := false
	for i, a := range args {
		switch {
		case hide:
			a, hide = "REDACTED", false
		case strings.HasPrefix(strings.TrimLeft(a, "-"), "api-key") || strings.HasPrefix(strings.TrimLeft(a, "-"), "compare-api-key"):
			if name, _, ok := strings.Cut(a, "="); ok {
				a = name + "=REDACTED"
			} else {
				hide = true
			}
		}
		out[i] = a
	}
	return out
}
