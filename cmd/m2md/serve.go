package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/peterbourgon/ff/v3"
	"github.com/rs/zerolog"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/openai/ingress"
	"github.com/m2md/m2md/security"
)

// serveOptions are what m2md serve's flags set: the daemon's Config, the
// values read into it after parsing, the OpenAI endpoint's settings and
// those of the provider agent serve may run in process (--upstream-*).
type serveOptions struct {
	cfg                                   daemon.Config
	minSecurity, secretsFile, disableFeat string
	routes, natsURLs, clusterPwd          string
	routeCert, routeKey, routeCA          string
	openAIAddr, openAIKeys                string
	openAIHist, openAIBodyBudget          int
	openAILimits                          ingress.Limits
	upstream                              upstreamFlags
	upstreamOrg                           string
	log                                   *logFlags
}

// settings are m2md serve's flags, each with the Config field it sets.
func (o *serveOptions) settings() settings {
	cfg, cl := &o.cfg, &o.cfg.Cluster
	defaultCertDir, _ := certs.DefaultDevDir() // empty: daemon.New says why
	s := settings{
		{"daemon.Config.QUICAddr", "quic-addr", strVar(&cfg.QUICAddr, daemon.DefaultQUICAddr), "UDP `address` for QUIC (\"-\" disables)"},
		{"daemon.Config.WSAddr", "ws-addr", strVar(&cfg.WSAddr, daemon.DefaultWSAddr), "TCP `address` for ws:// (\"-\" disables)"},
		{"daemon.Config.WSSAddr", "wss-addr", strVar(&cfg.WSSAddr, ""), "TCP `address` for wss:// (TLS); off when empty"},
		{"daemon.Config.AllowInsecureWS", "allow-insecure-ws", boolVar(&cfg.AllowInsecureWS), "let --ws-addr (plain ws://) listen beyond loopback although --org-secrets-file is set"},
		{"daemon.Config.WSPath", "ws-path", strVar(&cfg.WSPath, daemon.DefaultWSPath), "HTTP `path` WebSocket clients connect to"},
		{"daemon.Config.AdminAddr", "admin-addr", strVar(&cfg.AdminAddr, daemon.DefaultAdminAddr), "TCP `address` for /healthz, /metrics and the status page (\"-\" disables)"},
		{"daemon.Config.Pprof", "pprof", boolVar(&cfg.Pprof), "serve Go's profiles under /debug/pprof/ on --admin-addr"},
		{"daemon.Config.CertFile", "tls-cert", strVar(&cfg.CertFile, ""), "certificate `file` (PEM); default: a development certificate in --cert-dir"},
		{"daemon.Config.KeyFile", "tls-key", strVar(&cfg.KeyFile, ""), "private key `file` (PEM) for --tls-cert"},
		{"daemon.Config.CertDir", "cert-dir", strVar(&cfg.CertDir, defaultCertDir), "`folder` where the development certificate is made and reused; the agent commands pin it from this default"},
		{"daemon.Config.MinSecurity", "min-security", strVar(&o.minSecurity, "none"), "weakest frame security `mode` a client may choose: none, hmac or aead"},
		{"daemon.Config.OrgSecrets", "org-secrets-file", strVar(&o.secretsFile, ""), "`file` of 'org hex-secret' lines; when set, agents must authenticate"},
		{"", "openai-addr", strVar(&o.openAIAddr, ingress.DefaultAddr), "TCP `address` of the OpenAI-compatible HTTP endpoint (\"-\" disables)"},
		{"ingress.Config.Keys", "openai-keys-file", strVar(&o.openAIKeys, ""), "`file` of 'KEY AGENT_ID [ORG] [name=N rpm=N tpm=N concurrent=N models=a,b]' lines: bearer keys of the OpenAI endpoint and their limits (docs/openai.md); reloaded on SIGHUP and on change; required with --org-secrets-file"},
		{"ingress.Limits.MaxConns", "openai-max-conns", intVar(&o.openAILimits.MaxConns, ingress.DefaultMaxConns), "connections the OpenAI endpoint holds open at once (one more: 503 too_many_connections); -1: no bound"},
		{"ingress.Limits.MaxConnsPerIP", "openai-max-conns-per-ip", intVar(&o.openAILimits.MaxConnsPerIP, ingress.DefaultMaxConnsPerIP), "connections of one client IP (an IPv6 client's /64) at the OpenAI endpoint (one more: 429 too_many_connections); -1: no bound"},
		{"ingress.Limits.MaxBodyBytes", "openai-body-budget", limitVar(&o.openAIBodyBudget, ingress.DefaultMaxBodyBytes), "request-body bytes the OpenAI endpoint holds at once, all requests together (over it: 503 server_busy), one client IP at most half (over it: 429 server_busy); -1: no bound"},
		{"", "openai-conversation-history", sizeVar(&o.openAIHist, client.DefaultConversationHistory, 0), "bytes of past chat requests and answers the OpenAI endpoint keeps per key, to send the next turns of conversations as deltas (docs/operations.md, \"What the agents keep\"); 0 keeps none"},
		{"daemon.Config.DisableFeatures", "disable-features", strVar(&o.disableFeat, ""), "comma-separated protocol `features` not to offer (docs/protocol.md §3.6)"},
		{"daemon.Config.MaxSessions", "max-sessions", intVar(&cfg.MaxSessions, daemon.DefaultMaxSessions), "concurrent sessions before HELLO gets SERVER_BUSY"},
		{"daemon.Config.MaxPayload", "max-payload", sizeVar(&cfg.MaxPayload, negotiate.MaxPayloadLimit, negotiate.MaxPayloadLimit), "largest DATA message, e.g. 1MiB or 65536 (at most 16MiB)"},
		{"daemon.Config.MaxOutstanding", "max-outstanding", intVar(&cfg.MaxOutstanding, daemon.DefaultMaxOutstanding), "requests in flight per session"},
		{"daemon.Config.AffinityEntries", "affinity-entries", intVar(&cfg.AffinityEntries, daemon.DefaultAffinityEntries), "conversation documents whose provider the daemon remembers (feature delta, docs/protocol.md §4.3)"},
		{"daemon.Config.ReceiveBudget", "receive-budget", sizeVar(&cfg.ReceiveBudget, 0, 0), "bytes one connection's received messages may hold while read and routed (0: max payload + 512 + 1 MiB)"},
		{"daemon.Config.MessageTimeout", "message-timeout", durationVar(&cfg.MessageTimeout, daemon.DefaultMessageTimeout), "a message must arrive whole within this of its first byte"},
		{"daemon.Config.QUICIdleTimeout", "quic-idle-timeout", durationVar(&cfg.QUICIdleTimeout, daemon.DefaultQUICIdleTimeout), "close a QUIC connection silent this long (keep-alives every fifth of it); idle sessions only, see --busy-ping-after"},
		{"daemon.Config.BusyPingAfter", "busy-ping-after", durationVar(&cfg.BusyPingAfter, daemon.DefaultBusyPingAfter), "PING an agent that holds requests after this much silence from it"},
		{"daemon.Config.FailoverBytes", "failover-bytes", intVar(&cfg.FailoverBytes, daemon.DefaultFailoverBytes), "bound the copies of requests kept to deliver them again when their provider is lost before replying (-1: no failover)"},
		{"daemon.Config.BusyPongTimeout", "busy-pong-timeout", durationVar(&cfg.BusyPongTimeout, daemon.DefaultBusyPongTimeout), "close an agent that holds requests when nothing arrives this long after its PING (its requests fail over or end)"},
		{"daemon.Config.MaxHandshakes", "max-handshakes", intVar(&cfg.MaxHandshakes, daemon.DefaultMaxHandshakes), "WebSocket connections not yet through HELLO; more are closed at accept (-1: unlimited)"},
		{"daemon.Config.MaxHandshakesPerIP", "max-handshakes-per-ip", intVar(&cfg.MaxHandshakesPerIP, daemon.DefaultMaxHandshakesPerIP), "WebSocket connections not yet through HELLO from one source address (-1: unlimited)"},
		{"daemon.Config.MaxSessionsPerIP", "max-sessions-per-ip", intVar(&cfg.MaxSessionsPerIP, 0), "connections (handshaking or established) one source address may hold (0: no bound of its own, --max-sessions applies)"},
		{"daemon.Config.NewSessionsPerMinute", "new-sessions-per-minute", intVar(&cfg.NewSessionsPerMinute, daemon.DefaultNewSessionsPerMinute), "connections one source address may open per minute, after a burst of --max-sessions-per-ip, or --max-sessions (-1: unlimited)"},
		{"daemon.Config.MessagesPerMinute", "messages-per-minute", intVar(&cfg.MessagesPerMinute, 0), "messages one session may send per minute; more are refused with rate_limited; PING, PONG and CLOSE do not count (0: unlimited)"},
		{"daemon.Config.BytesPerSecond", "bytes-per-second", limitVar(&cfg.BytesPerSecond, 0), "bytes one session may send per second, e.g. 10MB; more are refused with rate_limited; PING, PONG and CLOSE do not count (0: unlimited)"},
		{"daemon.Config.SendQueueLen", "send-queue", intVar(&cfg.SendQueueLen, daemon.DefaultSendQueueLen), "messages queued per session before the slow-consumer policy applies"},
		{"daemon.Config.SlowConsumerGrace", "slow-consumer-grace", durationVar(&cfg.SlowConsumerGrace, daemon.DefaultSlowGrace), "how long a full send queue is tolerated before the session is closed"},
		{"daemon.Config.HelloTimeout", "hello-timeout", durationVar(&cfg.HelloTimeout, negotiate.HelloTimeout), "HELLO must arrive within this"},
		{"daemon.Config.SessionTimeout", "session-timeout", durationVar(&cfg.SessionTimeout, negotiate.DefaultSessionTimeout), "close a session silent this long (60s..1h)"},
		{"daemon.Config.PingInterval", "ping-interval", durationVar(&cfg.PingInterval, negotiate.DefaultPingInterval), "PING a session idle this long"},
		{"daemon.Config.PongTimeout", "pong-timeout", durationVar(&cfg.PongTimeout, negotiate.DefaultPongTimeout), "a PONG must arrive within this"},
		{"daemon.Config.ShutdownGrace", "shutdown-grace", durationVar(&cfg.ShutdownGrace, daemon.DefaultShutdownGrace), "on SIGINT/SIGTERM, let in-flight requests finish this long"},
		{"cluster.Config.Listen", "cluster-listen", strVar(&cl.Listen, ""), "`address` (host:port) of the embedded NATS route listener: joins this daemon to a cluster; beyond loopback it needs --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca (docs/operations.md)"},
		{"cluster.Config.Routes", "cluster-routes", strVar(&o.routes, ""), "comma-separated nats://host:port route `URLs` of the other daemons (with --cluster-listen)"},
		{"cluster.Config.User", "cluster-user", strVar(&cl.User, ""), "`user` every cluster route authenticates as (with --cluster-password-file): on loopback, or on top of --cluster-tls-*"},
		{"cluster.Config.Password", "cluster-password-file", strVar(&o.clusterPwd, ""), "`file` holding the cluster routes' password (kept out of flags so it never shows in a process listing)"},
		{"cluster.Config.Cert", "cluster-tls-cert", strVar(&o.routeCert, ""), "this node's certificate `file` (PEM; m2md cert node): mutual TLS on the routes, and the node's identity"},
		{"cluster.Config.Cert", "cluster-tls-key", strVar(&o.routeKey, ""), "private key `file` (PEM) for --cluster-tls-cert"},
		{"cluster.Config.CA", "cluster-tls-ca", strVar(&o.routeCA, ""), "CA `file` (PEM) the other nodes' route certificates must chain to (both directions)"},
		{"cluster.Config.Name", "cluster-name", strVar(&cl.Name, cluster.DefaultName), "cluster `name`; every node of one cluster uses the same"},
		// The OpenAI endpoint's agents carry the node id in theirs.
		{"cluster.Config.Node ingress.Config.Node", "cluster-node", strVar(&cl.Node, ""), "this node's `id` in the cluster (default: random at each start)"},
		{"cluster.Config.Inbox", "cluster-inbox", intVar(&cl.Inbox, cluster.DefaultInbox), "cluster `messages` waiting for this node before requests and replies from other nodes are answered queue_full; NATS holds as many again (at least 4096) before it drops; every node alike"},
		{"cluster.Config.InboxBytes", "cluster-inbox-bytes", sizeVar(&cl.InboxBytes, cluster.DefaultInboxBytes, 0), "bytes of cluster messages waiting for this node before requests and replies from other nodes are answered queue_full (their frames let go at once), e.g. 64MiB"},
		{"cluster.Config.URLs", "nats-url", strVar(&o.natsURLs, ""), "comma-separated nats:// or tls:// `URLs` of an existing NATS deployment to cluster over (instead of --cluster-listen); beyond loopback it needs TLS, --nats-creds or --nats-nkey, and the --cluster-tls-* files"},
		{"cluster.Config.CredsFile", "nats-creds", strVar(&cl.CredsFile, ""), "NATS credentials `file` for --nats-url"},
		{"cluster.Config.NkeyFile", "nats-nkey", strVar(&cl.NkeyFile, ""), "`file` holding this node's NATS nkey seed (SU…), for --nats-url"},
		{"cluster.Config.CAFile", "nats-ca", strVar(&cl.CAFile, ""), "CA `file` (PEM) trusted for --nats-url's TLS certificates"},
		{"", "upstream-org", strVar(&o.upstreamOrg, ""), "`org` of --org-secrets-file the in-process upstream agent (--upstream-base-url) authenticates with; required with both"},
	}
	return append(s, o.upstream.settings(upstreamPrefix, "")...)
}

