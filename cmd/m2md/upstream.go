package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/dustin/go-humanize/english"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/internal/admin"
	"github.com/m2md/m2md/openai"
	"github.com/m2md/m2md/openai/upstream"
)

func runUpstream(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("upstream", "upstream --base-url URL [flags]\n\nA provider agent in front of an OpenAI-compatible server (vLLM, llama.cpp, Ollama,\nLM Studio, OpenRouter, OpenAI): requests routed to its models are POSTed to the\nserver's /chat/completions or /embeddings and its answers relayed byte for byte.", stderr)
	af := registerAgentFlags(fs, "upstream", "info")
	var (
		cfg       upstream.Config
		bases     int
		models    string
		keyEnv    = fs.String("api-key-env", "", "environment `variable` holding the server's API key (sent as Bearer; never logged)")
		adminAddr = fs.String("admin-addr", "", "TCP `address` for /healthz and /metrics (off when empty or \"-\")")
		pprofOn   = fs.Bool("pprof", false, "serve Go's profiles under /debug/pprof/ on --admin-addr")
	)
	flags := upstreamSettings(&cfg, &models, &bases)
	flags.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.Concurrency <= 0 {
		return usagef("--concurrency must be at least 1, not %d", cfg.Concurrency)
	}
	adminOn := *adminAddr != "" && *adminAddr != "-"
	if *pprofOn && !adminOn {
		return usagef("--pprof serves the profiles on --admin-addr, which is off")
	}
	if *keyEnv != "" {
		cfg.APIKey = os.Getenv(*keyEnv)
		if cfg.APIKey == "" {
			return usagef("--api-key-env %s: the variable is empty or not set", *keyEnv)
		}
	}
	logger, err := af.log.logger(flags.logWriter(stderr))
	if err != nil {
		return err
	}
	cfg.Logger = logger
	traces, err := startTraces("m2md-upstream", logger)
	if err != nil {
		return err
	}
	defer traces.stop()
	cfg.TracerProvider = traces.Provider
	cfg.Models = splitList(models)
	up, err := upstream.New(cfg)
	if err != nil {
		return usagef("%v", flags.translate(err))
	}
	defer up.Close()
	opt, err := af.options()
	if err != nil {
		return err
	}
	opt.Reconnect, opt.WaitForDaemon, opt.Logger = true, true, logger
	opt.MaxConcurrentHandlers = max(client.DefaultMaxConcurrentHandlers, cfg.Concurrency)
	// A provider only: it keeps bases for the deltas it is sent, and no
	// history of requests, which it never sends.
	opt.ConversationBases, opt.ConversationHistory = conversationBudget(bases), -1
	opt.CompressionQuality = openai.CompressionQuality

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opt.Models = cfg.Models
	if len(opt.Models) == 0 {
		if opt.Models, err = up.Models(ctx); err != nil {
			return flags.translate(err)
		}
	}
	var connected atomic.Pointer[client.Client]
	opt.Handler = up
	if adminOn {
		stopAdmin, err := serveUpstreamAdmin(*adminAddr, *pprofOn, up, &opt, &connected, logger)
		if err != nil {
			return err
		}
		defer stopAdmin()
	}
	c, err := client.Dial(ctx, af.url, opt)
	if err != nil {
		return af.dialError(err)
	}
	defer c.Close()
	connected.Store(c)
	s := c.Session()
	logger.Info().Str("agent", s.AgentID).Str("transport", s.Transport).Str("security", s.Params.SecurityMode.String()).
		Str("upstream", up.URL()).Strs("models", opt.Models).Msg("upstream agent connected")
	fmt.Fprintf(stdout, "upstream agent %s serving %s from %s; Ctrl-C to stop\n", s.AgentID, english.Plural(len(opt.Models), "model", "models"), up.URL())
	select {
	case <-ctx.Done():
	case <-c.Done():
		return agentEnded(c.Err(), s.AgentID)
	}
	return nil
}

// serveUpstreamAdmin starts the upstream agent's admin endpoint on addr:
// its metrics (the handler opt gets is up, counted per model of
// opt.Models), /healthz (503 until the agent is connected) and, with
// pprofOn, Go's profiles.
func serveUpstreamAdmin(addr string, pprofOn bool, up *upstream.Upstream, opt *client.Options, connected *atomic.Pointer[client.Client], logger zerolog.Logger) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(admin.BuildInfo(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counted, err := upstream.Instrument(up, reg, opt.Models)
	if err != nil {
		return nil, err
	}
	opt.Handler = counted
	mux := admin.Mux(reg, admin.Options{Pprof: pprofOn, Health: func() (int, any) {
		c := connected.Load()
		if c == nil {
			return http.StatusServiceUnavailable, map[string]any{"status": "connecting"}
		}
		select {
		case <-c.Done():
			return http.StatusServiceUnavailable, map[string]any{"status": "stopped", "agent": c.AgentID()}
		default:
		}
		return http.StatusOK, map[string]any{"status": "ok", "agent": c.AgentID(), "in_flight": counted.InFlight()}
	}})
	bound, stop, err := admin.Start(addr, mux)
	if err != nil {
		return nil, usagef("--admin-addr %s: %v", addr, err)
	}
	logger.Info().Str("admin", "http://"+bound.String()).Msg("admin endpoint listening")
	return stop, nil
}

// upstreamSettings are m2md upstream's flags that set upstream.Config (and
// the agent's conversation bases), each with the field it sets.
func upstreamSettings(cfg *upstream.Config, models *string, bases *int) settings {
	return settings{
		{"upstream.Config.Models", "models", strVar(models, ""), "comma-separated `models` to serve (default: the server's GET /models)"},
		{"upstream.Config.BaseURL", "base-url", strVar(&cfg.BaseURL, "http://127.0.0.1:11434/v1"), "the server's OpenAI API root `URL`"},
		{"upstream.Config.Concurrency", "concurrency", intVar(&cfg.Concurrency, upstream.DefaultConcurrency), "requests in flight at the server at most"},
		{"upstream.Config.FirstByteTimeout", "first-byte-timeout", durationVar(&cfg.FirstByteTimeout, upstream.DefaultFirstByteTimeout), "wait this long at most for the server's response headers"},
		{"upstream.Config.ChunkTimeout", "chunk-timeout", durationVar(&cfg.ChunkTimeout, upstream.DefaultChunkTimeout), "wait this long at most for each next piece of an answer"},
		{"", "conversation-bases", sizeVar(bases, client.DefaultConversationBases, 0), "bytes of requests and answers kept to rebuild the conversation deltas requesters send (docs/operations.md, \"What the agents keep\"); 0 keeps none: every delta is answered base_missing and sent again whole"},
	}
}
