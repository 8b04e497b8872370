package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/configerr"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// features are the protocol extensions the daemon implements and offers
// to every client that lists them in HELLO (docs/protocol.md §3.6).
var features = []negotiate.Feature{negotiate.FeatureCancel, negotiate.FeatureDelta, negotiate.FeatureTNSealed, negotiate.FeatureBatch, negotiate.FeatureCompact, negotiate.FeatureSharedStream, negotiate.FeatureOnce, negotiate.FeatureTrace}

// The daemon's own defaults. Every one is a Config field and an `m2md
// serve` flag. The protocol's defaults and ranges (max_payload, the
// session timers, the replay cache, the HELLO and CLOSE timeouts) are
// negotiate's and are not repeated here.
const (
	DefaultQUICAddr      = "127.0.0.1:4433"
	DefaultWSAddr        = "127.0.0.1:8080"
	DefaultAdminAddr     = "127.0.0.1:9090"
	DefaultWSPath        = "/m2m"
	DefaultMaxSessions   = 10_000
	DefaultShutdownGrace = 10 * time.Second
	// DefaultSendQueueLen counts messages; the queue's bytes (2 × max
	// payload, at least 4 MiB) are what bound its memory. A session that
	// multiplexes many streams needs the count: the OpenAI ingress carries
	// every HTTP client on one session, and 32 streams of 51 replies are
	// 1,632 small messages in flight, which a bound of 1,024 refuses with
	// queue_full on a loaded machine (docs/benchmarks.md, the OpenAI edges).
	DefaultSendQueueLen    = 8192
	DefaultSlowGrace       = 5 * time.Second
	DefaultMaxOutstanding  = 1024
	DefaultQUICIdleTimeout = 30 * time.Second
	// DefaultBusyPingAfter and DefaultBusyPongTimeout check a provider
	// that holds requests (liveness.go): its requesters learn of its death
	// within their sum and the liveness scan's period, about 4.3 s, while an
	// idle session keeps the long keepalive (PingInterval, QUICIdleTimeout)
	// and rides out outages of 20 s and more.
	DefaultBusyPingAfter   = time.Second
	DefaultBusyPongTimeout = 3 * time.Second
	// DefaultFailoverBytes bounds the request frames kept for failover
	// (failover.go): 2,048 requests of 32 KiB in flight at once, a small
	// part of what the send queues may hold.
	DefaultFailoverBytes  = 64 << 20
	DefaultMessageTimeout = 30 * time.Second
	// DefaultMaxHandshakes and DefaultMaxHandshakesPerIP bound the TCP
	// connections not yet through HELLO. Handshakes take milliseconds, so
	// even every session of a full daemon reconnecting at once stays far
	// below them, while 4,096 descriptors leave room beside 10,000 sessions
	// under the common 20,000-65,536 descriptor limits.
	DefaultMaxHandshakes      = 4096
	DefaultMaxHandshakesPerIP = 256

	// DefaultNewSessionsPerMinute is one address's sustained rate of new
	// connections: 100 a second. The soak (docs/benchmarks.md) measured
	// what this machine (2 cores) can handshake: 10,000 WebSocket sessions
	// in 7.2 s (≈ 1,400/s) and 1,000 QUIC sessions in 2.4 s (≈ 420/s), with
	// aead. A reconnect loop from one address thus takes at most 7% of the
	// WebSocket and 24% of the QUIC handshake capacity, while the burst
	// (MaxSessionsPerIP, or MaxSessions without it: one address may open all it
	// may hold at once, as a gateway reconnecting its agents after a
	// restart, a benchmark or the soak does) is never refused.
	DefaultNewSessionsPerMinute = 6000
)

