package client

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
	"github.com/m2md/m2md/tokennative"
	"github.com/m2md/m2md/transport"
)

// features are the protocol extensions this package implements, offered
// in every HELLO unless Options.DisableFeatures names them.
var features = []negotiate.Feature{negotiate.FeatureCancel, negotiate.FeatureDelta, negotiate.FeatureTNSealed, negotiate.FeatureBatch, negotiate.FeatureCompact, negotiate.FeatureSharedStream, negotiate.FeatureOnce, negotiate.FeatureTrace}

// Defaults of Options.
const (
	DefaultMaxConcurrentHandlers = 256
	DefaultReconnectMin          = 100 * time.Millisecond
	// DefaultReconnectMax is short so that agents are back within
	// seconds of their daemon: a restarted daemon sees its providers
	// again within 1.5 s of accepting. Attempts are drawn from the upper
	// half of the delay, so 1,000 agents cut off together come back
	// spread over 0.75 s, within the daemon's handshake bounds
	// (--max-handshakes); a refused dial of a daemon that is down costs
	// next to nothing.
	DefaultReconnectMax = 1500 * time.Millisecond
	// DefaultBusyPingAfter and DefaultBusyPongTimeout: Options.BusyPingAfter.
	DefaultBusyPingAfter   = time.Second
	DefaultBusyPongTimeout = 3 * time.Second
	DefaultMaxResponseSize = 16 << 20
	// DefaultStreamBuffer bounds the bytes of replies waiting in one
	// Stream for Recv.
	DefaultStreamBuffer = 32 << 20
	// DefaultConversationHistory bounds a requester's kept requests and
	// responses (Options.ConversationHistory).
	DefaultConversationHistory = 32 << 20
	// DefaultConversationBases bounds a provider's kept requests and
	// answers (Options.ConversationBases).
	DefaultConversationBases = 64 << 20
	// DefaultCompressionQuality is Options.CompressionQuality's default.
	DefaultCompressionQuality = 5
	// DefaultQUICKeepAlive is the Go client's Transport.KeepAlive on
	// QUIC: a daemon killed and restarted on the same address answers the
	// connection's next packet with a stateless reset, so an idle agent
	// learns of the restart within this, and a provider is registered
	// again within about 1.5 s of the daemon accepting. It costs the daemon
	// about 5.5% of a core per 1,000 idle QUIC agents (docs/operations.md,
	// "Failure behaviour"); WebSocket agents learn at once from TCP.
	DefaultQUICKeepAlive = time.Second
	// DefaultQUICPort is used when a quic:// URL has no port.
	DefaultQUICPort = "4433"
)

