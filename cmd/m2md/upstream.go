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
		uf        upstreamFlags
		adminAddr = fs.String("admin-addr", "", "TCP `address` for /healthz and /metrics (off when empty or \"-\")")
		pprofOn   = fs.Bool("pprof", false, "serve Go's profiles under /debug/pprof/ on --admin-addr")
	)
	flags := uf.settings("", defaultUpstreamBaseURL)
	flags.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := uf.config()
	if err != nil {
		return err
	}
	adminOn := *adminAddr != "" && *adminAddr != "-"
	if *pprofOn && !adminOn {
		return usagef("--pprof serves the profiles on --admin-addr, which is off")
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
	up, err := uf.upstream(cfg, flags)
	if err != nil {
		return err
	}
	defer up.Close()
	opt, err := af.options()
	if err != nil {
		return err
	}
	opt.WaitForDaemon, opt.Logger = true, logger

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if opt, err = uf.agentOptions(ctx, up, cfg, opt, flags); err != nil {
		return err
	}
	var connected atomic.Pointer[client.Client]
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

// defaultUpstreamBaseURL is m2md upstream's --base-url: Ollama's API on
// this machine.
const defaultUpstreamBaseURL = "http://127.0.0.1:11434/v1"

// upstreamFlags are the flags of a provider agent in front of an
// OpenAI-compatible server: m2md upstream's, and m2md serve's for the one
// it runs in process (the same flags, prefixed "upstream-"). Written once,
// so the flags, their help, their checks and the translation of the
// upstream's Config errors agree in both commands.
type upstreamFlags struct {
	prefix string // set by settings
	cfg    upstream.Config
	models string
	bases  int
	keyEnv string
}

// settings are the flags, each with the upstream.Config field it sets,
// named with prefix; defaultBaseURL is --base-url's default (empty: the
// flag turns the agent on).
func (u *upstreamFlags) settings(prefix, defaultBaseURL string) settings {
	u.prefix = prefix
	baseURL := "the server's OpenAI API root `URL`"
	if defaultBaseURL == "" {
		baseURL += "; when set, a provider agent for the server's models runs in this process (docs/openai.md)"
	}
	s := settings{
		{"upstream.Config.Models", "models", strVar(&u.models, ""), "comma-separated `models` to serve (default: the server's GET /models)"},
		{"upstream.Config.BaseURL", "base-url", strVar(&u.cfg.BaseURL, defaultBaseURL), baseURL},
		{"", "api-key-env", strVar(&u.keyEnv, ""), "environment `variable` holding the server's API key (sent as Bearer; never logged)"},
		{"upstream.Config.Concurrency", "concurrency", intVar(&u.cfg.Concurrency, upstream.DefaultConcurrency), "requests in flight at the server at most"},
		{"upstream.Config.FirstByteTimeout", "first-byte-timeout", durationVar(&u.cfg.FirstByteTimeout, upstream.DefaultFirstByteTimeout), "wait this long at most for the server's response headers"},
		{"upstream.Config.ChunkTimeout", "chunk-timeout", durationVar(&u.cfg.ChunkTimeout, upstream.DefaultChunkTimeout), "wait this long at most for each next piece of an answer"},
		{"", "conversation-bases", sizeVar(&u.bases, client.DefaultConversationBases, 0), "bytes of requests and answers kept to rebuild the conversation deltas requesters send (docs/operations.md, \"What the agents keep\"); 0 keeps none: every delta is answered base_missing and sent again whole"},
	}
	for i := range s {
		s[i].flag = prefix + s[i].flag
	}
	return s
}

// name is the flag f as the user writes it.
func (u *upstreamFlags) name(f string) string { return "--" + u.prefix + f }

// config is the upstream.Config the parsed flags describe, the API key
// read from the variable --api-key-env names. Its errors name the flags.
func (u *upstreamFlags) config() (upstream.Config, error) {
	cfg := u.cfg
	if cfg.Concurrency <= 0 {
		return cfg, usagef("%s must be at least 1, not %d", u.name("concurrency"), cfg.Concurrency)
	}
	if u.keyEnv != "" {
		cfg.APIKey = os.Getenv(u.keyEnv)
		if cfg.APIKey == "" {
			return cfg, usagef("%s %s: the variable is empty or not set", u.name("api-key-env"), u.keyEnv)
		}
	}
	cfg.Models = splitList(u.models)
	return cfg, nil
}

// upstream makes the upstream cfg describes; its errors name the flags
// of flags, the command's table.
func (u *upstreamFlags) upstream(cfg upstream.Config, flags settings) (*upstream.Upstream, error) {
	up, err := upstream.New(cfg)
	if err != nil {
		return nil, usagef("%v", flags.translate(err))
	}
	return up, nil
}

// agentOptions are the options of the provider agent that serves up (made
// of cfg): opt (who the agent is and how it reaches the daemon) with up as
// Handler, its models (cfg's, or else the server's GET /models, asked with
// ctx), reconnection, and the budgets of a provider.
func (u *upstreamFlags) agentOptions(ctx context.Context, up *upstream.Upstream, cfg upstream.Config, opt client.Options, flags settings) (client.Options, error) {
	opt.Handler = up
	opt.Reconnect = true
	opt.MaxConcurrentHandlers = max(client.DefaultMaxConcurrentHandlers, cfg.Concurrency)
	// A provider only: it keeps bases for the deltas it is sent, and no
	// history of requests, which it never sends.
	opt.ConversationBases, opt.ConversationHistory = conversationBudget(u.bases), -1
	opt.CompressionQuality, opt.CompressFrom = openai.CompressionQuality, openai.CompressFrom
	opt.Models = cfg.Models
	if len(opt.Models) == 0 {
		var err error
		if opt.Models, err = up.Models(ctx); err != nil {
			return opt, fmt.Errorf("%s not set, and the server did not list its models: %w", u.name("models"), flags.translate(err))
		}
	}
	return opt, nil
}
