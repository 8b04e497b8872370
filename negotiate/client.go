package negotiate

import (
	"crypto/hmac"
	"fmt"
	"slices"
	"time"

	"github.com/m2md/m2md/security"
)

// ClientHandshake is the agent's side of one handshake: the HELLO it sent
// and the ephemeral key that waits for the daemon's answer. It is not safe
// for concurrent use; it is used once.
type ClientHandshake struct {
	cfg   ClientConfig
	priv  *security.KeyPair
	hello []byte // the CONTROL message, kind byte first
	done  bool
}

// NewHello builds the HELLO for cfg at time now, with a fresh ephemeral
// key and nonce, and the proof when cfg has an agent key.
func NewHello(cfg ClientConfig, now time.Time) (*ClientHandshake, error) {
	eff, err := cfg.effective()
	if err != nil {
		return nil, err
	}
	eff.AgentKey = slices.Clone(cfg.AgentKey)
	h := &ClientHandshake{cfg: eff}
	if h.priv, err = ephemeralKey(eff.entropy); err != nil {
		return nil, err
	}
	nonce, err := randomBytes(eff.entropy, NonceSize)
	if err != nil {
		return nil, err
	}
	pub := h.priv.PublicKey()
	m := &ControlMessage{
		Type:      TypeHello,
		Timestamp: unixMilli(now),
		Capabilities: &Capabilities{
			Version:   protocolVersion,
			AgentID:   eff.AgentID,
			AgentType: eff.AgentType,
			Compression: Compression{
				Algorithms:        eff.Algorithms,
				MaxPayload:        uint64(eff.MaxPayload),
				Streaming:         true,
				Encodings:         eff.Encodings,
				PreferredEncoding: eff.PreferredEncoding,
			},
			Security: SecurityCaps{
				BlockThreshold: 0.8,
				Mode:           eff.Security,
				KeyExchange:    keyExchangeX25519,
				PublicKey:      pub[:],
				Nonce:          nonce,
			},
			Extensions: eff.Extensions,
			Models:     eff.Models,
			Features:   eff.Features,
		},
	}
	if eff.Org != "" {
		// Written with the proof blank, which is what the proof covers
		// (§5.2), then patched in place.
		m.Capabilities.Security.Org = eff.Org
		m.Capabilities.Security.Proof = make([]byte, proofSize)
	}
	if h.hello, err = AppendControl(nil, m); err != nil {
		h.Close()
		return nil, err
	}
	if eff.Org != "" {
		proof, err := security.HelloProof(eff.AgentKey, h.hello[1:])
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		patchAt(h.hello[1:], m.signedAt, proof[:])
	}
	if len(h.hello) > MaxControlSize {
		h.Close()
		return nil, fmt.Errorf("%w: HELLO of %d bytes exceeds %d (too many models or extensions)", ErrConfig, len(h.hello), MaxControlSize)
	}
	return h, nil
}

// Message returns the HELLO to send on the control channel (kind byte
// first). The slice belongs to the handshake; do not modify it.
func (h *ClientHandshake) Message() []byte { return h.hello }

