package negotiate

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/configerr"
	"github.com/m2md/m2md/security"
)

// Protocol timers and bounds (docs/protocol.md §3.4, §3.5, §6).
const (
	// HelloTimeout: the daemon closes a connection that sent no HELLO
	// within it; the client gives up waiting for ACCEPT after it.
	HelloTimeout = 30 * time.Second
	// CloseTimeout: how long the sender of a CLOSE waits for the ack.
	CloseTimeout = 5 * time.Second
	// MaxMissedPongs: the PING that goes unanswered this many times in a
	// row closes the session with CLOSE TIMEOUT.
	MaxMissedPongs = 3

	DefaultSessionTimeout = 5 * time.Minute
	minSessionTimeout     = 60 * time.Second
	maxSessionTimeout     = time.Hour
	DefaultPingInterval   = 60 * time.Second
	DefaultPongTimeout    = 10 * time.Second
	// minTimer is the shortest ping interval or pong timeout.
	minTimer = time.Second

	// MaxPayloadLimit is the largest max_payload (16 MiB).
	MaxPayloadLimit = 16 << 20
	// MinPayloadLimit is the smallest negotiated max_payload: smaller
	// wishes are raised to it so that an error reply always fits.
	MinPayloadLimit = 1024

	// ProofWindow: an authenticated HELLO's timestamp may be this far from
	// the daemon's clock, and a proof is remembered this long (twice, to
	// cover timestamps from the future).
	ProofWindow = 5 * time.Minute
	// DefaultReplayCacheSize bounds the remembered proofs of one org.
	DefaultReplayCacheSize = 65536
)

// daemonAgentType is the agent_type the daemon announces.
const daemonAgentType = "m2md"

// clientAgentType is the default agent_type of Go clients.
const clientAgentType = "m2md-go"

// ServerConfig is the daemon's negotiation policy. The zero value is a
// working default: both algorithms, all three encodings, 16 MiB payloads,
// every security mode allowed, no agent authentication, 5 min session
// timeout, PING after 60 s of silence, 10 s PONG timeout.
type ServerConfig struct {
	// AgentID is the daemon's agent_id in ACCEPT. Default "m2md".
	AgentID string
	// Algorithms the daemon relays. Default m2m, tokennative.
	Algorithms []Algorithm
	// Encodings the daemon accepts. Default Cl100kBase, O200kBase, LlamaBpe.
	Encodings []Encoding
	// MaxPayload is the largest frame the daemon accepts, at most 16 MiB.
	// 0: 16 MiB.
	MaxPayload int
	// MinSecurity is the weakest DATA protection allowed (none < hmac <
	// aead). The zero value, frame.SecurityNone, allows every mode.
	MinSecurity frame.Security
	// OrgSecrets maps an org id to its master secret. When it is non-empty
	// every HELLO must carry an org of this map and a valid proof (§5.2).
	// NewServer copies the secrets; Server.Close wipes the copies.
	OrgSecrets map[string]security.Secret
	// SessionTimeout closes a session from which nothing arrived for this
	// long: 60 s to 1 h, 0 = 5 min.
	SessionTimeout time.Duration
	// PingInterval: silence after which a PING is sent, 1 s to
	// SessionTimeout; 0 = 60 s (or SessionTimeout if that is shorter).
	PingInterval time.Duration
	// PongTimeout: wait for a PONG, 1 s to PingInterval; 0 = 10 s (or
	// PingInterval if that is shorter).
	PongTimeout time.Duration
	// ReplayCacheSize bounds the proofs remembered against replay, per org
	// (each org has its own cache, so one org cannot lock out the others;
	// about 100 bytes per proof); when an org's cache is full of unexpired
	// proofs, that org's authenticated HELLOs are refused with
	// RATE_LIMITED. 0 = 65,536.
	ReplayCacheSize int
	// Features are the protocol extensions the daemon implements (§3.6),
	// at most 32 names. A HELLO's features are granted when listed here.
	// Default: none (this package cannot know what its embedder implements).
	Features []Feature

	// entropy, when set, supplies keys, nonces and session ids (tests only).
	entropy io.Reader
}

// Algorithms and encodings m2md knows.
var (
	allAlgorithms = []Algorithm{AlgorithmM2M, AlgorithmTokenNative}
	allEncodings  = []Encoding{EncodingCl100k, EncodingO200k, EncodingLlamaBPE}
)

func knownAlgorithm(a Algorithm) bool { return slices.Contains(allAlgorithms, a) }
func knownEncoding(e Encoding) bool   { return slices.Contains(allEncodings, e) }

