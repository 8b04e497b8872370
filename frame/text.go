package frame

import (
	"bytes"
	"encoding/base64"

	"github.com/m2md/m2md/internal/bufpool"
)

// b64 is the protocol's Base64: standard alphabet, '=' padding, canonical
// (wire reference §2.2). Strict also refuses non-zero trailing bits; the
// line breaks Go would skip are refused separately by checkNoNewline.
var b64 = base64.StdEncoding.Strict()

func checkNoNewline(s []byte) error {
	if bytes.IndexByte(s, '\n') >= 0 || bytes.IndexByte(s, '\r') >= 0 {
		return errorf(ErrMalformed, "Base64 contains a line break")
	}
	return nil
}

func appendFrameText(dst, json []byte, schema Schema, lim Limits) ([]byte, error) {
	lim = lim.Effective()
	// Header, CRC and Brotli's worst-case expansion fit in the slack.
	bin := bufpool.Get(len(json) + 1024)
	defer bufpool.Put(bin)
	var err error
	if *bin, err = appendFrame((*bin)[:0], json, schema, lim); err != nil {
		return dst, err
	}
	if n := PrefixLen + b64.EncodedLen(len(*bin)-PrefixLen); n > lim.MaxMessage {
		return dst, errorf(ErrLimit, "text frame of %d bytes exceeds the %d-byte message limit", n, lim.MaxMessage)
	}
	dst = append(dst, Prefix...)
	return b64.AppendEncode(dst, (*bin)[PrefixLen:]), nil
}

// ReadTextHeader is ReadHeader for the text shape. It Base64-decodes only
// the start of the text that holds the headers (header_len + 8 bytes) into
// a buffer kept in h and, once h has been used, does not allocate. Model
// and ID alias that buffer. The rest of the Base64 is checked, not
// decoded, with the strictness of the protocol's Base64 (alphabet, padding
// only at the end, canonical trailing bits, no line breaks): a text that
// the full decoder refuses for its Base64 is refused here too. A frame that
// passes can still fail to decode (its payload is not looked at).
func ReadTextHeader(text []byte, h *Header) error {
	if len(text) < PrefixLen || string(text[:PrefixLen]) != Prefix {
		return errorf(ErrBadPrefix, "text frame does not start with %q", Prefix)
	}
	enc := text[PrefixLen:]
	if err := checkBase64(enc); err != nil {
		return err
	}
	// The decoded length, from the length and the padding of the last quad.
	total := PrefixLen + len(enc)/4*3
	if len(enc) > 0 && enc[len(enc)-1] == '=' {
		total--
		if enc[len(enc)-2] == '=' {
			total--
		}
	}

	buf := append(h.text[:0], Prefix...)
	// First the fixed header: 20 bytes are in the first 28 characters.
	buf, err := decodeQuads(buf, enc, 0, (FixedHeaderLen+2)/3*4)
	if err != nil {
		h.text = buf
		return err
	}
	if len(buf) >= MinFrameLen {
		need := int(buf[OffHeaderLen]) | int(buf[OffHeaderLen+1])<<8
		if Security(buf[OffSecurity]) != SecurityAEAD {
			need += 8 // payload_len and crc32
		}
		buf, err = decodeQuads(buf, enc, (FixedHeaderLen+2)/3*4, (need+2)/3*4)
	}
	h.text = buf
	if err != nil {
		return err
	}
	return parseHeader(buf, total, h)
}

// checkBase64 refuses what the strict decoder (b64) refuses, without
// decoding: a length that is not a multiple of 4, a character outside the
// alphabet (line breaks included), padding anywhere but the last one or two
// characters, and padding whose preceding character carries bits the
// decoded bytes would drop (non-canonical). One table lookup per character.
func checkBase64(enc []byte) error {
	if len(enc)%4 != 0 {
		return errorf(ErrMalformed, "Base64 of %d characters is not padded to a multiple of 4", len(enc))
	}
	n := len(enc)
	pad := 0
	if n > 0 && enc[n-1] == '=' {
		pad = 1
		if enc[n-2] == '=' {
			pad = 2
		}
	}
	for i, c := range enc[:n-pad] {
		if b64Value[c] == 0xff {
			return errorf(ErrMalformed, "Base64: invalid character %q at %d", c, i)
		}
	}
	// "xy==" carries one byte: y's low 4 bits are left over and must be 0;
	// "xyz=" carries two: z's low 2 bits.
	mask := byte(0x03)
	if pad == 2 {
		mask = 0x0f
	}
	if pad > 0 && b64Value[enc[n-pad-1]]&mask != 0 {
		return errorf(ErrMalformed, "Base64: non-canonical padding (bits set after the last byte)")
	}
	return nil
}

// decodeQuads appends the Base64 decoding of enc[from:to], clamped to
// enc, to dst. from and to are multiples of 4. It decodes the few dozen
// characters of a header with a table, which is several times faster than
// encoding/base64 at that size; any quad the table cannot handle (padding,
// an invalid character) goes to encoding/base64's strict decoder.
func decodeQuads(dst, enc []byte, from, to int) ([]byte, error) {
	to = min(to, len(enc))
	for i := from; i < to; i += 4 {
		q := enc[i : i+4 : i+4]
		a, b, c, d := b64Value[q[0]], b64Value[q[1]], b64Value[q[2]], b64Value[q[3]]
		if a|b|c|d < 64 {
			dst = append(dst, a<<2|b>>4, b<<4|c>>2, c<<6|d)
			continue
		}
		// Padding is only legal in the last quad of the whole text, and
		// line breaks nowhere; encoding/base64 would accept both here.
		if i+4 < len(enc) && bytes.IndexByte(q, '=') >= 0 {
			return dst, errorf(ErrMalformed, "Base64 padding before the end")
		}
		if err := checkNoNewline(q); err != nil {
			return dst, err
		}
		var out [3]byte
		n, err := b64.Decode(out[:], q)
		if err != nil {
			return dst, errorf(ErrMalformed, "Base64 at character %d: %v", i, err)
		}
		dst = append(dst, out[:n]...)
	}
	return dst, nil
}

// b64Value maps a Base64 character to its 6-bit value, anything else to 0xff.
var b64Value = func() (t [256]byte) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = byte(i)
	}
	return t
}()

// IsTextShape reports whether fr looks like a text-shape M2M v1 frame
// ("#M2M|1|" + Base64) rather than the binary shape: the four characters
// after the prefix are Base64, where a binary frame has its header length,
// schema and security byte (the last never a Base64 character). A receiver
// that expects the binary shape can then say what it got instead of
// misreading Base64 as a security mode.
func IsTextShape(fr []byte) bool {
	if len(fr) < PrefixLen+4 || string(fr[:PrefixLen]) != Prefix {
		return false
	}
	for _, c := range fr[PrefixLen : PrefixLen+4] {
		if b64Value[c] == 0xff {
			return false
		}
	}
	return true
}