// Accept processes the daemon's reply to the HELLO (kind byte first).
//
// An ACCEPT that is consistent with the HELLO yields the session, with the
// negotiated values adopted and the frame keys derived. A REJECT yields a
// *RejectError carrying the daemon's code and message. Anything else, or an
// ACCEPT that contradicts the HELLO, yields an error wrapping ErrBadAccept
// (or ErrAuthDowngrade). The handshake is finished either way.
func (h *ClientHandshake) Accept(reply []byte) (*Session, error) {
	if h.done {
		return nil, ErrHandshakeDone
	}
	defer h.Close()
	m, err := ParseControl(reply)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadAccept, err)
	}
	switch m.Type {
	case TypeReject:
		return nil, &RejectError{Code: m.Reject.Code, Message: m.Reject.Message}
	case TypeAccept:
	default:
		return nil, fmt.Errorf("%w: got %s while waiting for ACCEPT", ErrUnexpectedMessage, m.Type)
	}
	caps := m.Capabilities
	n := caps.Negotiated
	if err := h.checkAccept(caps, n); err != nil {
		return nil, err
	}
	shared, err := h.priv.SharedSecret(caps.Security.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: unusable public key", ErrBadAccept)
	}
	defer shared.Wipe()
	sess := &Session{
		ID:         m.SessionID,
		Role:       RoleClient,
		AgentID:    h.cfg.AgentID,
		Params:     *n,
		Peer:       caps,
		Transcript: transcriptHash(h.hello[1:], m.signed0),
	}
	var agentKey []byte
	if n.Authenticated {
		sess.Org = h.cfg.Org
		agentKey = h.cfg.AgentKey
	}
	var confirm [confirmSize]byte
	if sess.c2s, sess.s2c, confirm, err = sessionKeys(shared[:], agentKey, sess.Transcript); err != nil {
		return nil, err
	}
	// The key confirmation, in every mode: only the daemon that saw this
	// HELLO as sent (and, when authenticated, holds the agent key) can
	// compute it, so the ACCEPT's decisions are the daemon's (§5.1).
	if !hmac.Equal(confirm[:], n.Confirm) {
		sess.Wipe()
		return nil, fmt.Errorf("%w: %w (the HELLO or ACCEPT was changed in transit, or the daemon does not hold the agent key)", ErrBadAccept, ErrBadConfirmation)
	}
	return sess, nil
}

// checkAccept refuses an ACCEPT whose decision the HELLO did not allow: the
// daemon may only narrow what the client offered.
func (h *ClientHandshake) checkAccept(caps *Capabilities, n *Negotiated) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadAccept, fmt.Sprintf(format, args...))
	}
	if majorVersion(caps.Version) != majorVersion(protocolVersion) {
		return bad("daemon version %q", truncateForError(caps.Version))
	}
	if len(n.Algorithms) == 0 {
		return bad("no algorithm negotiated")
	}
	for _, a := range n.Algorithms {
		if !slices.Contains(h.cfg.Algorithms, a) {
			return bad("algorithm %q was not offered", truncateForError(string(a)))
		}
	}
	if n.Encoding != EncodingCl100k && !slices.Contains(h.cfg.Encodings, n.Encoding) {
		return bad("encoding %q was not offered", truncateForError(string(n.Encoding)))
	}
	if n.MaxPayload < MinPayloadLimit || (h.cfg.MaxPayload != 0 && n.MaxPayload > h.cfg.MaxPayload) {
		return bad("max_payload %d outside %d..%d", n.MaxPayload, MinPayloadLimit, h.cfg.MaxPayload)
	}
	if n.SecurityMode != h.cfg.Security {
		return bad("security mode %s, asked for %s", n.SecurityMode, h.cfg.Security)
	}
	if caps.Security.Mode != n.SecurityMode {
		return bad("security.mode %s contradicts negotiated %s", caps.Security.Mode, n.SecurityMode)
	}
	if _, _, _, err := effectiveTimers(n.SessionTimeout, n.PingInterval, n.PongTimeout); err != nil ||
		n.SessionTimeout == 0 || n.PingInterval == 0 || n.PongTimeout == 0 {
		return bad("timers %v/%v/%v out of range", n.SessionTimeout, n.PingInterval, n.PongTimeout)
	}
	for i, f := range n.Features {
		if !slices.Contains(h.cfg.Features, f) {
			return bad("feature %q was not offered", f)
		}
		if slices.Contains(n.Features[:i], f) {
			return bad("feature %q listed twice", f)
		}
	}
	if n.Authenticated != (h.cfg.Org != "") {
		return fmt.Errorf("%w: authenticated=%t, agent key held=%t", ErrAuthDowngrade, n.Authenticated, h.cfg.Org != "")
	}
	return nil
}

// Close drops the ephemeral key and wipes the client's copy of the agent
// key. Accept calls it; call it yourself when abandoning a handshake.
// (crypto/ecdh offers no way to wipe the private scalar; dropping the last
// reference is what can be done.)
func (h *ClientHandshake) Close() {
	h.done = true
	h.priv = nil
	clear(h.cfg.AgentKey)
}