// Options configures a Client. The zero value is a working requester:
// a random agent id, algorithm m2m, no frame protection, TLS verified
// against the system roots, no reconnection.
type Options struct {
	// AgentID is the address other agents send to: 1–128 characters of
	// [A-Za-z0-9_-]. Default "agent-" and 16 random hex digits. It stays the
	// same across reconnections.
	AgentID string
	// Models this agent serves. Requests naming one of them may be routed
	// here, so a provider also needs a Handler.
	Models []string
	// Handler serves the requests delivered to this agent. Without one,
	// such requests are answered with error no_handler.
	Handler Handler
	// MaxConcurrentHandlers bounds the Handler calls running at once.
	// A delivery beyond it is answered at once with error provider_busy:
	// waiting would stall the connection's reader and with it the replies
	// to this agent's own requests. Default 256.
	MaxConcurrentHandlers int

	// Algorithms offered in HELLO. Default m2m. Offering tokennative (in
	// security mode none only: TokenNative frames cannot be protected) lets
	// requests addressed with To go as TokenNative frames (TokenNative
	// CallOption), and TokenNative requests and replies received are decoded
	// with the encoding their first byte names.
	Algorithms []negotiate.Algorithm
	// Encoding is the preferred TokenNative tokenizer. Default Cl100kBase.
	Encoding negotiate.Encoding
	// Llama3Path locates the Llama 3 vocabulary (tokennative.Config), needed
	// to send or read TokenNative frames of encoding LlamaBpe.
	Llama3Path string
	// Security is the protection of DATA frames: frame.SecurityNone,
	// SecurityHMAC or SecurityAEAD. The daemon grants it or rejects.
	Security frame.Security
	// MaxPayload is the largest frame this agent accepts: 0 (the daemon's
	// limit) or 1,024 to 16 MiB.
	MaxPayload int
	// CompressionQuality is the Brotli quality, 1–11, of the payloads this
	// agent compresses (requests, answers, stream chunks of 100 bytes and
	// more; frame.Limits.Quality). Default 5, the wire reference's. An agent
	// whose CPU is what bounds it takes 1: on 1 KB chat documents a third of
	// quality 5's CPU for about 12 % more bytes, on 16 KB and more a quarter
	// for about 20 % more (the OpenAI edges do, openai.CompressionQuality).
	// Receivers accept any quality.
	CompressionQuality int
	// CompressFrom is the length in bytes from which this agent's
	// documents go compressed (frame.Limits.CompressFrom); shorter ones go
	// stored, at no compression CPU for about twice the bytes. Default
	// 100, the wire reference's; negative: never. The OpenAI edges store
	// documents under 4 KiB (openai.CompressFrom). Receivers accept stored
	// payloads of any length.
	CompressFrom int

	// Org, with AgentKey or OrgSecret, authenticates the agent when the
	// daemon requires it (docs/protocol.md §5.2). AgentKey is the 32-byte
	// key HKDF(org master, "m2m/v1/{org}/{agent_id}") the org hands this
	// agent; OrgSecret is the org master secret itself, from which the key
	// is derived here (convenient in development, but whoever holds it can
	// act as any agent of the org). Give one of the two.
	Org       string
	AgentKey  security.Secret
	OrgSecret security.Secret

	// TLS verification of the daemon for quic:// and wss:// (package
	// certs): CAFile replaces the system roots, PinSHA256 pins the leaf
	// certificate (what the daemon prints at start-up), ServerName overrides
	// the name checked. InsecureSkipVerifyDevOnly accepts any certificate:
	// the traffic is encrypted but anyone on the path can impersonate the
	// daemon. TLSConfig, when set, is used as it is instead of all of these.
	CAFile                    string
	PinSHA256                 string
	ServerName                string
	InsecureSkipVerifyDevOnly bool
	TLSConfig                 *tls.Config

	// Reconnect re-establishes the session after it ends (the connection
	// dropped, CLOSE SERVER_SHUTDOWN, TIMEOUT, ERROR, NORMAL), waiting an
	// exponentially growing, jittered delay between ReconnectMin (default
	// 100 ms) and ReconnectMax (default 1.5 s) before each attempt. The new
	// HELLO registers Models again. Never after CLOSE REPLACED (another
	// session took this agent id) or a REJECT that cannot change
	// (VERSION_MISMATCH, NO_COMMON_ALGORITHM). Requests in flight when the
	// session ends fail with ErrConnectionLost; requests started while
	// reconnecting wait for the new session (bounded by their context).
	Reconnect    bool
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// WaitForDaemon makes Dial keep trying, with the same backoff, until
	// a session is established, ctx ends, or a failure that retrying
	// cannot change (a REJECT for version or algorithms, a configuration
	// error): an agent started before its daemon waits for it. Without
	// it Dial tries each daemon URL once.
	WaitForDaemon bool

	// BusyPingAfter and BusyPongTimeout check the daemon while requests
	// wait for replies (docs/protocol.md §3.4, "Sessions that hold
	// requests"): after BusyPingAfter without any message from the daemon
	// the client sends PING, and when nothing arrives within
	// BusyPongTimeout of it the session is given up for dead. Its requests
	// fail with ErrConnectionLost and, with Reconnect, the next daemon URL
	// is tried at once. An idle session keeps the protocol's long
	// keepalive. Defaults 1 s and 3 s.
	BusyPingAfter, BusyPongTimeout time.Duration

	// MaxResponseSize bounds what Do collects for one request (all stream
	// chunks and the final reply). Default 16 MiB.
	MaxResponseSize int
	// StreamBuffer bounds the bytes of received replies a Stream holds
	// for Recv; beyond it the stream fails with ErrSlowConsumer.
	// Default 32 MiB.
	StreamBuffer int

	// ConversationHistory bounds the bytes of past requests and their
	// responses this agent keeps as a requester, least recently used out
	// first, to send the next turns of their conversations as deltas
	// (feature delta, docs/protocol.md §4.3): a chat request whose messages
	// continue a kept request and its answer travels as the difference,
	// typically 20-60 times smaller. Nothing changes for the caller: a
	// provider that lost the base makes the client resend the whole request
	// once, transparently. Default 32 MiB; negative keeps nothing (every
	// request in full). DisableFeatures with negotiate.FeatureDelta turns
	// conversations off altogether, as a requester and as a provider.
	ConversationHistory int
	// ConversationBases bounds the bytes of delivered requests and this
	// agent's answers kept as a provider, least recently used out first,
	// to rebuild the deltas requesters send against them; a delta whose
	// base was dropped is answered base_missing and comes again in full.
	// Default 64 MiB; negative keeps nothing.
	ConversationBases int

	// DisableFeatures turns off protocol extensions (docs/protocol.md
	// §3.6, the negotiate.Feature constants) that this client would
	// otherwise offer in HELLO.
	// Default: every one is offered; SessionInfo.Params.Features says what
	// the daemon granted.
	DisableFeatures []negotiate.Feature

	// Transport tunes the connection (queues, QUIC idle timeout, handshake
	// timeout); its zero value is the transport's default, except
	// KeepAlive: DefaultQUICKeepAlive.
	Transport transport.Config

	// Logger receives structured logs (connection events at info, protocol
	// trouble at warn, notices at debug); never payloads or keys. The zero
	// value discards them.
	Logger zerolog.Logger
}