// Config configures a Server. The zero value is a working development
// daemon on loopback: QUIC on 4433/udp, WebSocket on 8080/tcp, admin HTTP on
// 9090, a self-signed certificate made (once) in certs.DefaultDevDir (the
// user's config folder, the same for every working directory), no authentication,
// security mode chosen by each client.
//
// One rule for every number, as in cluster.Config, ingress.Config and
// upstream.Config: zero means the documented default, and a negative value
// is an error (a ConfigError naming the field, wrapping ErrConfig), except
// for the limits that can be turned off (MaxHandshakes, MaxHandshakesPerIP,
// MaxSessionsPerIP, NewSessionsPerMinute, MessagesPerMinute,
// BytesPerSecond, FailoverBytes), where -1 (any negative value) means
// unlimited (for FailoverBytes: off), as each of them says.
type Config struct {
	// QUICAddr is the UDP address for QUIC. "-" disables QUIC.
	QUICAddr string
	// WSAddr is the TCP address for plain ws://. "-" disables it. With
	// OrgSecrets it must be a loopback address unless AllowInsecureWS:
	// without TLS the frame tags protect frame bodies only, and PING, PONG,
	// CLOSE and the DATA header travel unauthenticated.
	WSAddr string
	// AllowInsecureWS lets plain ws:// listen on a non-loopback address
	// although OrgSecrets are set (e.g. behind a TLS-terminating proxy on
	// a private network).
	AllowInsecureWS bool
	// WSSAddr is the TCP address for wss:// (TLS). Empty or "-" disables it.
	WSSAddr string
	// WSPath is the HTTP path WebSocket clients connect to.
	WSPath string
	// AdminAddr serves /healthz, /metrics and the status page (/). "-"
	// disables it.
	AdminAddr string
	// Pprof serves Go's profiles (net/http/pprof) under /debug/pprof/ on
	// the admin endpoint. Off by default: they show the daemon's
	// internals and a CPU profile costs CPU while it runs.
	Pprof bool

	// CertFile and KeyFile name a production certificate. When empty, a
	// development certificate is created in (and reused from) CertDir.
	CertFile, KeyFile string
	// CertDir holds the development certificate. Default
	// certs.DefaultDevDir(), where the CLI's agents look for it to pin.
	CertDir string

	// MinSecurity is the weakest frame security mode a client may ask for.
	MinSecurity frame.Security
	// OrgSecrets maps an org id to its master secret. When non-empty, every
	// agent must prove possession of its agent key (docs/protocol.md §5.2);
	// when empty the daemon runs open and warns at start.
	OrgSecrets map[string]security.Secret
	// ReplayCacheSize bounds the accepted HELLO proofs remembered against
	// replay (docs/protocol.md §5.2); when it is full of proofs that could
	// still be fresh, authenticated HELLOs get REJECT RATE_LIMITED.
	// Default negotiate.DefaultReplayCacheSize (65,536).
	ReplayCacheSize int

	// DisableFeatures turns off protocol extensions (docs/protocol.md §3.6)
	// that this build implements (the negotiate.Feature constants).
	// Default: every one is on.
	DisableFeatures []negotiate.Feature

	// MaxSessions bounds concurrent sessions; beyond it HELLO gets
	// REJECT SERVER_BUSY. Default 10,000.
	MaxSessions int
	// MaxPayload is the largest DATA message the daemon accepts, 1 KiB to
	// 16 MiB. Default negotiate.MaxPayloadLimit (16 MiB).
	MaxPayload int
	// AffinityEntries bounds the conversation affinity map (docs/protocol.md
	// §4.3, docs/operations.md "Conversation affinity"): how many documents
	// (org, requester, doc_id) the daemon remembers the provider of, exactly;
	// when full, the least recently used entry of the org holding the most
	// goes first. Default DefaultAffinityEntries (65,536, about 13 MiB when
	// full).
	AffinityEntries int
	// MaxOutstanding bounds a session's requests in flight, as requester and
	// as provider. It is also how many QUIC streams an agent may open.
	// Default 1,024.
	MaxOutstanding int
	// ReceiveBudget bounds, in bytes, what one connection's received
	// messages may hold while they are read and wait to be routed. A QUIC
	// message's share is taken from its length prefix before its body is
	// read; a stream that cannot get it is not read, and QUIC flow control
	// (whose connection window is the budget too) holds the agent back.
	// Default: MaxPayload + 512 + 1 MiB, one largest message and room for
	// smaller ones beside it; never below MaxPayload + 512.
	ReceiveBudget int
	// MessageTimeout bounds how long one message may take to arrive once
	// its first byte has; a session that trickles one is closed with
	// CLOSE ERROR. Default 30 s.
	MessageTimeout time.Duration
	// QUICIdleTimeout is how soon a QUIC agent that has vanished (killed,
	// unplugged) is noticed; keep-alive packets every fifth of it keep a
	// live but quiet agent's connection, and its NAT binding, up. Default
	// 30 s (transport.Config.IdleTimeout says why). It governs idle
	// sessions only: a provider holding requests is checked much sooner
	// (BusyPingAfter).
	QUICIdleTimeout time.Duration
	// BusyPingAfter and BusyPongTimeout are the liveness check of a
	// session that holds deliveries (requests routed to it and not yet
	// ended): after BusyPingAfter without any message from it the daemon
	// sends PING, and a session from which nothing has arrived within
	// BusyPongTimeout of that PING is taken for dead and closed, so that
	// its requests fail over or end (docs/protocol.md §3.4). A live
	// agent's reader answers PING at once, however long its model takes.
	// Defaults 1 s and 3 s.
	BusyPingAfter, BusyPongTimeout time.Duration
	// FailoverBytes bounds, in bytes over all sessions, the copies of
	// request frames the daemon keeps to deliver a request once more to
	// another provider when its provider is lost before replying
	// (docs/protocol.md §4, "Failover"). A copy lives from routing to the
	// request's first reply. A request that finds the budget spent is
	// delivered all the same, without a copy: if its provider is lost it
	// ends with agent_gone. Default 64 MiB; -1 turns failover off.
	FailoverBytes int

	// MaxHandshakes bounds the TCP (WebSocket) connections that have not
	// completed HELLO, MaxHandshakesPerIP those from one source address.
	// They are counted from accept, before anything is read; a connection
	// beyond either is closed at once and counted in m2md_limited_total.
	// The admin endpoint and established sessions are not counted, so they
	// keep working when the caps are hit. Defaults 4,096 and 256; -1 means
	// unlimited.
	MaxHandshakes      int
	MaxHandshakesPerIP int

	// MaxSessionsPerIP bounds the connections (handshaking or established)
	// one source address may hold; the default (zero) is no bound of its
	// own, so that one address (a NAT gateway, a host running
	// many agents, a load test) may use the whole daemon: MaxSessions
	// bounds sessions and HelloTimeout handshakes. NewSessionsPerMinute bounds how many
	// one address may open per minute, after a burst of MaxSessionsPerIP; default
	// 6,000 (see DefaultNewSessionsPerMinute). Beyond either, HELLO is
	// answered REJECT RATE_LIMITED. -1 means unlimited for either.
	// docs/operations.md suggests values for a daemon facing the internet.
	MaxSessionsPerIP     int
	NewSessionsPerMinute int
	// MessagesPerMinute and BytesPerSecond bound what one session may send
	// (token buckets: a minute's messages, a second's bytes may come in a
	// burst). A DATA message beyond them is refused with error rate_limited;
	// a control message is dropped. The default (zero) is unlimited, as in
	// NATS: one provider's streaming replies are hundreds of messages a
	// second, and the daemon's bounded queues already protect it; -1 says
	// unlimited too. docs/operations.md suggests values for untrusted agents.
	MessagesPerMinute int
	BytesPerSecond    int

	// HelloTimeout: HELLO must arrive within this. Default
	// negotiate.HelloTimeout (30 s).
	HelloTimeout time.Duration
	// SessionTimeout, PingInterval and PongTimeout are the session timers
	// offered in ACCEPT, with negotiate.ServerConfig's defaults and ranges:
	// nothing received for SessionTimeout (60 s to 1 h, default 5 min)
	// closes a session, the daemon PINGs after PingInterval of silence
	// (default 60 s) and waits PongTimeout for the PONG (default 10 s).
	SessionTimeout, PingInterval, PongTimeout time.Duration
	// CloseTimeout: wait for a CLOSE acknowledgement. Default
	// negotiate.CloseTimeout (5 s).
	CloseTimeout time.Duration
	// ShutdownGrace: on shutdown, in-flight requests may finish this long,
	// and the replies they leave queued get as long again to be written
	// before each session's CLOSE (a session whose writes stall for
	// SlowConsumerGrace is closed sooner). Default 10 s.
	ShutdownGrace time.Duration

	// SendQueueLen bounds each session's queue of messages waiting to be
	// written. When it is full the daemon refuses the new message (the sender
	// gets queue_full) and, if it stays full for SlowConsumerGrace, closes the
	// slow session. A write during which the connection takes no byte for
	// SlowConsumerGrace (the agent has stopped reading) closes it too,
	// queue full or not; a slow but live reader is not closed. Defaults
	// 8,192 messages and 5 s.
	SendQueueLen      int
	SlowConsumerGrace time.Duration

	// Cluster joins this daemon to a cluster of daemons over NATS
	// (docs/operations.md, "Cluster"). The zero value is a single node with
	// no NATS at all.
	Cluster cluster.Config

	// TracerProvider records a span for each routed request that carries a
	// trace context (docs/operations.md, "Traces"); nil records none, and
	// the trace context passes on unchanged. m2md serve sets it from the
	// OTEL_* environment (internal/telemetry).
	TracerProvider trace.TracerProvider

	// Logger receives structured logs; it never receives payloads or keys.
	// The zero value discards them.
	Logger zerolog.Logger

	// timeScale, when above 1, makes every session's timers (session
	// timeout, ping interval, pong timeout) run that many times faster
	// than negotiated, so tests can watch the 60 s minimum session timeout
	// act in seconds. Clients still see the negotiated values.
	timeScale int
	// beforeCloseWrite, when set, runs in the writer just before it hands
	// a CLOSE to the transport: tests stretch that moment, as a loaded
	// machine does, to check that teardown waits for the CLOSE.
	beforeCloseWrite func()
}

