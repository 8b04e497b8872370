package frame

import (
	"encoding/binary"
	"math"
	"slices"
)

// The compact form of an M2M v1 frame (docs/protocol.md §4.5, feature
// `compact`): the same frame without the bytes a receiver knows or can
// derive (prefix, reserved flags byte, channel id, header_len, payload_len),
// the integers of the fixed header as minimal uvarints, and a plain reply
// delta's schema, flags and variable header in one bit (RD).
//
//	43 ‖ shape ‖ [schema ‖ specific flags ‖ V ‖ variable header]  (absent with RD)
//	   ‖ sequence ‖ rest
//
// A compact frame is only a re-encoding: the sender protects the M2M v1
// frame first and compacts it, the receiver rebuilds it byte for byte
// (AppendExpand) before verifying or reading it. The encoding is canonical:
// a frame has exactly one compact form, and AppendExpand refuses any other
// spelling of it.

// CompactMarker is the first byte of a compact frame (docs/protocol.md §4.5).
const CompactMarker = 0x43

// MaxCompactGrowth is how many bytes longer than a compact frame the M2M v1
// frame it stands for can be (docs/protocol.md §4.5): a plain reply delta
// (RD) with a 1-byte sequence in mode none or hmac. A receiver that bounds
// the compact form by max_payload holds at most this much more.
const MaxCompactGrowth = 35

// The shape byte (offset 1).
const (
	shapeSecurity   = 0x03   // bits 0–1: the security byte
	shapeCompressed = 1 << 2 // common flags 03 (else 02)
	shapeRD         = 1 << 3 // a plain reply delta: schema, flags and variable header implied
	shapeKnown      = shapeSecurity | shapeCompressed | shapeRD
)

// Bounds of the compact form's fields and the protected frame's trailers
// (wire reference §4.1, §4.2).
const (
	maxSpecificLen  = 3                               // uvarint bytes of the specific flags (u16)
	maxVarHeaderLen = 3                               // uvarint bytes of V
	maxVarHeader    = math.MaxUint16 - FixedHeaderLen // V ≤ 65515: header_len is a u16
	compactHMACTag  = 32                              // HMAC-SHA256 tag after the payload
	compactAEADRest = 12 + 8 + 16                     // nonce, sealed payload_len and crc32, Poly1305 tag
)

// commonExt and commonExtCompressed are the common flags bytes (offset 14)
// a compact frame can stand for.
const (
	commonExt           = byte(FlagHasExtensions >> 24)
	commonExtCompressed = byte((FlagHasExtensions | FlagCompressed) >> 24)
)

// rdVarHeader is the variable header RD stands for: response fields id and
// model empty, finish_reason ff, prompt and completion tokens 0, then the
// reply delta's block 01 01.
var rdVarHeader = [...]byte{0x00, 0x00, 0xff, 0x00, 0x00, 0x01, 0x01}

