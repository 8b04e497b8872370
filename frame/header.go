package frame

import (
	"encoding/binary"
	"math"
	"unicode/utf8"

	"github.com/m2md/m2md/internal/jsonscan"
)

// Role is a chat message role as packed in the routing header, two bits
// per message (Header.Role); String gives its name.
type Role = jsonscan.Role

const (
	RoleSystem    = jsonscan.RoleSystem // "system" and "developer"
	RoleUser      = jsonscan.RoleUser
	RoleAssistant = jsonscan.RoleAssistant
	RoleTool      = jsonscan.RoleTool
)

// FinishReason is the response header's finish reason byte (wire
// reference §3.7).
type FinishReason uint8

const (
	FinishStop          FinishReason = 0x00
	FinishLength        FinishReason = 0x01
	FinishToolCalls     FinishReason = 0x02
	FinishContentFilter FinishReason = 0x03
	// FinishUnknown: absent, not a string, or any other value
	// (function_call included).
	FinishUnknown FinishReason = 0xff
)

func (f FinishReason) String() string {
	switch f {
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishToolCalls:
		return "tool_calls"
	case FinishContentFilter:
		return "content_filter"
	}
	return "unknown"
}

// Header is what ReadHeader learns from a frame without touching its
// payload: everything a router needs. Which group of fields is filled
// depends on Schema: the routing fields for requests (schemas 01, 04), the
// response fields for responses (02, 05, 10), neither for other schemas.
//
// Model and ID alias the frame given to ReadHeader, or for ReadTextHeader a
// buffer owned by the Header that the next ReadTextHeader call on the same
// Header reuses. Copy them to keep them.
type Header struct {
	// HeaderLen is header_len: fixed header plus variable header, so the
	// payload section starts at PrefixLen + HeaderLen.
	HeaderLen int
	Schema    Schema
	// Security is the mode byte as written; values other than 01 and 02
	// mean no protection, as in the Rust decoder.
	Security Security
	Flags    Flags
	// Sequence and Channel are the m2md session fields in the reserved
	// bytes (zero in frames from the Rust reference).
	Sequence uint64
	Channel  uint32

	// Model is the routing or response header's model, as UTF-8 bytes.
	Model []byte

	// Request routing header.
	MsgCount uint32
	// Roles holds the packed roles as the decoder reads them: ceil(2 *
	// MsgCount / 8) bytes, first role in the low bits. Use Role(i).
	Roles       []byte
	ContentHint uint32
	// MaxTokens is valid when HasMaxTokens.
	MaxTokens    uint32
	HasMaxTokens bool
	// RoutingMisaligned reports that the request fields after MsgCount do
	// not fit the header: the Rust encoder skips messages whose role it
	// does not know (function, none), so its roles field is then shorter
	// than MsgCount implies and every later field is misplaced. The Rust
	// decoder silently reads garbage; here those fields are left unset
	// (Roles nil, zero, HasMaxTokens and HasEstCost false) and the frame
	// stays valid: the routing header is advisory.
	RoutingMisaligned bool

	// Response header.
	ID               []byte
	FinishReason     FinishReason
	PromptTokens     uint32
	CompletionTokens uint32
	CachedTokens     uint32 // present when Flags.HasCachedTokens()
	ReasoningTokens  uint32 // present when Flags.HasReasoningTokens()

	// EstCost is the cost estimate in US dollars, valid when HasEstCost.
	EstCost    float32
	HasEstCost bool

	// Ext is the m2md extension block of a request frame, or of a final
	// response frame (a reply delta: Delta alone), with HAS_EXTENSIONS
	// (docs/protocol.md §4.3); zero when there is none.
	Ext Extension
	// ExtLen is the bytes the block takes at the end of the variable
	// header (L + 1), 0 without one.
	ExtLen int

	// PayloadKnown is false for AEAD frames, whose payload_len and crc32
	// are encrypted; PayloadLen and CRC are then zero.
	PayloadKnown bool
	// PayloadLen is payload_len: payload bytes as sent (compressed size).
	PayloadLen uint32
	// CRC is the CRC-32 (IEEE) of the original JSON.
	CRC uint32

	text []byte // ReadTextHeader's decoding buffer, reused
}

// Role returns the role of message i as the routing header records it.
// ok is false when i is outside the packed roles.
func (h *Header) Role(i int) (r Role, ok bool) {
	if i < 0 || i >= h.RoleCount() {
		return 0, false
	}
	return Role(h.Roles[i/4] >> (2 * (i % 4)) & 3), true
}

// RoleCount is the number of roles Role can return: MsgCount, or 0 when
// the routing header is misaligned.
func (h *Header) RoleCount() int {
	n := 4 * len(h.Roles)
	if uint64(n) > uint64(h.MsgCount) {
		n = int(h.MsgCount)
	}
	return n
}

