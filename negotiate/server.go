package negotiate

import (
	"crypto/hmac"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/security"
)

// Server is the daemon's side of the handshake. It holds the policy, the
// org secrets and the caches of used proofs; it is safe for concurrent use
// by all connections.
type Server struct {
	cfg          ServerConfig // OrgSecrets guarded by secretsMu
	authRequired bool
	// proofs has one cache per configured org, so that one org's agents
	// cannot fill it and lock the others out; the map is fixed at
	// NewServer.
	proofs map[string]*proofCache
	// decoy stands in for the master secret of an unknown org, so that
	// refusing one costs the same key derivation and MAC as a wrong proof
	// and the time taken does not tell which orgs exist.
	decoy []byte

	secretsMu sync.RWMutex
}

// NewServer validates cfg, fills in its defaults and copies the org secrets.
// A value out of range is an ErrConfig error; where one field is at fault
// it is a configerr.Error naming it ("negotiate.ServerConfig.PingInterval"),
// which the daemon renames to its own Config's field.
func NewServer(cfg ServerConfig) (*Server, error) {
	eff, err := cfg.effective()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:          eff,
		authRequired: len(cfg.OrgSecrets) > 0,
		proofs:       make(map[string]*proofCache, len(cfg.OrgSecrets)),
	}
	if len(cfg.OrgSecrets) > 0 {
		eff.OrgSecrets = make(map[string]security.Secret, len(cfg.OrgSecrets))
		for org, secret := range cfg.OrgSecrets {
			eff.OrgSecrets[org] = slices.Clone(secret)
			s.proofs[org] = newProofCache(eff.ReplayCacheSize, 2*ProofWindow)
		}
		s.cfg.OrgSecrets = eff.OrgSecrets
		if s.decoy, err = randomBytes(nil, 32); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Config returns the effective configuration (defaults filled in) without
// the org secrets.
func (s *Server) Config() ServerConfig {
	c := s.cfg
	c.OrgSecrets = nil
	c.entropy = nil
	return c
}

// Close wipes the server's copies of the org secrets. If the server
// required authentication, every later HELLO fails it.
func (s *Server) Close() {
	s.secretsMu.Lock()
	defer s.secretsMu.Unlock()
	for org, secret := range s.cfg.OrgSecrets {
		clear(secret)
		delete(s.cfg.OrgSecrets, org)
	}
}

// Accept runs the daemon's side of the handshake on the first message of a
// connection (kind byte first) at time now. atCapacity says the daemon is
// at its session limit.
//
// On success it returns the session and the ACCEPT to send. Otherwise it
// returns the REJECT to send (then close the connection) and a *RejectError;
// a first message that is not a well-formed HELLO gets REJECT UNKNOWN, and
// the *RejectError then also unwraps to the parse error.
func (s *Server) Accept(now time.Time, msg []byte, atCapacity bool) (*Session, []byte, error) {
	hello, err := ParseControl(msg)
	if err == nil && hello.Type != TypeHello {
		err = errors.New("first message is " + string(hello.Type) + ", not HELLO")
	}
	if err != nil {
		rej := &RejectError{Code: RejectUnknown, Message: "malformed HELLO: " + err.Error(), cause: err}
		return nil, s.reject(now, rej), rej
	}
	sess, reply, err := s.accept(now, msg[1:], hello, atCapacity)
	if err != nil {
		var rej *RejectError
		if !errors.As(err, &rej) {
			rej = &RejectError{Code: RejectUnknown, Message: "handshake failed", cause: err}
		}
		return nil, s.reject(now, rej), rej
	}
	return sess, reply, nil
}

func (s *Server) reject(now time.Time, rej *RejectError) []byte {
	return AppendReject(nil, now, rej.Code, rej.Message)
}

func (s *Server) accept(now time.Time, helloJSON []byte, hello *ControlMessage, atCapacity bool) (*Session, []byte, error) {
	params, agentKey, err := s.negotiate(now, hello, atCapacity)
	defer clear(agentKey)
	if err != nil {
		return nil, nil, err
	}
	caps := hello.Capabilities

	priv, err := ephemeralKey(s.cfg.entropy)
	if err != nil {
		return nil, nil, err
	}
	pub := priv.PublicKey()
	shared, err := priv.SharedSecret(caps.Security.PublicKey)
	if err != nil {
		return nil, nil, rejectf(RejectSecurityPolicy, "unusable public key")
	}
	defer shared.Wipe()
	nonce, err := randomBytes(s.cfg.entropy, NonceSize)
	if err != nil {
		return nil, nil, err
	}
	id := ""
	if s.cfg.entropy != nil {
		id, err = newSessionID(s.cfg.entropy)
		if err != nil {
			return nil, nil, err
		}
	} else {
		id = randomSessionID()
	}

	accept := &ControlMessage{
		Type:      TypeAccept,
		SessionID: id,
		Timestamp: unixMilli(now),
		Capabilities: &Capabilities{
			Version:   protocolVersion,
			AgentID:   s.cfg.AgentID,
			AgentType: daemonAgentType,
			Compression: Compression{
				Algorithms:        s.cfg.Algorithms,
				MaxPayload:        uint64(s.cfg.MaxPayload),
				Streaming:         true,
				Encodings:         s.cfg.Encodings,
				PreferredEncoding: s.cfg.Encodings[0],
			},
			Security: SecurityCaps{
				BlockThreshold: 0.8,
				Mode:           params.SecurityMode,
				KeyExchange:    keyExchangeX25519,
				PublicKey:      pub[:],
				Nonce:          nonce,
			},
			Negotiated: &params,
		},
	}
	// Written with the confirmation blank, hashed as it stands, then the
	// confirmation computed from the keys is patched in (§5.1).
	params.Confirm = make([]byte, confirmSize)
	reply, err := AppendControl(nil, accept)
	if err != nil {
		return nil, nil, err
	}
	sess := &Session{
		ID:         id,
		Role:       RoleServer,
		AgentID:    caps.AgentID,
		Params:     params,
		Peer:       caps,
		Transcript: transcriptHash(helloJSON, reply[1:]),
	}
	if params.Authenticated {
		sess.Org = caps.Security.Org
	}
	var confirm [confirmSize]byte
	if sess.c2s, sess.s2c, confirm, err = sessionKeys(shared[:], agentKey, sess.Transcript); err != nil {
		return nil, nil, err
	}
	patchAt(reply[1:], accept.signedAt, confirm[:])
	sess.Params.Confirm = confirm[:]
	return sess, reply, nil
}

// negotiate decides the session parameters for a parsed HELLO, or returns
// a *RejectError (docs/protocol.md §3.2): version, algorithms, encoding,
// max_payload, security mode, authentication, capacity, in this order. An
// authenticated HELLO's proof is recorded as used.
func (s *Server) negotiate(now time.Time, hello *ControlMessage, atCapacity bool) (Negotiated, []byte, error) {
	if hello == nil || hello.Type != TypeHello || hello.Capabilities == nil {
		return Negotiated{}, nil, rejectf(RejectUnknown, "not a HELLO")
	}
	c := hello.Capabilities
	n := Negotiated{
		SessionTimeout: s.cfg.SessionTimeout,
		PingInterval:   s.cfg.PingInterval,
		PongTimeout:    s.cfg.PongTimeout,
	}

	// 1. Version: the major part (before the first '.') must match.
	if majorVersion(c.Version) != majorVersion(protocolVersion) {
		return n, nil, rejectf(RejectVersionMismatch, "version %s is not compatible with %s", truncateForError(c.Version), protocolVersion)
	}

	// Features never refuse a session: the offered ones the daemon has.
	n.Features = negotiateFeatures(c.Features, s.cfg.Features)

	// 2. Algorithms: the intersection in the client's order. A TokenNative
	// frame has no room for a tag: in mode hmac or aead it is offered only
	// with tn_sealed, which puts it in a sealed envelope (§4.2).
	mode := c.Security.Mode
	for _, a := range c.Compression.Algorithms {
		if !slices.Contains(s.cfg.Algorithms, a) || slices.Contains(n.Algorithms, a) {
			continue
		}
		if a == AlgorithmTokenNative && mode != frame.SecurityNone && !n.Has(FeatureTNSealed) {
			continue
		}
		n.Algorithms = append(n.Algorithms, a)
	}
	if len(n.Algorithms) == 0 {
		return n, nil, rejectf(RejectNoCommonAlgorithm, "no common compression algorithm")
	}

	// 3. Encoding: the client's preferred one, else its first the daemon
	// has, else Cl100kBase.
	n.Encoding = EncodingCl100k
	if slices.Contains(s.cfg.Encodings, c.Compression.PreferredEncoding) {
		n.Encoding = c.Compression.PreferredEncoding
	} else {
		for _, e := range c.Compression.Encodings {
			if slices.Contains(s.cfg.Encodings, e) {
				n.Encoding = e
				break
			}
		}
	}

	// 4. max_payload: the smaller wish; 0 is no wish; within 1 KiB..16 MiB.
	n.MaxPayload = s.cfg.MaxPayload
	if want := c.Compression.MaxPayload; want != 0 && want < uint64(n.MaxPayload) {
		n.MaxPayload = max(int(want), MinPayloadLimit)
	}

	// 5. Security mode: the client's, unless weaker than the policy.
	if mode < s.cfg.MinSecurity {
		return n, nil, rejectf(RejectSecurityPolicy, "security mode %s is weaker than the required %s", mode, s.cfg.MinSecurity)
	}
	n.SecurityMode = mode

	// 6. Authentication, when the daemon has org secrets.
	var agentKey []byte
	if s.authRequired {
		var err error
		if agentKey, err = s.authenticate(now, hello); err != nil {
			return n, nil, err
		}
		n.Authenticated = true
	}

	// 7. Capacity, last: an unauthenticated peer learns nothing about load.
	if atCapacity {
		clear(agentKey)
		return n, nil, rejectf(RejectServerBusy, "the daemon is at its session limit")
	}
	return n, agentKey, nil
}

// authenticate checks the HELLO's proof and returns the agent key. The
// messages do not say whether the org or the proof was wrong: that would
// tell a prober which orgs exist.
func (s *Server) authenticate(now time.Time, hello *ControlMessage) ([]byte, error) {
	sec := &hello.Capabilities.Security
	if sec.Org == "" || len(sec.Proof) == 0 {
		return nil, rejectf(RejectSecurityPolicy, "agent authentication required")
	}
	skew := now.Sub(hello.Time())
	if skew > ProofWindow || skew < -ProofWindow {
		return nil, rejectf(RejectSecurityPolicy, "HELLO timestamp is more than %v from the daemon's clock", ProofWindow)
	}
	s.secretsMu.RLock()
	master, known := s.cfg.OrgSecrets[sec.Org]
	if !known {
		master = s.decoy
	}
	agentKey, err := deriveAgentKey(master, sec.Org, hello.Capabilities.AgentID)
	s.secretsMu.RUnlock()
	if err != nil {
		return nil, rejectf(RejectSecurityPolicy, "authentication failed")
	}
	// The proof covers the whole HELLO as received (§5.2): a mode, model
	// or key rewritten on the path fails here. An unknown org goes through
	// the same derivation and MAC with the decoy secret and fails here too.
	want, err := security.HelloProof(agentKey, hello.signed0)
	if err != nil || !hmac.Equal(want[:], sec.Proof) || !known {
		clear(agentKey)
		return nil, rejectf(RejectSecurityPolicy, "authentication failed")
	}
	switch err := s.proofs[sec.Org].add(now, want); {
	case errors.Is(err, errProofReplayed):
		clear(agentKey)
		return nil, rejectf(RejectSecurityPolicy, "HELLO replayed")
	case err != nil:
		clear(agentKey)
		return nil, rejectf(RejectRateLimited, "too many handshakes, try again later")
	}
	return agentKey, nil
}

func majorVersion(v string) string {
	if i := strings.IndexByte(v, '.'); i >= 0 {
		return v[:i]
	}
	return v
}