// effectiveCodecs applies the defaults of the algorithm and encoding lists
// (every algorithm; the role's encodings) and refuses unknown entries.
func effectiveCodecs(algs []Algorithm, encs, defaultEncs []Encoding) ([]Algorithm, []Encoding, error) {
	if len(algs) == 0 {
		algs = allAlgorithms
	}
	for _, a := range algs {
		if !knownAlgorithm(a) {
			return algs, encs, fmt.Errorf("%w: unknown algorithm %q", ErrConfig, a)
		}
	}
	if len(encs) == 0 {
		encs = defaultEncs
	}
	for _, e := range encs {
		if !knownEncoding(e) {
			return algs, encs, fmt.Errorf("%w: unknown encoding %q", ErrConfig, e)
		}
	}
	return algs, encs, nil
}

// The ServerConfig fields its errors name (configerr): the daemon, which
// fills ServerConfig from its own Config, names its fields instead.
const (
	fieldMaxPayload      = "negotiate.ServerConfig.MaxPayload"
	fieldMinSecurity     = "negotiate.ServerConfig.MinSecurity"
	fieldOrgSecrets      = "negotiate.ServerConfig.OrgSecrets"
	fieldReplayCacheSize = "negotiate.ServerConfig.ReplayCacheSize"
	fieldSessionTimeout  = "negotiate.ServerConfig.SessionTimeout"
	fieldPingInterval    = "negotiate.ServerConfig.PingInterval"
	fieldPongTimeout     = "negotiate.ServerConfig.PongTimeout"
)

// effective returns c with defaults filled in, or an ErrConfig error.
func (c ServerConfig) effective() (ServerConfig, error) {
	if c.AgentID == "" {
		c.AgentID = daemonAgentType
	}
	if security.ValidateID(c.AgentID) != nil {
		return c, fmt.Errorf("%w: AgentID %q is not 1-128 characters of [A-Za-z0-9_-]", ErrConfig, c.AgentID)
	}
	var err error
	if c.Algorithms, c.Encodings, err = effectiveCodecs(c.Algorithms, c.Encodings, allEncodings); err != nil {
		return c, err
	}
	switch {
	case c.MaxPayload == 0:
		c.MaxPayload = MaxPayloadLimit
	case c.MaxPayload < MinPayloadLimit || c.MaxPayload > MaxPayloadLimit:
		return c, configerr.New(fieldMaxPayload, "%w: %s %d is outside %d..%d", ErrConfig, fieldMaxPayload, c.MaxPayload, MinPayloadLimit, MaxPayloadLimit)
	}
	if !validMode(c.MinSecurity) {
		return c, configerr.New(fieldMinSecurity, "%w: %s: unknown mode %d", ErrConfig, fieldMinSecurity, c.MinSecurity)
	}
	for org, secret := range c.OrgSecrets {
		if security.ValidateID(org) != nil {
			return c, configerr.New(fieldOrgSecrets, "%w: %s: org %q is not 1-128 characters of [A-Za-z0-9_-]", ErrConfig, fieldOrgSecrets, org)
		}
		if len(secret) < 16 {
			return c, configerr.New(fieldOrgSecrets, "%w: %s: the master secret of org %q has %d bytes, at least 16 needed", ErrConfig, fieldOrgSecrets, org, len(secret))
		}
	}
	if c.SessionTimeout, c.PingInterval, c.PongTimeout, err = effectiveTimers(c.SessionTimeout, c.PingInterval, c.PongTimeout); err != nil {
		return c, err
	}
	switch {
	case c.ReplayCacheSize == 0:
		c.ReplayCacheSize = DefaultReplayCacheSize
	case c.ReplayCacheSize < 0:
		return c, configerr.New(fieldReplayCacheSize, "%w: %s is %d; it must be positive (0 means the default, %d)", ErrConfig, fieldReplayCacheSize, c.ReplayCacheSize, DefaultReplayCacheSize)
	}
	if err := checkFeatures("Features", c.Features); err != nil {
		return c, err
	}
	c.Features = slices.Clone(c.Features)
	return c, nil
}

// shortDur prints d without trailing zero units: 1h, 1m, 90s.
func shortDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func effectiveTimers(session, ping, pong time.Duration) (time.Duration, time.Duration, time.Duration, error) {
	if session == 0 {
		session = DefaultSessionTimeout
	}
	if session < minSessionTimeout || session > maxSessionTimeout {
		return 0, 0, 0, configerr.New(fieldSessionTimeout, "%w: %s %v is outside %v..%v", ErrConfig, fieldSessionTimeout, shortDur(session), shortDur(minSessionTimeout), shortDur(maxSessionTimeout))
	}
	if ping == 0 {
		ping = min(DefaultPingInterval, session)
	}
	if ping < minTimer || ping > session {
		return 0, 0, 0, configerr.New(fieldPingInterval, "%w: %s %v is outside %v..%v (%s)", ErrConfig, fieldPingInterval, shortDur(ping), minTimer, shortDur(session), fieldSessionTimeout)
	}
	if pong == 0 {
		pong = min(DefaultPongTimeout, ping)
	}
	if pong < minTimer || pong > ping {
		return 0, 0, 0, configerr.New(fieldPongTimeout, "%w: %s %v is outside %v..%v (%s)", ErrConfig, fieldPongTimeout, shortDur(pong), minTimer, shortDur(ping), fieldPingInterval)
	}
	return session, ping, pong, nil
}