// PayloadOffset is where the payload section starts: payload_len for a
// plain or HMAC frame, the nonce for an AEAD frame.
func (h *Header) PayloadOffset() int { return PrefixLen + h.HeaderLen }

// ReadHeader reads the headers of a binary-shape M2M v1 frame into h
// without decompressing or checking the payload, and without allocating:
// Model and ID alias frame. It works in every security mode; in AEAD mode
// the payload length and CRC are encrypted and reported unknown.
//
// It checks what it reads: the prefix, header_len ≥ 20, that the header
// and (when in clear) payload_len bytes of payload are present, and the
// variable header as the Rust decoder does (lengths in range, model and id
// valid UTF-8, varints complete).
func ReadHeader(frame []byte, h *Header) error {
	if len(frame) < PrefixLen || string(frame[:PrefixLen]) != Prefix {
		return errorf(ErrBadPrefix, "binary frame does not start with %q", Prefix)
	}
	return parseHeader(frame, len(frame), h)
}

// parseHeader reads the headers from b, which holds at least the prefix
// and fixed header, and the variable header plus the 8 bytes after it
// when total says the frame has them. total is the length of the whole
// (binary) frame, of which b may be only the start.
func parseHeader(b []byte, total int, h *Header) error {
	text := h.text
	*h = Header{text: text}
	if total < MinFrameLen || len(b) < MinFrameLen {
		return errorf(ErrTruncated, "frame of %d bytes is shorter than the %d-byte fixed header", total, MinFrameLen)
	}
	hl := int(binary.LittleEndian.Uint16(b[OffHeaderLen:]))
	if hl < FixedHeaderLen {
		return errorf(ErrMalformed, "header_len %d is less than %d", hl, FixedHeaderLen)
	}
	end := PrefixLen + hl
	if end > total || end > len(b) {
		return errorf(ErrTruncated, "header_len %d exceeds the %d bytes after the prefix", hl, total-PrefixLen)
	}
	h.HeaderLen = hl
	h.Schema = Schema(b[OffSchema])
	h.Security = Security(b[OffSecurity])
	h.Flags = Flags(binary.LittleEndian.Uint32(b[OffFlags:]))
	h.Sequence = binary.LittleEndian.Uint64(b[OffSequence:])
	h.Channel = binary.LittleEndian.Uint32(b[OffChannel:])

	// The variable header is parsed inside the header_len window only.
	// The Rust decoder parses from the rest of the frame and then skips
	// header_len - 20 bytes whatever it consumed; bounding the parse by
	// the window gives the same result for every well-formed frame and can
	// never read payload bytes as header fields.
	v := b[OffVarHeader:end]
	var err error
	if h.Flags.HasExtensions() {
		switch h.Schema {
		case SchemaRequest:
			h.Ext, h.ExtLen, err = parseExtension(v)
		case SchemaResponse:
			h.Ext, h.ExtLen, err = parseReplyExtension(v)
		default:
			err = errorf(ErrMalformed, "extension: HAS_EXTENSIONS on schema %#02x; only a chat request (01) or a chat response (02) carries a block", byte(h.Schema))
		}
		if err != nil {
			return err
		}
		v = v[:len(v)-h.ExtLen]
	}
	switch h.Schema {
	case SchemaRequest, SchemaEmbeddingRequest:
		err = h.parseRouting(v)
	case SchemaResponse, SchemaEmbeddingResponse, SchemaError:
		var rest int
		rest, err = h.parseResponse(v)
		if err == nil && h.ExtLen > 0 && rest != 0 {
			// As for a request: the block follows the fields exactly.
			err = errorf(ErrMalformed, "extension: the response header fields end %d bytes before the block", rest)
		}
	}
	if err != nil {
		return err
	}
	if h.ExtLen > 0 && h.RoutingMisaligned {
		// The block must follow the routing fields exactly: a reader that
		// cannot place them cannot trust where the block starts either.
		return errorf(ErrMalformed, "extension: the routing fields do not end where the block starts")
	}

	rest := total - end
	if h.Security == SecurityAEAD {
		if rest < aeadOverhead {
			return errorf(ErrTruncated, "AEAD frame has %d bytes after the header, need at least %d for nonce and tag", rest, aeadOverhead)
		}
		return nil
	}
	if rest < 8 || len(b) < end+8 {
		return errorf(ErrTruncated, "%d bytes after the header, need 8 for payload_len and crc32", rest)
	}
	h.PayloadKnown = true
	h.PayloadLen = binary.LittleEndian.Uint32(b[end:])
	h.CRC = binary.LittleEndian.Uint32(b[end+4:])
	if uint64(h.PayloadLen) > uint64(rest-8) {
		return errorf(ErrTruncated, "payload_len %d exceeds the %d bytes left", h.PayloadLen, rest-8)
	}
	return nil
}

// aeadOverhead is the 12-byte nonce and 16-byte tag around an AEAD payload.
const aeadOverhead = 12 + 16

