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

func runServe(args []string, _ io.Reader, _ io.Writer, stderr io.Writer) error {
	fs := newFlagSet("serve", "serve [flags]\n\nEvery flag can also be set as an environment variable M2MD_<FLAG>\n(upper case, dashes as underscores) or in a config file (--config; one\n'flag value' per line). Precedence: flags, then environment, then file.", stderr)
	var (
		cfg         daemon.Config
		minSecurity string
		secretsFile string
		disableFeat string
		openAIAddr  string
		openAIKeys  string
		openAIHist  int
		clusterPwd  string
		routes      string
		natsURLs    string
		routeCert   string
		routeKey    string
		routeCA     string
	)
	fs.String("config", "", "config `file`: one 'flag value' pair per line, # comments")
	fs.StringVar(&cfg.QUICAddr, "quic-addr", daemon.DefaultQUICAddr, "UDP `address` for QUIC (\"-\" disables)")
	fs.StringVar(&cfg.WSAddr, "ws-addr", daemon.DefaultWSAddr, "TCP `address` for ws:// (\"-\" disables)")
	fs.StringVar(&cfg.WSSAddr, "wss-addr", "", "TCP `address` for wss:// (TLS); off when empty")
	fs.BoolVar(&cfg.AllowInsecureWS, "allow-insecure-ws", false, "let --ws-addr (plain ws://) listen beyond loopback although --org-secrets-file is set")
	fs.StringVar(&cfg.WSPath, "ws-path", daemon.DefaultWSPath, "HTTP `path` WebSocket clients connect to")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", daemon.DefaultAdminAddr, "TCP `address` for /healthz, /metrics and the status page (\"-\" disables)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve Go's profiles under /debug/pprof/ on --admin-addr")
	fs.StringVar(&cfg.CertFile, "tls-cert", "", "certificate `file` (PEM); default: a development certificate in --cert-dir")
	fs.StringVar(&cfg.KeyFile, "tls-key", "", "private key `file` (PEM) for --tls-cert")
	defaultCertDir, _ := certs.DefaultDevDir() // empty: daemon.New says why
	fs.StringVar(&cfg.CertDir, "cert-dir", defaultCertDir, "`folder` where the development certificate is made and reused; the agent commands pin it from this default")
	fs.StringVar(&minSecurity, "min-security", "none", "weakest frame security `mode` a client may choose: none, hmac or aead")
	fs.StringVar(&secretsFile, "org-secrets-file", "", "`file` of 'org hex-secret' lines; when set, agents must authenticate")
	fs.StringVar(&openAIAddr, "openai-addr", ingress.DefaultAddr, "TCP `address` of the OpenAI-compatible HTTP endpoint (\"-\" disables)")
	fs.StringVar(&openAIKeys, "openai-keys-file", "", "`file` of 'KEY AGENT_ID [ORG] [name=N rpm=N tpm=N concurrent=N models=a,b]' lines: bearer keys of the OpenAI endpoint and their limits (docs/openai.md); reloaded on SIGHUP and on change; required with --org-secrets-file")
	var openAILimits ingress.Limits
	var openAIBodyBudget int
	fs.IntVar(&openAILimits.MaxConns, "openai-max-conns", ingress.DefaultMaxConns, "connections the OpenAI endpoint holds open at once (one more: 503 too_many_connections); -1: no bound")
	fs.IntVar(&openAILimits.MaxConnsPerIP, "openai-max-conns-per-ip", ingress.DefaultMaxConnsPerIP, "connections of one client IP (an IPv6 client's /64) at the OpenAI endpoint (one more: 429 too_many_connections); -1: no bound")
	limitSizeVar(fs, &openAIBodyBudget, "openai-body-budget", ingress.DefaultMaxBodyBytes, "request-body bytes the OpenAI endpoint holds at once, all requests together (over it: 503 server_busy), one client IP at most half (over it: 429 server_busy); -1: no bound")
	byteSizeVar(fs, &openAIHist, "openai-conversation-history", client.DefaultConversationHistory, 0, "bytes of past chat requests and answers the OpenAI endpoint keeps per key, to send the next turns of conversations as deltas (docs/operations.md, \"What the agents keep\"); 0 keeps none")
	fs.StringVar(&disableFeat, "disable-features", "", "comma-separated protocol `features` not to offer (docs/protocol.md §3.6)")
	fs.IntVar(&cfg.MaxSessions, "max-sessions", daemon.DefaultMaxSessions, "concurrent sessions before HELLO gets SERVER_BUSY")
	byteSizeVar(fs, &cfg.MaxPayload, "max-payload", negotiate.MaxPayloadLimit, negotiate.MaxPayloadLimit, "largest DATA message, e.g. 1MiB or 65536 (at most 16MiB)")
	fs.IntVar(&cfg.MaxOutstanding, "max-outstanding", daemon.DefaultMaxOutstanding, "requests in flight per session")
	fs.IntVar(&cfg.AffinityEntries, "affinity-entries", daemon.DefaultAffinityEntries, "conversation documents whose provider the daemon remembers (feature delta, docs/protocol.md §4.3)")
	byteSizeVar(fs, &cfg.ReceiveBudget, "receive-budget", 0, 0, "bytes one connection's received messages may hold while read and routed (0: max payload + 512 + 1 MiB)")
	fs.DurationVar(&cfg.MessageTimeout, "message-timeout", daemon.DefaultMessageTimeout, "a message must arrive whole within this of its first byte")
	fs.DurationVar(&cfg.QUICIdleTimeout, "quic-idle-timeout", daemon.DefaultQUICIdleTimeout, "close a QUIC connection silent this long (keep-alives every fifth of it); idle sessions only, see --busy-ping-after")
	fs.DurationVar(&cfg.BusyPingAfter, "busy-ping-after", daemon.DefaultBusyPingAfter, "PING an agent that holds requests after this much silence from it")
	fs.IntVar(&cfg.FailoverBytes, "failover-bytes", daemon.DefaultFailoverBytes, "bound the copies of requests kept to deliver them again when their provider is lost before replying (-1: no failover)")
	fs.DurationVar(&cfg.BusyPongTimeout, "busy-pong-timeout", daemon.DefaultBusyPongTimeout, "close an agent that holds requests when nothing arrives this long after its PING (its requests fail over or end)")
	fs.IntVar(&cfg.MaxHandshakes, "max-handshakes", daemon.DefaultMaxHandshakes, "WebSocket connections not yet through HELLO; more are closed at accept (-1: unlimited)")
	fs.IntVar(&cfg.MaxHandshakesPerIP, "max-handshakes-per-ip", daemon.DefaultMaxHandshakesPerIP, "WebSocket connections not yet through HELLO from one source address (-1: unlimited)")
	fs.IntVar(&cfg.MaxSessionsPerIP, "max-sessions-per-ip", 0, "connections (handshaking or established) one source address may hold (0: no bound of its own, --max-sessions applies)")
	fs.IntVar(&cfg.NewSessionsPerMinute, "new-sessions-per-minute", daemon.DefaultNewSessionsPerMinute, "connections one source address may open per minute, after a burst of --max-sessions-per-ip, or --max-sessions (-1: unlimited)")
	fs.IntVar(&cfg.MessagesPerMinute, "messages-per-minute", 0, "messages one session may send per minute; more are refused with rate_limited; PING, PONG and CLOSE do not count (0: unlimited)")
	limitSizeVar(fs, &cfg.BytesPerSecond, "bytes-per-second", 0, "bytes one session may send per second, e.g. 10MB; more are refused with rate_limited; PING, PONG and CLOSE do not count (0: unlimited)")
	fs.IntVar(&cfg.SendQueueLen, "send-queue", daemon.DefaultSendQueueLen, "messages queued per session before the slow-consumer policy applies")
	fs.DurationVar(&cfg.SlowConsumerGrace, "slow-consumer-grace", daemon.DefaultSlowGrace, "how long a full send queue is tolerated before the session is closed")
	fs.DurationVar(&cfg.HelloTimeout, "hello-timeout", negotiate.HelloTimeout, "HELLO must arrive within this")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", negotiate.DefaultSessionTimeout, "close a session silent this long (60s..1h)")
	fs.DurationVar(&cfg.PingInterval, "ping-interval", negotiate.DefaultPingInterval, "PING a session idle this long")
	fs.DurationVar(&cfg.PongTimeout, "pong-timeout", negotiate.DefaultPongTimeout, "a PONG must arrive within this")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", daemon.DefaultShutdownGrace, "on SIGINT/SIGTERM, let in-flight requests finish this long")
	fs.StringVar(&cfg.Cluster.Listen, "cluster-listen", "", "`address` (host:port) of the embedded NATS route listener: joins this daemon to a cluster; beyond loopback it needs --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca (docs/operations.md)")
	fs.StringVar(&routes, "cluster-routes", "", "comma-separated nats://host:port route `URLs` of the other daemons (with --cluster-listen)")
	fs.StringVar(&cfg.Cluster.User, "cluster-user", "", "`user` every cluster route authenticates as (with --cluster-password-file): on loopback, or on top of --cluster-tls-*")
	fs.StringVar(&clusterPwd, "cluster-password-file", "", "`file` holding the cluster routes' password (kept out of flags so it never shows in a process listing)")
	fs.StringVar(&routeCert, "cluster-tls-cert", "", "this node's certificate `file` (PEM; m2md cert node): mutual TLS on the routes, and the node's identity")
	fs.StringVar(&routeKey, "cluster-tls-key", "", "private key `file` (PEM) for --cluster-tls-cert")
	fs.StringVar(&routeCA, "cluster-tls-ca", "", "CA `file` (PEM) the other nodes' route certificates must chain to (both directions)")
	fs.StringVar(&cfg.Cluster.Name, "cluster-name", cluster.DefaultName, "cluster `name`; every node of one cluster uses the same")
	fs.StringVar(&cfg.Cluster.Node, "cluster-node", "", "this node's `id` in the cluster (default: random at each start)")
	fs.IntVar(&cfg.Cluster.Inbox, "cluster-inbox", cluster.DefaultInbox, "cluster `messages` waiting for this node before requests and replies from other nodes are answered queue_full; NATS holds as many again (at least 4096) before it drops; every node alike")
	byteSizeVar(fs, &cfg.Cluster.InboxBytes, "cluster-inbox-bytes", cluster.DefaultInboxBytes, 0, "bytes of cluster messages waiting for this node before requests and replies from other nodes are answered queue_full (their frames let go at once), e.g. 64MiB")
	fs.StringVar(&natsURLs, "nats-url", "", "comma-separated nats:// or tls:// `URLs` of an existing NATS deployment to cluster over (instead of --cluster-listen); beyond loopback it needs TLS, --nats-creds or --nats-nkey, and the --cluster-tls-* files")
	fs.StringVar(&cfg.Cluster.CredsFile, "nats-creds", "", "NATS credentials `file` for --nats-url")
	fs.StringVar(&cfg.Cluster.NkeyFile, "nats-nkey", "", "`file` holding this node's NATS nkey seed (SU…), for --nats-url")
	fs.StringVar(&cfg.Cluster.CAFile, "nats-ca", "", "CA `file` (PEM) trusted for --nats-url's TLS certificates")
	logFlags := registerLogFlags(fs, "info")

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
	if cfg.MinSecurity, err = parseSecurity("min-security", minSecurity); err != nil {
		return err
	}
	if secretsFile != "" {
		secrets, err := readOrgSecrets(secretsFile)
		if err != nil {
			return err
		}
		cfg.OrgSecrets = secrets
	}
	for _, f := range strings.Split(disableFeat, ",") {
		if f = strings.TrimSpace(f); f != "" {
			cfg.DisableFeatures = append(cfg.DisableFeatures, negotiate.Feature(f))
		}
	}
	cfg.Cluster.Routes = splitList(routes)
	cfg.Cluster.URLs = splitList(natsURLs)
	if clusterPwd != "" {
		b, err := os.ReadFile(clusterPwd)
		if err != nil {
			return fmt.Errorf("--cluster-password-file: %w", err)
		}
		cfg.Cluster.Password = strings.TrimSpace(string(b))
	}
	if routeCert != "" || routeKey != "" || routeCA != "" {
		if cfg.Cluster.Cert, cfg.Cluster.CA, err = cluster.LoadIdentity(routeCert, routeKey, routeCA); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"--openai-max-conns", openAILimits.MaxConns}, {"--openai-max-conns-per-ip", openAILimits.MaxConnsPerIP}, {"--openai-body-budget", openAIBodyBudget}} {
		if f.n == 0 || f.n < -1 {
			return usagef("%s must be at least 1, or -1 for no bound, not %d", f.name, f.n)
		}
	}
	if openAIBodyBudget > 0 && openAIBodyBudget < ingress.DefaultMaxBody {
		return usagef("--openai-body-budget must be at least %s (one request body of the largest size), or -1 for no bound, not %s", formatBytes(ingress.DefaultMaxBody), formatBytes(openAIBodyBudget))
	}
	openAILimits.MaxBodyBytes = int64(openAIBodyBudget)
	if err := daemon.CheckListenAddr("openai-addr", openAIAddr); err != nil {
		return usagef("%v", err)
	}
	var openAIKeyset *ingress.Keys
	if enabledAddr(openAIAddr) {
		if openAIKeyset, err = loadOpenAIKeys(openAIKeys, cfg.OrgSecrets); err != nil {
			return err
		}
	}
	logger, err := logFlags.logger(stderr)
	if err != nil {
		return err
	}
	cfg.Logger = logger
	traces, err := startTraces("m2md-serve", logger)
	if err != nil {
		return err
	}
	defer traces.stop()
	cfg.TracerProvider = traces.Provider

	srv, err := daemon.New(cfg)
	if errors.Is(err, daemon.ErrConfig) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// SIGHUP (a service manager's reload) must never end the daemon: it
	// reloads --openai-keys-file when one is given (watchKeys), and is
	// otherwise logged as having nothing to reload.
	reloadable := enabledAddr(openAIAddr) && openAIKeyset.Len() > 0
	defer ignoreHUP(logger, reloadable)()
	if !enabledAddr(openAIAddr) {
		return srv.Run(ctx)
	}
	// The daemon runs until the ingress has let its requests finish, so
	// they are not cut off by the daemon's own shutdown.
	daemonCtx, stopDaemon := context.WithCancel(context.Background())
	defer stopDaemon()
	done := make(chan error, 1)
	go func() { done <- srv.Run(daemonCtx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		return err
	}
	edge, err := startOpenAI(ctx, srv, cfg, openAIAddr, openAIKeyset, openAILimits, conversationBudget(openAIHist), logger)
	if err != nil {
		stopDaemon()
		<-done
		return err
	}
	if openAIKeyset.Len() > 0 {
		edge.watchKeys(openAIKeys, cfg.OrgSecrets, logger.With().Str("component", "openai").Logger())
	}
	select {
	case <-ctx.Done():
	case err := <-done:
		edge.stop(time.Second)
		return err
	}
	edge.stop(cfg.ShutdownGrace)
	stopDaemon()
	return <-done
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
