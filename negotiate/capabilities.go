package negotiate

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/jsonscan"
	"github.com/m2md/m2md/security"
)

// protocolVersion is the capabilities version m2md announces. It is the Rust
// reference's session version (wire reference §7), not the frame version.
const protocolVersion = "3.0"

// Algorithm names a frame format a DATA message may carry.
type Algorithm string

const (
	AlgorithmM2M         Algorithm = "m2m"
	AlgorithmTokenNative Algorithm = "tokennative"
)

// Encoding names a tokenizer, with the Rust variant names.
type Encoding string

const (
	EncodingCl100k   Encoding = "Cl100kBase"
	EncodingO200k    Encoding = "O200kBase"
	EncodingLlamaBPE Encoding = "LlamaBpe"
)

// keyExchangeX25519 is the only key exchange of protocol version 1.
const keyExchangeX25519 = "x25519"

// Sizes of the handshake's binary members.
const (
	publicKeySize = 32
	NonceSize     = 32
	proofSize     = 32
	confirmSize   = 32
)

// Limits on members, beyond the envelope's size and JSON limits.
const (
	// maxModels bounds the models an agent may announce.
	maxModels = 1024
	// MaxModelLen is the longest model name: the routing header's model
	// length is one byte (wire reference §3.6).
	MaxModelLen = 255
	// maxLabelLen bounds free-text members such as agent_type.
	maxLabelLen = 256
)

// Capabilities is the HELLO and ACCEPT payload: the Rust Capabilities object
// (wire reference §7.3) with m2md's members. Unknown algorithm and encoding
// names are kept as written (a Rust peer lists "brotli", "Heuristic").
type Capabilities struct {
	Version     string
	AgentID     string
	AgentType   string
	Compression Compression
	Security    SecurityCaps
	// Extensions is Rust's string map; nil is written as {}.
	Extensions map[string]string
	// Models are the models this agent serves (empty: a pure requester).
	Models []string
	// Features are the protocol extensions this side implements (§3.6);
	// written only when non-empty.
	Features []Feature
	// Negotiated is the daemon's decision; present only in ACCEPT.
	Negotiated *Negotiated
}

// Compression is the "compression" member.
type Compression struct {
	Algorithms []Algorithm
	// MaxPayload is the largest frame this side accepts; 0: no preference.
	MaxPayload        uint64
	Streaming         bool
	MLRouting         bool
	Encodings         []Encoding
	PreferredEncoding Encoding
}

// SecurityCaps is the "security" member: Rust's four members, then m2md's.
type SecurityCaps struct {
	ThreatDetection bool
	// ModelVersion is written as null when empty.
	ModelVersion   string
	BlockingMode   bool
	BlockThreshold float32

	// Mode is the DATA protection the client asks for (HELLO) or the
	// daemon granted (ACCEPT).
	Mode        frame.Security
	KeyExchange string
	PublicKey   []byte // 32 bytes (X25519)
	Nonce       []byte // NonceSize bytes
	// Org and Proof authenticate the agent (HELLO only, §5.2); empty when
	// not used.
	Org   string
	Proof []byte
}

// span is the byte range [start, end) of a JSON value in an envelope.
type span struct{ start, end int }

// blankAt returns a copy of envelope with the value at sp replaced by
// security.BlankProof: the bytes a proof or a key confirmation is computed
// over (docs/protocol.md §5).
func blankAt(envelope []byte, sp span) []byte {
	out := make([]byte, 0, len(envelope)-(sp.end-sp.start)+len(security.BlankProof))
	out = append(out, envelope[:sp.start]...)
	out = append(out, security.BlankProof...)
	return append(out, envelope[sp.end:]...)
}

// patchAt writes the Base64 of v (32 bytes) over the blank written at sp.
func patchAt(envelope []byte, sp span, v []byte) {
	base64.StdEncoding.Encode(envelope[sp.start+1:sp.end-1], v)
}

// Negotiated is the outcome of the negotiation, carried in ACCEPT.
type Negotiated struct {
	// Algorithms the client may send, in the client's order.
	Algorithms []Algorithm
	Encoding   Encoding
	// MaxPayload bounds the frame of a DATA message, in both directions.
	MaxPayload     int
	SecurityMode   frame.Security
	SessionTimeout time.Duration
	PingInterval   time.Duration
	PongTimeout    time.Duration
	// Authenticated reports that the daemon verified the agent's proof and
	// that the agent key entered the frame keys (§5.1).
	Authenticated bool
	// Features both sides implement, in the client's order (§3.6); use an
	// extension only when it is listed here. Written only when non-empty.
	Features []Feature
	// Confirm is the daemon's key confirmation (§5.1), 32 bytes; the
	// client verifies it in every mode.
	Confirm []byte
}