func runServe(args []string, _ io.Reader, _ io.Writer, stderr io.Writer) error {
	fs := newFlagSet("serve", "serve [flags]\n\nEvery flag can also be set as an environment variable M2MD_<FLAG>\n(upper case, dashes as underscores) or in a config file (--config; one\n'flag value' per line). Precedence: flags, then environment, then file.", stderr)
	var o serveOptions
	flags := o.settings()
	fs.String("config", "", "config `file`: one 'flag value' pair per line, # comments")
	flags.register(fs)
	o.log = registerLogFlags(fs, "info")
	err := ff.Parse(fs, args,
		ff.WithEnvVarPrefix("M2MD"),
		ff.WithConfigFileFlag("config"),
		ff.WithConfigFileParser(ff.PlainParser),
	)
	if err != nil {
		return flagError(fs, err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (run 'm2md serve --help')", fs.Arg(0))
	}
	err = flags.translate(o.serve(flags, stderr))
	if errors.Is(err, daemon.ErrConfig) {
		return usagef("%v", err)
	}
	return err
}

// serve completes the Config from what the flags name (files, lists),
// checks the OpenAI endpoint's and the upstream agent's settings, and runs
// the daemon and the parts beside it until a signal or an error ends them.
// Its errors name Config fields; runServe shows them as flags.
func (o *serveOptions) serve(flags settings, stderr io.Writer) error {
	if err := o.readFlags(); err != nil {
		return err
	}
	keys, err := o.openAIKeyset()
	if err != nil {
		return err
	}
	upCfg, upOn, err := o.upstreamConfig()
	if err != nil {
		return err
	}
	logger, err := o.log.logger(flags.logWriter(stderr))
	if err != nil {
		return err
	}
	o.cfg.Logger = logger
	traces, err := startTraces("m2md-serve", logger)
	if err != nil {
		return err
	}
	defer traces.stop()
	o.cfg.TracerProvider = traces.Provider
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var prov *servedUpstream
	if upOn {
		// Before the daemon: a server that cannot say its models fails
		// the start before any port is bound.
		if prov, err = o.newServedUpstream(ctx, upCfg, flags, logger); err != nil {
			return err
		}
		defer prov.stop()
	}
	srv, err := daemon.New(o.cfg)
	if err != nil {
		return err
	}
	// SIGHUP (a service manager's reload) must never end the daemon: it
	// reloads --openai-keys-file when one is given (watchKeys), and is
	// otherwise logged as having nothing to reload.
	defer ignoreHUP(logger, enabledAddr(o.openAIAddr) && keys.Len() > 0)()
	if !enabledAddr(o.openAIAddr) && prov == nil {
		return srv.Run(ctx)
	}
	return o.runWithParts(ctx, srv, keys, prov, logger)
}

// readFlags sets the Config fields that flags name rather than hold: the
// security mode, files to read, comma-separated lists.
func (o *serveOptions) readFlags() error {
	cfg := &o.cfg
	var err error
	if cfg.MinSecurity, err = parseSecurity("min-security", o.minSecurity); err != nil {
		return err
	}
	if o.secretsFile != "" {
		if cfg.OrgSecrets, err = readOrgSecrets(o.secretsFile); err != nil {
			return err
		}
	}
	for _, f := range splitList(o.disableFeat) {
		cfg.DisableFeatures = append(cfg.DisableFeatures, negotiate.Feature(f))
	}
	cfg.Cluster.Routes = splitList(o.routes)
	cfg.Cluster.URLs = splitList(o.natsURLs)
	if o.clusterPwd != "" {
		b, err := os.ReadFile(o.clusterPwd)
		if err != nil {
			return fmt.Errorf("--cluster-password-file: %w", err)
		}
		cfg.Cluster.Password = strings.TrimSpace(string(b))
	}
	if o.routeCert != "" || o.routeKey != "" || o.routeCA != "" {
		if cfg.Cluster.Cert, cfg.Cluster.CA, err = cluster.LoadIdentity(o.routeCert, o.routeKey, o.routeCA); err != nil {
			return err
		}
	}
	return nil
}

// openAIKeyset checks the OpenAI endpoint's flags and reads its keys; nil
// when the endpoint is off or open.
func (o *serveOptions) openAIKeyset() (*ingress.Keys, error) {
	for _, f := range []struct {
		name string
		n    int
	}{{"--openai-max-conns", o.openAILimits.MaxConns}, {"--openai-max-conns-per-ip", o.openAILimits.MaxConnsPerIP}, {"--openai-body-budget", o.openAIBodyBudget}} {
		if f.n == 0 || f.n < -1 {
			return nil, usagef("%s must be at least 1, or -1 for no bound, not %d", f.name, f.n)
		}
	}
	if o.openAIBodyBudget > 0 && o.openAIBodyBudget < ingress.DefaultMaxBody {
		return nil, usagef("--openai-body-budget must be at least %s (one request body of the largest size), or -1 for no bound, not %s", formatBytes(ingress.DefaultMaxBody), formatBytes(o.openAIBodyBudget))
	}
	o.openAILimits.MaxBodyBytes = int64(o.openAIBodyBudget)
	if err := daemon.CheckListenAddr("--openai-addr", o.openAIAddr); err != nil {
		return nil, err
	}
	if !enabledAddr(o.openAIAddr) {
		return nil, nil
	}
	return loadOpenAIKeys(o.openAIKeys, o.cfg.OrgSecrets)
}

// runWithParts runs the daemon and, once it is ready, the parts of serve
// attached to it in process: the upstream agent (prov; nil without
// --upstream-base-url) first, so that the endpoint's first requests find
// its models, then the OpenAI endpoint (unless --openai-addr is off),
// until ctx ends, the daemon stops or the agent ends for good.
func (o *serveOptions) runWithParts(ctx context.Context, srv *daemon.Server, keys *ingress.Keys, prov *servedUpstream, logger zerolog.Logger) error {
	// The daemon runs until the ingress has let its requests finish, so
	// they are not cut off by the daemon's own shutdown.
	daemonCtx, stopDaemon := context.WithCancel(context.Background())
	defer stopDaemon()
	done, over := make(chan error, 1), make(chan struct{})
	go func() {
		done <- srv.Run(daemonCtx)
		close(over)
	}()
	select {
	case <-srv.Ready():
	case err := <-done:
		return err
	}
	// stopDaemonWith stops the daemon and waits for it; err, a part's
	// failure, wins over what the daemon's Run returns.
	stopDaemonWith := func(err error) error {
		stopDaemon()
		if derr := <-done; err == nil {
			return derr
		}
		return err
	}
	if prov != nil {
		if err := prov.attach(ctx, srv, over); err != nil {
			return stopDaemonWith(err)
		}
	}
	var edge *openAIEdge
	if enabledAddr(o.openAIAddr) {
		var err error
		if edge, err = startOpenAI(ctx, srv, o.cfg, o.openAIAddr, keys, o.openAILimits, conversationBudget(o.openAIHist), logger); err != nil {
			return stopDaemonWith(err)
		}
		if keys.Len() > 0 {
			edge.watchKeys(o.openAIKeys, o.cfg.OrgSecrets, logger.With().Str("component", "openai").Logger())
		}
	}
	select {
	case <-ctx.Done():
	case err := <-done:
		edge.stop(time.Second)
		return err
	case <-prov.done():
		edge.stop(time.Second)
		return stopDaemonWith(prov.ended())
	}
	// The endpoint's requests finish first, served by the agent still
	// attached; then the daemon lets the requests routed to the agent
	// finish (ShutdownGrace) before it closes the agent's session.
	// serve's deferred prov.stop closes its client after that.
	edge.stop(o.cfg.ShutdownGrace)
	return stopDaemonWith(nil)
}

func enabledAddr(a string) bool { return a != "" && a != "-" }

// ignoreHUP keeps SIGHUP from ending the process until the returned func
// is called; unless reloadable (another handler reloads), each is logged
// as having nothing to reload.
func ignoreHUP(log zerolog.Logger, reloadable bool) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			case <-hup:
				if !reloadable {
					log.Info().Msg("SIGHUP: nothing to reload (only --openai-keys-file is reloaded)")
				}
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		<-ended
	}
}