// openBurst is how many connections one address may open at once: as many
// as it may hold, so that it can reconnect them all after a restart.
func (c Config) openBurst() int {
	if c.MaxSessionsPerIP > 0 {
		return c.MaxSessionsPerIP
	}
	return c.MaxSessions
}

// receiveBudget is ReceiveBudget once MaxPayload is known.
func (c Config) receiveBudget() int {
	if c.ReceiveBudget == 0 {
		return c.MaxPayload + 512 + 1<<20
	}
	return max(c.ReceiveBudget, c.MaxPayload+512)
}

// ErrConfig is wrapped by every error New returns for a Config value out of
// its range: the operator's setting is wrong, not the machine.
var ErrConfig = errors.New("daemon: invalid configuration")

// ConfigError is the error New returns for a Config value out of its range
// or in conflict with another (errors.As finds it; it wraps ErrConfig, or
// cluster.ErrInsecure for a cluster link another machine could join).
// Field names the setting at fault, qualified as "daemon.Config.MaxSessions"
// or "cluster.Config.Listen" (for Config.Cluster); every other field its
// message names is written the same way, so that a command can translate
// each to the flag that sets it.
type ConfigError = configerr.Error

// Qualified names of the fields the errors and logs name.
const (
	fieldQUICAddr        = "daemon.Config.QUICAddr"
	fieldWSAddr          = "daemon.Config.WSAddr"
	fieldWSSAddr         = "daemon.Config.WSSAddr"
	fieldAdminAddr       = "daemon.Config.AdminAddr"
	fieldAllowInsecureWS = "daemon.Config.AllowInsecureWS"
	fieldOrgSecrets      = "daemon.Config.OrgSecrets"
)