// target is a parsed daemon URL.
type target struct {
	scheme string // quic, ws, wss
	addr   string // host:port for QUIC, the URL for WebSocket
}

func parseTarget(raw string) (target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, fmt.Errorf("client: daemon URL: %w", err)
	}
	if u.Host == "" {
		return target{}, fmt.Errorf("client: daemon URL %q has no host", raw)
	}
	switch u.Scheme {
	case "quic":
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return target{}, fmt.Errorf("client: quic URL %q: only quic://host:port", raw)
		}
		host, port := u.Hostname(), u.Port()
		if port == "" {
			port = DefaultQUICPort
		}
		return target{scheme: "quic", addr: net.JoinHostPort(host, port)}, nil
	case "ws", "wss":
		return target{scheme: u.Scheme, addr: u.String()}, nil
	default:
		return target{}, fmt.Errorf("client: daemon URL %q: scheme must be quic, ws or wss", raw)
	}
}

// config is Options validated and completed, plus what Dial derived.
type config struct {
	Options
	tokens   *tokennative.Codec
	targets  []target    // one per daemon URL, tried in turn
	tls      *tls.Config // nil for ws://
	agentKey []byte      // nil without authentication
	hello    negotiate.ClientConfig
}

func newConfig(rawURL string, o Options) (*config, error) {
	var targets []target
	for _, raw := range strings.Split(rawURL, ",") {
		t, err := parseTarget(strings.TrimSpace(raw))
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	return newConfigFor(targets, o)
}

// connTarget is the one target of a client whose connections come from a
// dial function (DialConn).
var connTarget = target{scheme: "conn", addr: "the dial function"}

func newConfigFor(targets []target, o Options) (*config, error) {
	needTLS := false
	for _, t := range targets {
		needTLS = needTLS || (t.scheme != "ws" && t != connTarget)
	}
	var err error
	c := &config{Options: o, targets: targets, tokens: tokennative.New(tokennative.Config{Llama3Path: o.Llama3Path})}
	if c.AgentID == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("client: agent id: %w", err)
		}
		c.AgentID = "agent-" + hex.EncodeToString(b[:])
	}
	if security.ValidateID(c.AgentID) != nil {
		return nil, fmt.Errorf("client: agent id %q: want 1-128 characters of [A-Za-z0-9_-]", c.AgentID)
	}
	if c.MaxConcurrentHandlers <= 0 {
		c.MaxConcurrentHandlers = DefaultMaxConcurrentHandlers
	}
	if len(c.Algorithms) == 0 {
		c.Algorithms = []negotiate.Algorithm{negotiate.AlgorithmM2M}
	}
	if c.ReconnectMin <= 0 {
		c.ReconnectMin = DefaultReconnectMin
	}
	if c.ReconnectMax <= 0 {
		c.ReconnectMax = DefaultReconnectMax
	}
	if c.ReconnectMax < c.ReconnectMin {
		c.ReconnectMax = c.ReconnectMin
	}
	if c.BusyPingAfter <= 0 {
		c.BusyPingAfter = DefaultBusyPingAfter
	}
	if c.BusyPongTimeout <= 0 {
		c.BusyPongTimeout = DefaultBusyPongTimeout
	}
	if c.Transport.KeepAlive <= 0 {
		c.Transport.KeepAlive = DefaultQUICKeepAlive
	}
	if c.MaxResponseSize <= 0 {
		c.MaxResponseSize = DefaultMaxResponseSize
	}
	if c.StreamBuffer <= 0 {
		c.StreamBuffer = DefaultStreamBuffer
	}
	if c.ConversationHistory == 0 {
		c.ConversationHistory = DefaultConversationHistory
	}
	if c.ConversationBases == 0 {
		c.ConversationBases = DefaultConversationBases
	}
	switch {
	case c.CompressionQuality == 0:
		c.CompressionQuality = DefaultCompressionQuality
	case c.CompressionQuality < 1 || c.CompressionQuality > 11:
		return nil, fmt.Errorf("client: CompressionQuality %d: want 1-11, or 0 for %d", c.CompressionQuality, DefaultCompressionQuality)
	}
	c.Models = slices.Clone(c.Models)
	c.Algorithms = slices.Clone(c.Algorithms)

	if err := c.setupAuth(); err != nil {
		return nil, err
	}
	if needTLS {
		if c.TLSConfig != nil {
			c.tls = c.TLSConfig.Clone()
		} else if c.tls, err = certs.ClientTLSConfig(certs.ClientOptions{
			CAFile:             c.CAFile,
			PinSHA256:          c.PinSHA256,
			InsecureSkipVerify: c.InsecureSkipVerifyDevOnly,
			ServerName:         c.ServerName,
		}); err != nil {
			return nil, fmt.Errorf("client: TLS: %w", err)
		}
	}

	features, err := negotiate.EnabledFeatures(features, c.DisableFeatures)
	if err != nil {
		return nil, fmt.Errorf("client: DisableFeatures: %w", err)
	}
	c.hello = negotiate.ClientConfig{
		Features:   features,
		AgentID:    c.AgentID,
		Algorithms: c.Algorithms,
		MaxPayload: c.MaxPayload,
		Security:   c.Security,
		Org:        c.Org,
		Models:     c.Models,
	}
	if c.Encoding != "" {
		c.hello.PreferredEncoding = c.Encoding
		c.hello.Encodings = []negotiate.Encoding{c.Encoding}
		for _, e := range []negotiate.Encoding{negotiate.EncodingCl100k, negotiate.EncodingO200k} {
			if e != c.Encoding {
				c.hello.Encodings = append(c.hello.Encodings, e)
			}
		}
	}
	// A first HELLO built now reports a bad configuration (models, sizes,
	// mode) from Dial rather than from the first connection attempt.
	hs, err := negotiate.NewHello(c.helloConfig(), time.Now())
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	hs.Close()
	return c, nil
}