// readOrgSecrets reads "org hexsecret" lines. Secrets stay out of flags so
// they never show in a process listing.
func readOrgSecrets(path string) (map[string]security.Secret, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("org secrets: %w", err)
	}
	defer f.Close()
	secrets := make(map[string]security.Secret)
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		org, secretHex, ok := strings.Cut(text, " ")
		if !ok {
			return nil, fmt.Errorf("org secrets %s:%d: want 'org hex-secret'", path, line)
		}
		secret, err := hex.DecodeString(strings.TrimSpace(secretHex))
		if err != nil || len(secret) < 16 {
			return nil, fmt.Errorf("org secrets %s:%d: secret must be at least 16 bytes of hex", path, line)
		}
		secrets[org] = secret
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("org secrets: %w", err)
	}
	if len(secrets) == 0 {
		return nil, fmt.Errorf("org secrets %s: no secrets", path)
	}
	return secrets, nil
}

// logFlags are --log-level and --log-format, which every long-running
// command takes: one format rule for all of them (newLogger). level is the
// command's default: info for the daemon and the agents that keep running,
// warn for a command whose output is its report.
type logFlags struct{ level, format string }

func registerLogFlags(fs *flag.FlagSet, level string) *logFlags {
	l := &logFlags{}
	fs.StringVar(&l.level, "log-level", level, "log `level`: debug, info, warn or error")
	fs.StringVar(&l.format, "log-format", "auto", "log `format`: json, console, or auto (console on a terminal)")
	return l
}

// logger returns the logger the flags describe, writing to w.
func (l *logFlags) logger(w io.Writer) (zerolog.Logger, error) {
	return newLogger(l.level, l.format, w)
}

func newLogger(level, format string, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Logger{}, usagef("--log-level must be debug, info, warn or error, not %q", level)
	}
	out := w
	switch format {
	case "json":
	case "console":
		out = zerolog.ConsoleWriter{Out: w}
	case "auto":
		if isTerminal(w) {
			out = zerolog.ConsoleWriter{Out: w}
		}
	default:
		return zerolog.Logger{}, usagef("--log-format must be json, console or auto, not %q", format)
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