// ParseSecurityMode maps "none", "hmac" and "aead" to their frame.Security.
func ParseSecurityMode(s string) (frame.Security, error) {
	switch s {
	case "none":
		return frame.SecurityNone, nil
	case "hmac":
		return frame.SecurityHMAC, nil
	case "aead":
		return frame.SecurityAEAD, nil
	}
	return 0, fmt.Errorf("%w: unknown security mode %q", ErrConfig, s)
}

func validMode(m frame.Security) bool {
	return m == frame.SecurityNone || m == frame.SecurityHMAC || m == frame.SecurityAEAD
}

// --- encoding ---

// appendCapabilities writes c. base is the offset in dst of the envelope's
// first byte; *signed receives where the proof or the confirmation was
// written, for patching.
func appendCapabilities(dst []byte, c *Capabilities, base int, signed *span) []byte {
	dst = append(dst, `{"version":`...)
	dst = jsonscan.AppendString(dst, c.Version)
	dst = append(dst, `,"agent_id":`...)
	dst = jsonscan.AppendString(dst, c.AgentID)
	dst = append(dst, `,"agent_type":`...)
	dst = jsonscan.AppendString(dst, c.AgentType)

	cc := &c.Compression
	dst = append(dst, `,"compression":{"algorithms":`...)
	dst = appendJSONStrings(dst, cc.Algorithms)
	dst = append(dst, `,"max_payload":`...)
	dst = strconv.AppendUint(dst, cc.MaxPayload, 10)
	dst = append(dst, `,"streaming":`...)
	dst = appendJSONBool(dst, cc.Streaming)
	dst = append(dst, `,"ml_routing":`...)
	dst = appendJSONBool(dst, cc.MLRouting)
	dst = append(dst, `,"encodings":`...)
	dst = appendJSONStrings(dst, cc.Encodings)
	dst = append(dst, `,"preferred_encoding":`...)
	pref := cc.PreferredEncoding
	if pref == "" {
		pref = EncodingCl100k
	}
	dst = jsonscan.AppendString(dst, string(pref))

	s := &c.Security
	dst = append(dst, `},"security":{"threat_detection":`...)
	dst = appendJSONBool(dst, s.ThreatDetection)
	dst = append(dst, `,"model_version":`...)
	if s.ModelVersion == "" {
		dst = append(dst, "null"...)
	} else {
		dst = jsonscan.AppendString(dst, s.ModelVersion)
	}
	dst = append(dst, `,"blocking_mode":`...)
	dst = appendJSONBool(dst, s.BlockingMode)
	dst = append(dst, `,"block_threshold":`...)
	dst = appendJSONFloat32(dst, s.BlockThreshold)
	dst = append(dst, `,"mode":`...)
	dst = jsonscan.AppendString(dst, s.Mode.String())
	dst = append(dst, `,"key_exchange":`...)
	dst = jsonscan.AppendString(dst, s.KeyExchange)
	dst = append(dst, `,"public_key":`...)
	dst = appendBase64(dst, s.PublicKey)
	dst = append(dst, `,"nonce":`...)
	dst = appendBase64(dst, s.Nonce)
	if s.Org != "" {
		dst = append(dst, `,"org":`...)
		dst = jsonscan.AppendString(dst, s.Org)
	}
	if len(s.Proof) > 0 {
		dst = append(dst, `,"proof":`...)
		start := len(dst) - base
		dst = appendBase64(dst, s.Proof)
		*signed = span{start, len(dst) - base}
	}

	dst = append(dst, `},"extensions":{`...)
	for i, k := range sortedKeys(c.Extensions) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonscan.AppendString(dst, k)
		dst = append(dst, ':')
		dst = jsonscan.AppendString(dst, c.Extensions[k])
	}
	dst = append(dst, '}')
	if len(c.Models) > 0 {
		dst = append(dst, `,"models":`...)
		dst = appendJSONStrings(dst, c.Models)
	}
	if len(c.Features) > 0 {
		dst = append(dst, `,"features":`...)
		dst = appendJSONStrings(dst, c.Features)
	}
	if n := c.Negotiated; n != nil {
		dst = append(dst, `,"negotiated":{"algorithms":`...)
		dst = appendJSONStrings(dst, n.Algorithms)
		dst = append(dst, `,"encoding":`...)
		dst = jsonscan.AppendString(dst, string(n.Encoding))
		dst = append(dst, `,"max_payload":`...)
		dst = strconv.AppendInt(dst, int64(n.MaxPayload), 10)
		dst = append(dst, `,"security_mode":`...)
		dst = jsonscan.AppendString(dst, n.SecurityMode.String())
		dst = append(dst, `,"session_timeout_ms":`...)
		dst = strconv.AppendInt(dst, n.SessionTimeout.Milliseconds(), 10)
		dst = append(dst, `,"ping_interval_ms":`...)
		dst = strconv.AppendInt(dst, n.PingInterval.Milliseconds(), 10)
		dst = append(dst, `,"pong_timeout_ms":`...)
		dst = strconv.AppendInt(dst, n.PongTimeout.Milliseconds(), 10)
		dst = append(dst, `,"authenticated":`...)
		dst = appendJSONBool(dst, n.Authenticated)
		if len(n.Features) > 0 {
			dst = append(dst, `,"features":`...)
			dst = appendJSONStrings(dst, n.Features)
		}
		if len(n.Confirm) > 0 {
			dst = append(dst, `,"confirm":`...)
			start := len(dst) - base
			dst = appendBase64(dst, n.Confirm)
			*signed = span{start, len(dst) - base}
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

func appendBase64(dst []byte, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// sortedKeys orders map keys by byte value, like serde_json's BTreeMap, so
// that output is deterministic.
func sortedKeys(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// --- decoding ---

// decodeCapabilities reads a HELLO or ACCEPT payload; *signed receives
// where its proof or confirmation is written.
func decodeCapabilities(o jsonObj, signed *span) (*Capabilities, error) {
	c := &Capabilities{}
	var err error
	if c.Version, _, err = o.str("version", true); err != nil {
		return nil, err
	}
	if c.AgentID, _, err = o.str("agent_id", true); err != nil {
		return nil, err
	}
	if security.ValidateID(c.AgentID) != nil {
		return nil, o.errorf("agent_id", "%q is not 1-128 characters of [A-Za-z0-9_-]", truncateForError(c.AgentID))
	}
	if c.AgentType, _, err = o.str("agent_type", true); err != nil {
		return nil, err
	}
	if err := checkLabel(o, "agent_type", c.AgentType); err != nil {
		return nil, err
	}

	comp, _, err := o.object("compression", true)
	if err != nil {
		return nil, err
	}
	algs, _, err := comp.strings("algorithms", true)
	if err != nil {
		return nil, err
	}
	c.Compression.Algorithms = convertStrings[Algorithm](algs)
	if c.Compression.MaxPayload, _, err = comp.uint("max_payload", true); err != nil {
		return nil, err
	}
	if c.Compression.Streaming, err = comp.boolean("streaming", true); err != nil {
		return nil, err
	}
	if c.Compression.MLRouting, err = comp.boolean("ml_routing", true); err != nil {
		return nil, err
	}
	encs, _, err := comp.strings("encodings", false)
	if err != nil {
		return nil, err
	}
	c.Compression.Encodings = convertStrings[Encoding](encs)
	pref, ok, err := comp.str("preferred_encoding", false)
	if err != nil {
		return nil, err
	}
	c.Compression.PreferredEncoding = EncodingCl100k
	if ok {
		c.Compression.PreferredEncoding = Encoding(pref)
	}

	sec, _, err := o.object("security", true)
	if err != nil {
		return nil, err
	}
	if err := decodeSecurity(sec, &c.Security, signed); err != nil {
		return nil, err
	}

	if c.Extensions, err = o.stringMap("extensions"); err != nil {
		return nil, err
	}
	if c.Models, _, err = o.strings("models", false); err != nil {
		return nil, err
	}
	if len(c.Models) > maxModels {
		return nil, o.errorf("models", "more than %d models", maxModels)
	}
	for i, m := range c.Models {
		if !validModel(m) {
			return nil, o.errorf("models", "element %d: model names are 1-%d bytes without control characters", i, MaxModelLen)
		}
	}
	if c.Features, err = decodeFeatures(o, "features"); err != nil {
		return nil, err
	}
	neg, ok, err := o.object("negotiated", false)
	if err != nil {
		return nil, err
	}
	if ok {
		if c.Negotiated, err = decodeNegotiated(neg, signed); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func decodeSecurity(o jsonObj, s *SecurityCaps, signed *span) error {
	var err error
	if s.ThreatDetection, err = o.boolean("threat_detection", true); err != nil {
		return err
	}
	if s.BlockingMode, err = o.boolean("blocking_mode", true); err != nil {
		return err
	}
	if s.BlockThreshold, err = o.float32("block_threshold", true); err != nil {
		return err
	}
	if s.ModelVersion, _, err = o.str("model_version", false); err != nil {
		return err
	}
	if err := checkLabel(o, "model_version", s.ModelVersion); err != nil {
		return err
	}
	mode, _, err := o.str("mode", true)
	if err != nil {
		return err
	}
	if s.Mode, err = ParseSecurityMode(mode); err != nil {
		return o.errorf("mode", "unknown security mode %q", truncateForError(mode))
	}
	if s.KeyExchange, _, err = o.str("key_exchange", true); err != nil {
		return err
	}
	if s.KeyExchange != keyExchangeX25519 {
		return o.errorf("key_exchange", "unknown key exchange %q", truncateForError(s.KeyExchange))
	}
	if s.PublicKey, err = base64Member(o, "public_key", publicKeySize, true); err != nil {
		return err
	}
	if s.Nonce, err = base64Member(o, "nonce", NonceSize, true); err != nil {
		return err
	}
	org, ok, err := o.str("org", false)
	if err != nil {
		return err
	}
	if ok && security.ValidateID(org) != nil {
		return o.errorf("org", "%q is not 1-128 characters of [A-Za-z0-9_-]", truncateForError(org))
	}
	s.Org = org
	if s.Proof, err = base64Member(o, "proof", proofSize, false); err != nil {
		return err
	}
	if len(s.Proof) > 0 {
		*signed = o.span("proof")
	}
	return nil
}

func decodeNegotiated(o jsonObj, signed *span) (*Negotiated, error) {
	n := &Negotiated{}
	algs, _, err := o.strings("algorithms", true)
	if err != nil {
		return nil, err
	}
	n.Algorithms = convertStrings[Algorithm](algs)
	enc, _, err := o.str("encoding", true)
	if err != nil {
		return nil, err
	}
	n.Encoding = Encoding(enc)
	mp, _, err := o.uint("max_payload", true)
	if err != nil {
		return nil, err
	}
	if mp > MaxPayloadLimit {
		return nil, o.errorf("max_payload", "%d exceeds %d", mp, MaxPayloadLimit)
	}
	n.MaxPayload = int(mp)
	mode, _, err := o.str("security_mode", true)
	if err != nil {
		return nil, err
	}
	if n.SecurityMode, err = ParseSecurityMode(mode); err != nil {
		return nil, o.errorf("security_mode", "unknown security mode %q", truncateForError(mode))
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{
		{"session_timeout_ms", &n.SessionTimeout},
		{"ping_interval_ms", &n.PingInterval},
		{"pong_timeout_ms", &n.PongTimeout},
	} {
		ms, _, err := o.uint(d.name, true)
		if err != nil {
			return nil, err
		}
		if ms > uint64(maxSessionTimeout.Milliseconds()) {
			return nil, o.errorf(d.name, "%d ms is longer than %v", ms, maxSessionTimeout)
		}
		*d.dst = time.Duration(ms) * time.Millisecond
	}
	if n.Authenticated, err = o.boolean("authenticated", false); err != nil {
		return nil, err
	}
	if n.Features, err = decodeFeatures(o, "features"); err != nil {
		return nil, err
	}
	if n.Confirm, err = base64Member(o, "confirm", confirmSize, true); err != nil {
		return nil, err
	}
	*signed = o.span("confirm")
	return n, nil
}

// base64Member decodes standard, padded Base64 strictly (wire reference
// §2.2: canonical padding, no line breaks) into exactly size bytes.
func base64Member(o jsonObj, name string, size int, required bool) ([]byte, error) {
	s, ok, err := o.str(name, required)
	if err != nil || !ok {
		return nil, err
	}
	if len(s) != base64.StdEncoding.EncodedLen(size) || strings.ContainsAny(s, "\r\n") {
		return nil, o.errorf(name, "expected %d bytes in padded Base64", size)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != size {
		return nil, o.errorf(name, "expected %d bytes in padded Base64", size)
	}
	return b, nil
}

func checkLabel(o jsonObj, name, s string) error {
	if len(s) > maxLabelLen {
		return o.errorf(name, "longer than %d bytes", maxLabelLen)
	}
	return nil
}

func validModel(m string) bool {
	if len(m) == 0 || len(m) > MaxModelLen {
		return false
	}
	for i := 0; i < len(m); i++ {
		if m[i] < 0x20 || m[i] == 0x7f {
			return false
		}
	}
	return true
}

func convertStrings[T ~string](in []string) []T {
	if in == nil {
		return nil
	}
	out := make([]T, len(in))
	for i, s := range in {
		out[i] = T(s)
	}
	return out
}

// truncateForError keeps error messages short when they quote peer input.
func truncateForError(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