// lenPrefixed reads a length byte and that many UTF-8 bytes from v[pos:].
func lenPrefixed(v []byte, pos int, what string) ([]byte, int, error) {
	if pos >= len(v) {
		return nil, 0, errorf(ErrMalformed, "variable header ends before the %s length", what)
	}
	n := int(v[pos])
	pos++
	if n > len(v)-pos {
		return nil, 0, errorf(ErrMalformed, "%s of %d bytes runs past the variable header", what, n)
	}
	s := v[pos : pos+n : pos+n]
	if !utf8.Valid(s) {
		return nil, 0, errorf(ErrMalformed, "%s is not valid UTF-8", what)
	}
	return s, pos + n, nil
}

func varintAt(v []byte, pos int, what string) (uint64, int, error) {
	x, n := readUvarint(v[pos:])
	switch {
	case n == 0:
		return 0, 0, errorf(ErrMalformed, "%s varint runs past the variable header", what)
	case n < 0:
		return 0, 0, errorf(ErrMalformed, "%s varint is longer than 10 bytes", what)
	}
	return x, pos + n, nil
}

func (h *Header) parseRouting(v []byte) error {
	model, pos, err := lenPrefixed(v, 0, "model")
	if err != nil {
		return err
	}
	h.Model = model
	count, pos, err := varintAt(v, pos, "msg_count")
	if err != nil {
		return err
	}
	h.MsgCount = uint32(count)

	// From here on a mismatch between MsgCount and the roles the encoder
	// wrote shifts every field (see RoutingMisaligned). The fields are
	// accepted only if they end exactly where the cost (always written by
	// the Rust encoder and by ours) or the header ends.
	rolesLen := (uint64(h.MsgCount)*2 + 7) / 8
	if rolesLen > uint64(len(v)-pos) {
		h.RoutingMisaligned = true
		return nil
	}
	roles := v[pos : pos+int(rolesLen) : pos+int(rolesLen)]
	pos += int(rolesLen)
	hint, n := readUvarint(v[pos:])
	if n <= 0 {
		h.RoutingMisaligned = true
		return nil
	}
	pos += n
	var maxTokens uint64
	if h.Flags.HasMaxTokens() {
		// The Rust encoder omits this varint when max_tokens is not an
		// integer but keeps the flag; the decoder reads one anyway. Such
		// frames are caught by the length check below.
		if maxTokens, n = readUvarint(v[pos:]); n <= 0 {
			h.RoutingMisaligned = true
			return nil
		}
		pos += n
	}
	switch len(v) - pos {
	case 4:
		h.EstCost = math.Float32frombits(binary.LittleEndian.Uint32(v[pos:]))
		h.HasEstCost = true
	case 0:
	default:
		h.RoutingMisaligned = true
		return nil
	}
	if len(roles) > 0 {
		h.Roles = roles
	}
	h.ContentHint = uint32(hint)
	h.MaxTokens, h.HasMaxTokens = uint32(maxTokens), h.Flags.HasMaxTokens()
	return nil
}

// parseResponse reads the response header fields from v and returns how
// many bytes of v follow them (the Rust decoder ignores such bytes).
func (h *Header) parseResponse(v []byte) (int, error) {
	id, pos, err := lenPrefixed(v, 0, "id")
	if err != nil {
		return 0, err
	}
	h.ID = id
	model, pos, err := lenPrefixed(v, pos, "model")
	if err != nil {
		return 0, err
	}
	h.Model = model
	if pos >= len(v) {
		return 0, errorf(ErrMalformed, "variable header ends before the finish reason")
	}
	h.FinishReason = FinishReason(v[pos])
	switch h.FinishReason {
	case FinishStop, FinishLength, FinishToolCalls, FinishContentFilter:
	default:
		h.FinishReason = FinishUnknown
	}
	pos++
	var x uint64
	if x, pos, err = varintAt(v, pos, "prompt_tokens"); err != nil {
		return 0, err
	}
	h.PromptTokens = uint32(x)
	if x, pos, err = varintAt(v, pos, "completion_tokens"); err != nil {
		return 0, err
	}
	h.CompletionTokens = uint32(x)
	if h.Flags.HasCachedTokens() {
		if x, pos, err = varintAt(v, pos, "cached_tokens"); err != nil {
			return 0, err
		}
		h.CachedTokens = uint32(x)
	}
	if h.Flags.HasReasoningTokens() {
		if x, pos, err = varintAt(v, pos, "reasoning_tokens"); err != nil {
			return 0, err
		}
		h.ReasoningTokens = uint32(x)
	}
	if h.Flags.HasCostEstimate() && len(v)-pos >= 4 {
		h.EstCost = math.Float32frombits(binary.LittleEndian.Uint32(v[pos:]))
		h.HasEstCost = true
		pos += 4
	}
	return len(v) - pos, nil
}