// ClientConfig describes the agent's HELLO. Only AgentID is required; the
// zero value of everything else is a working default: both algorithms,
// Cl100kBase and O200kBase preferring Cl100kBase, no max_payload preference,
// security mode none, no authentication, no models served.
type ClientConfig struct {
	// AgentID is the address other agents send to: 1-128 of [A-Za-z0-9_-].
	AgentID string
	// AgentType is announced as agent_type. Default "m2md-go".
	AgentType string
	// Algorithms the agent can send and receive. Default m2m, tokennative.
	Algorithms []Algorithm
	// Encodings the agent can tokenize with. Default Cl100kBase, O200kBase.
	Encodings []Encoding
	// PreferredEncoding, one of Encodings. Default: the first of Encodings.
	PreferredEncoding Encoding
	// MaxPayload is the largest frame the agent accepts, 0 (no
	// preference, the daemon's limit) or 1,024 to 16 MiB.
	MaxPayload int
	// Security is the DATA protection the agent asks for; the daemon grants
	// exactly this or rejects. Zero value: frame.SecurityNone.
	Security frame.Security
	// Org and AgentKey authenticate the agent (§5.2): AgentKey is the
	// 32-byte HKDF(master, "m2m/v1/{org}/{agent_id}"). Both or neither.
	// A client with a key refuses an ACCEPT that does not confirm it.
	Org      string
	AgentKey security.Secret
	// Models this agent serves.
	Models []string
	// Extensions is sent as "extensions".
	Extensions map[string]string
	// Features are the protocol extensions the agent implements (§3.6),
	// at most 32 names, sent as "features". Default: none.
	Features []Feature

	entropy io.Reader
}

func (c ClientConfig) effective() (ClientConfig, error) {
	if security.ValidateID(c.AgentID) != nil {
		return c, fmt.Errorf("%w: AgentID %q is not 1-128 characters of [A-Za-z0-9_-]", ErrConfig, c.AgentID)
	}
	if c.AgentType == "" {
		c.AgentType = clientAgentType
	}
	if len(c.AgentType) > maxLabelLen {
		return c, fmt.Errorf("%w: AgentType longer than %d bytes", ErrConfig, maxLabelLen)
	}
	var err error
	if c.Algorithms, c.Encodings, err = effectiveCodecs(c.Algorithms, c.Encodings, []Encoding{EncodingCl100k, EncodingO200k}); err != nil {
		return c, err
	}
	if c.PreferredEncoding == "" {
		c.PreferredEncoding = c.Encodings[0]
	}
	if !slices.Contains(c.Encodings, c.PreferredEncoding) {
		return c, fmt.Errorf("%w: PreferredEncoding %q is not in Encodings", ErrConfig, c.PreferredEncoding)
	}
	if c.MaxPayload != 0 && (c.MaxPayload < MinPayloadLimit || c.MaxPayload > MaxPayloadLimit) {
		return c, fmt.Errorf("%w: MaxPayload %d outside %d..%d", ErrConfig, c.MaxPayload, MinPayloadLimit, MaxPayloadLimit)
	}
	if !validMode(c.Security) {
		return c, fmt.Errorf("%w: Security %d", ErrConfig, c.Security)
	}
	if (c.Org == "") != (len(c.AgentKey) == 0) {
		return c, fmt.Errorf("%w: Org and AgentKey go together", ErrConfig)
	}
	if c.Org != "" {
		if security.ValidateID(c.Org) != nil {
			return c, fmt.Errorf("%w: Org %q is not 1-128 characters of [A-Za-z0-9_-]", ErrConfig, c.Org)
		}
		if len(c.AgentKey) != 32 {
			return c, fmt.Errorf("%w: AgentKey has %d bytes, want 32", ErrConfig, len(c.AgentKey))
		}
	}
	if len(c.Models) > maxModels {
		return c, fmt.Errorf("%w: more than %d models", ErrConfig, maxModels)
	}
	for _, m := range c.Models {
		if !validModel(m) {
			return c, fmt.Errorf("%w: model %q: names are 1-%d bytes without control characters", ErrConfig, m, MaxModelLen)
		}
	}
	for k, v := range c.Extensions {
		if len(k) > maxLabelLen || len(v) > maxLabelLen {
			return c, fmt.Errorf("%w: extension %q: keys and values are at most %d bytes", ErrConfig, k, maxLabelLen)
		}
	}
	if err := checkFeatures("Features", c.Features); err != nil {
		return c, err
	}
	return c, nil
}