// AppendCompact appends to dst the compact form of fr, a protected M2M v1
// frame (binary shape) that is sent on channel ch, and reports whether fr
// may be written compactly (docs/protocol.md §4.5 "What can be compact");
// when it may not, it returns dst unchanged and false. Besides the rules of
// §4.5 a frame in mode none or hmac must carry at least 1 byte of payload,
// and one in mode aead at least 36 bytes after its headers: what a reader
// accepts (AppendExpand), so that every compact frame written reads back.
//
// dst may be fr[:0]: the compact form is always shorter, and every byte is
// written before the bytes still to be read, so fr is compacted in place
// without a copy or an allocation. Any other dst must not overlap fr. It
// does not check the session's mode: that is the caller's.
func AppendCompact(dst, fr []byte, ch uint32) ([]byte, bool) {
	if len(fr) < MinFrameLen || string(fr[:PrefixLen]) != Prefix {
		return dst, false
	}
	headerLen := int(binary.LittleEndian.Uint16(fr[OffHeaderLen:]))
	end := PrefixLen + headerLen
	schema, sec := Schema(fr[OffSchema]), Security(fr[OffSecurity])
	common := fr[OffFlags+3]
	switch {
	case common != commonExt && common != commonExtCompressed,
		fr[OffFlags+2] != 0,
		binary.LittleEndian.Uint32(fr[OffChannel:]) != ch,
		schema != SchemaRequest && schema != SchemaResponse,
		sec > SecurityAEAD,
		headerLen < FixedHeaderLen, end > len(fr):
		return dst, false
	}
	restAt := end
	if sec == SecurityAEAD {
		if len(fr)-end < compactAEADRest {
			return dst, false
		}
	} else {
		tag := 0
		if sec == SecurityHMAC {
			tag = compactHMACTag
		}
		payload := len(fr) - end - 8 - tag
		if payload < 1 || uint64(binary.LittleEndian.Uint32(fr[end:])) != uint64(payload) {
			return dst, false
		}
		restAt = end + 4
	}
	specific := binary.LittleEndian.Uint16(fr[OffFlags:])
	seq := binary.LittleEndian.Uint64(fr[OffSequence:])
	v := fr[OffVarHeader:end]
	shape := byte(sec)
	switch {
	case common == commonExtCompressed:
		shape |= shapeCompressed
	case schema == SchemaResponse && specific == 0 && string(v) == string(rdVarHeader[:]):
		shape |= shapeRD
	}

	// The fixed header is read: from here on dst may overwrite it. Each
	// write ends before what is still to be read (at most 9 bytes before
	// v, which starts at 27; at most 19 + len(v) before the rest, which
	// starts at 27 + len(v) or later), and appendMove copies overlapping
	// bytes correctly.
	dst = append(dst, CompactMarker, shape)
	if shape&shapeRD == 0 {
		dst = append(dst, byte(schema))
		dst = binary.AppendUvarint(dst, uint64(specific))
		dst = binary.AppendUvarint(dst, uint64(len(v)))
		dst = appendMove(dst, v)
	}
	dst = binary.AppendUvarint(dst, seq)
	return appendMove(dst, fr[restAt:]), true
}

// appendMove appends src to dst where src may overlap dst's spare
// capacity (copy is a memmove; the language leaves append's behaviour on
// overlap unsaid).
func appendMove(dst, src []byte) []byte {
	dst = slices.Grow(dst, len(src))
	n := len(dst)
	dst = dst[:n+len(src)]
	copy(dst[n:], src)
	return dst
}