// setupAuth checks the authentication options and derives the agent key
// from an org secret.
func (c *config) setupAuth() error {
	switch {
	case c.Org == "" && len(c.AgentKey) == 0 && len(c.OrgSecret) == 0:
		return nil
	case c.Org == "":
		return fmt.Errorf("client: AgentKey or OrgSecret given without Org")
	case len(c.AgentKey) > 0 && len(c.OrgSecret) > 0:
		return fmt.Errorf("client: give AgentKey or OrgSecret, not both")
	case len(c.AgentKey) > 0:
		if len(c.AgentKey) != 32 {
			return fmt.Errorf("client: AgentKey is %d bytes, want 32", len(c.AgentKey))
		}
		c.agentKey = slices.Clone(c.AgentKey)
	case len(c.OrgSecret) > 0:
		k, err := security.AgentKey(c.OrgSecret, c.Org, c.AgentID)
		if err != nil {
			return fmt.Errorf("client: agent key from the org secret: %w", err)
		}
		c.agentKey = slices.Clone(k[:])
		k.Wipe()
	default:
		return fmt.Errorf("client: Org %q needs AgentKey or OrgSecret", c.Org)
	}
	// Keep no more copies than needed: Options is the caller's.
	c.Options.AgentKey, c.Options.OrgSecret = nil, nil
	return nil
}

// helloConfig returns the HELLO configuration with the agent key (which
// NewHello copies and its handshake wipes).
func (c *config) helloConfig() negotiate.ClientConfig {
	h := c.hello
	h.AgentKey = c.agentKey
	return h
}

// wipe clears the client's copy of the agent key.
func (c *config) wipe() { clear(c.agentKey) }