// withDefaults returns c with every zero field set to the daemon's default
// and checks ranges. The fields negotiate owns (MaxPayload, the session
// timers, ReplayCacheSize) are defaulted and checked by negotiate.NewServer
// (see New).
func (c Config) withDefaults() (Config, error) {
	for _, f := range []struct {
		p   *string
		def string
	}{
		{&c.QUICAddr, DefaultQUICAddr}, {&c.WSAddr, DefaultWSAddr}, {&c.WSPath, DefaultWSPath},
		{&c.AdminAddr, DefaultAdminAddr},
	} {
		if *f.p == "" {
			*f.p = f.def
		}
	}
	for _, a := range []struct{ name, addr string }{
		{fieldQUICAddr, c.QUICAddr}, {fieldWSAddr, c.WSAddr}, {fieldWSSAddr, c.WSSAddr}, {fieldAdminAddr, c.AdminAddr},
	} {
		if err := CheckListenAddr(a.name, a.addr); err != nil {
			return c, err
		}
	}
	if c.CertDir == "" && c.CertFile == "" && c.KeyFile == "" {
		dir, err := certs.DefaultDevDir()
		if err != nil {
			return c, configerr.New("daemon.Config.CertDir", "%w: daemon.Config.CertDir: %v (set daemon.Config.CertDir, or daemon.Config.CertFile and daemon.Config.KeyFile)", ErrConfig, err)
		}
		c.CertDir = dir
	}
	for _, f := range []struct {
		name string
		p    *int
		def  int
	}{
		{"daemon.Config.MaxSessions", &c.MaxSessions, DefaultMaxSessions},
		{"daemon.Config.MaxOutstanding", &c.MaxOutstanding, DefaultMaxOutstanding},
		{"daemon.Config.AffinityEntries", &c.AffinityEntries, DefaultAffinityEntries},
		{"daemon.Config.SendQueueLen", &c.SendQueueLen, DefaultSendQueueLen},
		{"daemon.Config.ReceiveBudget", &c.ReceiveBudget, 0}, // derived from MaxPayload in New
	} {
		if err := orDefault(f.name, f.p, f.def); err != nil {
			return c, err
		}
	}
	for _, f := range []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"daemon.Config.HelloTimeout", &c.HelloTimeout, negotiate.HelloTimeout},
		{"daemon.Config.CloseTimeout", &c.CloseTimeout, negotiate.CloseTimeout},
		{"daemon.Config.ShutdownGrace", &c.ShutdownGrace, DefaultShutdownGrace},
		{"daemon.Config.SlowConsumerGrace", &c.SlowConsumerGrace, DefaultSlowGrace},
		{"daemon.Config.MessageTimeout", &c.MessageTimeout, DefaultMessageTimeout},
		{"daemon.Config.QUICIdleTimeout", &c.QUICIdleTimeout, DefaultQUICIdleTimeout},
		{"daemon.Config.BusyPingAfter", &c.BusyPingAfter, DefaultBusyPingAfter},
		{"daemon.Config.BusyPongTimeout", &c.BusyPongTimeout, DefaultBusyPongTimeout},
	} {
		if err := orDefault(f.name, f.p, f.def); err != nil {
			return c, err
		}
	}
	// Limits that can be off: zero is the default, negative is unlimited.
	if c.MaxHandshakes == 0 {
		c.MaxHandshakes = DefaultMaxHandshakes
	}
	if c.MaxHandshakesPerIP == 0 {
		c.MaxHandshakesPerIP = DefaultMaxHandshakesPerIP
	}
	if c.NewSessionsPerMinute == 0 {
		c.NewSessionsPerMinute = DefaultNewSessionsPerMinute
	}
	if c.FailoverBytes == 0 {
		c.FailoverBytes = DefaultFailoverBytes
	}
	if c.MinSecurity > frame.SecurityAEAD {
		return c, configerr.New("daemon.Config.MinSecurity", "%w: daemon.Config.MinSecurity: unknown mode %d", ErrConfig, c.MinSecurity)
	}
	if len(c.OrgSecrets) > 0 && c.WSAddr != "-" && !c.AllowInsecureWS && !isLoopback(c.WSAddr) {
		return c, configerr.New(fieldWSAddr, "%w: "+fieldWSAddr+" %s serves plain ws:// beyond this host while agents authenticate ("+fieldOrgSecrets+"): "+
			"without TLS, PING, PONG, CLOSE and the DATA header are not authenticated; serve agents on "+fieldWSSAddr+" or QUIC "+
			"and give "+fieldWSAddr+" a loopback address or -, or set "+fieldAllowInsecureWS+" (e.g. behind a TLS proxy)", ErrConfig, c.WSAddr)
	}
	if err := c.Cluster.Check(); err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return c, nil
}

// CheckListenAddr checks a listen address set by the setting named field
// (a Config field, as "daemon.Config.QUICAddr", or whatever the caller calls
// it): host:port (an empty host listens on every interface), or "-" or
// empty for off. An address that cannot be listened on is a wrong setting
// (a ConfigError for field, wrapping ErrConfig), found before anything
// starts.
func CheckListenAddr(field, addr string) error {
	if addr == "" || addr == "-" {
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return configerr.New(field, "%w: %s %q: want host:port, such as 127.0.0.1:%s, or - to turn it off", ErrConfig, field, addr, examplePort(addr))
	}
	return nil
}

// examplePort is the port of a host:port example for addr: addr itself when
// it is a bare number, as in a QUICAddr of "4433".
func examplePort(addr string) string {
	for _, r := range addr {
		if r < '0' || r > '9' {
			return "4433"
		}
	}
	return addr
}

// isLoopback reports whether a listen address (host:port) binds loopback
// only: "localhost" or a loopback IP. An empty host binds every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// orDefault is configerr.OrDefault, its refusal wrapping ErrConfig.
func orDefault[T int | time.Duration](field string, p *T, def T) error {
	if err := configerr.OrDefault(field, p, def); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}