// AppendExpand appends to dst the M2M v1 frame that the compact frame c
// (first byte CompactMarker), received on channel ch, stands for, byte for
// byte (docs/protocol.md §4.5 "Rebuilding"). It refuses what §4.5 "A reader
// refuses" lists, except the session-level "session without compact",
// and a frame without RD that spells out the bytes RD stands for (not the
// canonical form, which AppendCompact would never write): input that ends
// early (a uvarint, the variable header or the rest running past the end)
// with an error wrapping ErrTruncated, any other refusal with ErrMalformed,
// and c not starting with CompactMarker with ErrBadPrefix. dst is then
// returned unchanged.
//
// It checks nothing of the rebuilt frame beyond what rebuilding needs:
// verification and the header rules of §4.3 are the caller's. dst must not
// overlap c. The rebuilt frame is at most MaxCompactGrowth bytes longer
// than c.
func AppendExpand(dst, c []byte, ch uint32) ([]byte, error) {
	if len(c) == 0 || c[0] != CompactMarker {
		return dst, errorf(ErrBadPrefix, "compact frame does not start with %#02x", CompactMarker)
	}
	if len(c) < 2 {
		return dst, errorf(ErrTruncated, "compact frame ends before its shape byte")
	}
	shape := c[1]
	switch {
	case shape&^shapeKnown != 0:
		return dst, errorf(ErrMalformed, "compact: shape %#02x has bits set outside 0-3", shape)
	case shape&shapeSecurity > byte(SecurityAEAD):
		return dst, errorf(ErrMalformed, "compact: security %#02x in the shape byte", shape&shapeSecurity)
	case shape&shapeRD != 0 && shape&shapeCompressed != 0:
		return dst, errorf(ErrMalformed, "compact: RD together with COMPRESSED")
	}
	sec := Security(shape & shapeSecurity)
	compressed := shape&shapeCompressed != 0

	pos := 2
	schema, specific, v := SchemaResponse, uint64(0), rdVarHeader[:]
	if shape&shapeRD == 0 {
		if pos == len(c) {
			return dst, errorf(ErrTruncated, "compact: frame ends before its schema byte")
		}
		schema = Schema(c[pos])
		pos++
		if schema != SchemaRequest && schema != SchemaResponse {
			return dst, errorf(ErrMalformed, "compact: schema %#02x, only 01 and 02 can be compact", byte(schema))
		}
		var err error
		if specific, pos, err = compactUvarint(c, pos, maxSpecificLen, "specific flags"); err != nil {
			return dst, err
		}
		if specific > math.MaxUint16 {
			return dst, errorf(ErrMalformed, "compact: specific flags %d above 65535", specific)
		}
		var n uint64
		if n, pos, err = compactUvarint(c, pos, maxVarHeaderLen, "variable header length"); err != nil {
			return dst, err
		}
		if n > maxVarHeader {
			return dst, errorf(ErrMalformed, "compact: variable header length %d above %d", n, maxVarHeader)
		}
		if n > uint64(len(c)-pos) {
			return dst, errorf(ErrTruncated, "compact: variable header of %d bytes runs past the %d left", n, len(c)-pos)
		}
		v = c[pos : pos+int(n)]
		pos += int(n)
		if schema == SchemaResponse && specific == 0 && !compressed && string(v) == string(rdVarHeader[:]) {
			return dst, errorf(ErrMalformed, "compact: a plain reply delta written without RD")
		}
	}
	seq, pos, err := compactUvarint(c, pos, maxUvarintLen, "sequence")
	if err != nil {
		return dst, err
	}
	rest := c[pos:]
	var payloadLen int
	switch sec {
	case SecurityAEAD:
		if len(rest) < compactAEADRest {
			return dst, errorf(ErrTruncated, "compact: %d bytes after the sequence, aead needs at least %d", len(rest), compactAEADRest)
		}
	default:
		tag := 0
		if sec == SecurityHMAC {
			tag = compactHMACTag
		}
		if payloadLen = len(rest) - 4 - tag; payloadLen < 1 {
			return dst, errorf(ErrTruncated, "compact: %d bytes after the sequence, %s needs at least %d", len(rest), sec, 4+1+tag)
		}
		if uint64(payloadLen) > math.MaxUint32 {
			return dst, errorf(ErrMalformed, "compact: payload of %d bytes does not fit payload_len", payloadLen)
		}
	}

	common := commonExt
	if compressed {
		common = commonExtCompressed
	}
	dst = slices.Grow(dst, MinFrameLen+len(v)+4+len(rest))
	dst = append(dst, Prefix...)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(FixedHeaderLen+len(v)))
	dst = append(dst, byte(schema), byte(sec))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(specific))
	dst = append(dst, 0, common)
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	dst = binary.LittleEndian.AppendUint32(dst, ch)
	dst = append(dst, v...)
	if sec != SecurityAEAD {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(payloadLen))
	}
	return append(dst, rest...), nil
}

// compactUvarint reads the uvarint at b[pos:], of at most maxLen bytes,
// minimal and within 64 bits, and returns it and the position after it.
func compactUvarint(b []byte, pos, maxLen int, what string) (uint64, int, error) {
	w := b[pos:]
	if len(w) > maxLen {
		w = w[:maxLen]
	}
	x, n := binary.Uvarint(w)
	switch {
	case n == 0 && len(w) == maxLen:
		return 0, 0, errorf(ErrMalformed, "compact: %s longer than %d bytes", what, maxLen)
	case n == 0:
		return 0, 0, errorf(ErrTruncated, "compact: %s runs past the end", what)
	case n < 0:
		return 0, 0, errorf(ErrMalformed, "compact: %s overflows 64 bits", what)
	case n > 1 && w[n-1] == 0:
		return 0, 0, errorf(ErrMalformed, "compact: %s is not minimally encoded", what)
	}
	return x, pos + n, nil
}
