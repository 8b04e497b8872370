package daemon

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// Features are the protocol extensions the daemon implements and offers
// to every client that lists them in HELLO (docs/protocol.md §3.6).
func Features() []negotiate.Feature { return slices.Clone(features) }

var features = []negotiate.Feature{negotiate.FeatureCancel}

// Defaults, in one place. Every one is a Config field (zero means default)
// and an `m2md serve` flag.
const (
	DefaultQUICAddr       = "127.0.0.1:4433"
	DefaultWSAddr         = "127.0.0.1:8080"
	DefaultAdminAddr      = "127.0.0.1:9090"
	DefaultWSPath         = "/m2m"
	DefaultCertDir        = "certs"
	DefaultMaxSessions    = 10_000
	DefaultMaxPayload     = 16 << 20
	DefaultHelloTimeout   = 30 * time.Second
	DefaultSessionTimeout = 5 * time.Minute
	DefaultPingInterval   = 60 * time.Second
	DefaultPongTimeout    = 10 * time.Second
	DefaultCloseTimeout   = 5 * time.Second
	DefaultShutdownGrace  = 10 * time.Second
	DefaultSendQueueLen   = 1024
	DefaultSlowGrace      = 5 * time.Second
	DefaultMaxOutstanding = 1024

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

	minSessionTimeout = 60 * time.Second
	maxSessionTimeout = time.Hour
)

// Config configures a Server. The zero value is a working development
// daemon on loopback: QUIC on 4433/udp, WebSocket on 8080/tcp, admin HTTP on
// 9090, a self-signed certificate made (once) in ./certs, no authentication,
// security mode chosen by each client.
type Config struct {
	// QUICAddr is the UDP address for QUIC. "-" disables QUIC.
	QUICAddr string
	// WSAddr is the TCP address for plain ws://. "-" disables it.
	WSAddr string
	// WSSAddr is the TCP address for wss:// (TLS). Empty or "-" disables it.
	WSSAddr string
	// WSPath is the HTTP path WebSocket clients connect to.
	WSPath string
	// AdminAddr serves /healthz and /metrics. "-" disables it.
	AdminAddr string

	// CertFile and KeyFile name a production certificate. When empty, a
	// development certificate is created in (and reused from) CertDir.
	CertFile, KeyFile string
	// CertDir holds the development certificate. Default "certs".
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
	// Default 65,536.
	ReplayCacheSize int

	// DisableFeatures turns off protocol extensions (docs/protocol.md §3.6)
	// that this build implements (Features). Default: every one is on.
	DisableFeatures []negotiate.Feature

	// MaxSessions bounds concurrent sessions; beyond it HELLO gets
	// REJECT SERVER_BUSY.
	MaxSessions int
	// MaxPayload is the largest DATA message the daemon accepts (≤ 16 MiB).
	MaxPayload int
	// MaxOutstanding bounds a session's requests in flight, as requester and
	// as provider.
	MaxOutstanding int

	// MaxSessionsPerIP bounds the connections (handshaking or established)
	// one source address may hold; zero or negative (the default) means no
	// bound of its own, so that one address (a NAT gateway, a host running
	// many agents, a load test) may use the whole daemon: MaxSessions
	// bounds sessions and HelloTimeout handshakes. NewSessionsPerMinute bounds how many
	// one address may open per minute, after a burst of MaxSessionsPerIP; default
	// 6,000 (see DefaultNewSessionsPerMinute). Beyond either, HELLO is
	// answered REJECT RATE_LIMITED; a negative NewSessionsPerMinute means
	// unlimited.
	// docs/operations.md suggests values for a daemon facing the internet.
	MaxSessionsPerIP     int
	NewSessionsPerMinute int
	// MessagesPerMinute and BytesPerSecond bound what one session may send
	// (token buckets: a minute's messages, a second's bytes may come in a
	// burst). A DATA message beyond them is refused with error rate_limited;
	// a control message is dropped. Zero or negative (the default) means
	// unlimited, as in NATS: one provider's streaming replies are hundreds
	// of messages a second, and the daemon's bounded queues already protect
	// it. docs/operations.md suggests values for untrusted agents.
	MessagesPerMinute int
	BytesPerSecond    int

	HelloTimeout   time.Duration // HELLO must arrive within this. Default 30 s.
	SessionTimeout time.Duration // nothing received for this long closes the session. Default 5 min, 60 s–1 h.
	PingInterval   time.Duration // idle time before the daemon PINGs. Default 60 s.
	PongTimeout    time.Duration // a PONG must arrive within this. Default 10 s.
	CloseTimeout   time.Duration // wait for a CLOSE acknowledgement. Default 5 s.
	ShutdownGrace  time.Duration // on shutdown, in-flight requests may finish this long. Default 10 s.

	// SendQueueLen bounds each session's queue of messages waiting to be
	// written. When it is full the daemon refuses the new message (the sender
	// gets queue_full) and, if it stays full for SlowConsumerGrace, closes the
	// slow session. A single write blocked for SlowConsumerGrace (the agent
	// has stopped reading) closes it too, queue full or not.
	SendQueueLen      int
	SlowConsumerGrace time.Duration

	// Logger receives structured logs; it never receives payloads or keys.
	// The zero value discards them.
	Logger zerolog.Logger

	// pingCheck overrides how often keepalive timers are checked (tests).
	pingCheck time.Duration
}

// openBurst is how many connections one address may open at once: as many
// as it may hold, so that it can reconnect them all after a restart.
func (c Config) openBurst() int {
	if c.MaxSessionsPerIP > 0 {
		return c.MaxSessionsPerIP
	}
	return c.MaxSessions
}

// ErrConfig is wrapped by every error New returns for a Config value out of
// its range: the operator's setting is wrong, not the machine.
var ErrConfig = errors.New("daemon: invalid configuration")

// withDefaults returns c with every zero field set and checks ranges.
func (c Config) withDefaults() (Config, error) {
	setStr := func(p *string, def string) {
		if *p == "" {
			*p = def
		}
	}
	setStr(&c.QUICAddr, DefaultQUICAddr)
	setStr(&c.WSAddr, DefaultWSAddr)
	setStr(&c.WSPath, DefaultWSPath)
	setStr(&c.AdminAddr, DefaultAdminAddr)
	setStr(&c.CertDir, DefaultCertDir)
	setInt := func(p *int, def int) {
		if *p <= 0 {
			*p = def
		}
	}
	setInt(&c.MaxSessions, DefaultMaxSessions)
	setInt(&c.MaxPayload, DefaultMaxPayload)
	setInt(&c.MaxOutstanding, DefaultMaxOutstanding)
	setInt(&c.SendQueueLen, DefaultSendQueueLen)
	setLimit := func(p *int, def int) {
		if *p == 0 {
			*p = def
		}
	}
	setLimit(&c.NewSessionsPerMinute, DefaultNewSessionsPerMinute)
	setDur := func(p *time.Duration, def time.Duration) {
		if *p <= 0 {
			*p = def
		}
	}
	setDur(&c.HelloTimeout, DefaultHelloTimeout)
	setDur(&c.SessionTimeout, DefaultSessionTimeout)
	setDur(&c.PingInterval, DefaultPingInterval)
	setDur(&c.PongTimeout, DefaultPongTimeout)
	setDur(&c.CloseTimeout, DefaultCloseTimeout)
	setDur(&c.ShutdownGrace, DefaultShutdownGrace)
	setDur(&c.SlowConsumerGrace, DefaultSlowGrace)
	if c.MaxPayload > DefaultMaxPayload {
		return c, fmt.Errorf("%w: max payload %d exceeds the protocol's 16 MiB", ErrConfig, c.MaxPayload)
	}
	if c.SessionTimeout < minSessionTimeout || c.SessionTimeout > maxSessionTimeout {
		return c, fmt.Errorf("%w: session timeout %v is outside 60s..1h", ErrConfig, c.SessionTimeout)
	}
	if c.MinSecurity > frame.SecurityAEAD {
		return c, fmt.Errorf("%w: unknown minimum security mode %d", ErrConfig, c.MinSecurity)
	}
	return c, nil
}
