package frame

import (
	"unicode/utf8"

	"github.com/m2md/m2md/internal/bufpool"
)

// brotliTextPrefix starts the Brotli text form (wire reference §6.1):
// the prefix, then the Base64 of a Brotli stream, nothing else.
const brotliTextPrefix = "#M2M[v3.0]|DATA:"

// brotliTextDetect is what the Rust engine detects the form by; text that
// starts with it but lacks "DATA:" is an error, not passthrough.
const brotliTextDetect = "#M2M[v3.0]|"

// AppendEncodeBrotliText appends the Brotli text form of data to dst:
// quality 11 as in the Rust reference, with a window of up to 22 bits
// (the reference's) but no larger than the input needs, which changes the
// stream header but not the compression (see textWindows). data may be any UTF-8 text,
// not only JSON; it must fit lim.MaxDecompressed, and the result
// lim.MaxMessage, so that AppendDecodeBrotliText with the same limits
// accepts it.
func AppendEncodeBrotliText(dst, data []byte, lim Limits) ([]byte, error) {
	lim = lim.Effective()
	if len(data) > lim.MaxDecompressed {
		return dst, errorf(ErrLimit, "text of %d bytes exceeds the %d-byte limit", len(data), lim.MaxDecompressed)
	}
	if !utf8.Valid(data) {
		return dst, errorf(ErrMalformed, "text is not valid UTF-8")
	}
	comp := bufpool.Get(len(data)/2 + 1024)
	defer bufpool.Put(comp)
	var err error
	if *comp, err = appendBrotli((*comp)[:0], data, textWriters(len(data))); err != nil {
		return dst, err
	}
	if n := len(brotliTextPrefix) + b64.EncodedLen(len(*comp)); n > lim.MaxMessage {
		return dst, errorf(ErrLimit, "encoded text of %d bytes exceeds the %d-byte message limit", n, lim.MaxMessage)
	}
	dst = append(dst, brotliTextPrefix...)
	return b64.AppendEncode(dst, *comp), nil
}

// AppendDecodeBrotliText decodes the Brotli text form and appends the
// text to dst. Input starting with "#M2M[v3.0]|" but not with the full
// prefix fails with ErrBadPrefix, as in the Rust engine. The output is
// bounded by lim.MaxDecompressed while decompressing and must be UTF-8.
// On error dst is returned unchanged.
func AppendDecodeBrotliText(dst, text []byte, lim Limits) ([]byte, error) {
	lim = lim.Effective()
	if len(text) > lim.MaxMessage {
		return dst, errorf(ErrLimit, "text of %d bytes exceeds the %d-byte message limit", len(text), lim.MaxMessage)
	}
	if len(text) < len(brotliTextPrefix) || string(text[:len(brotliTextPrefix)]) != brotliTextPrefix {
		return dst, errorf(ErrBadPrefix, "Brotli text form does not start with %q", brotliTextPrefix)
	}
	enc := text[len(brotliTextPrefix):]
	if err := checkNoNewline(enc); err != nil {
		return dst, err
	}
	comp := bufpool.Get(b64.DecodedLen(len(enc)))
	defer bufpool.Put(comp)
	n, err := b64.Decode(*comp, enc)
	if err != nil {
		return dst, errorf(ErrMalformed, "Base64: %v", err)
	}
	start := len(dst)
	if dst, err = appendUnbrotli(dst, (*comp)[:n], lim.MaxDecompressed); err != nil {
		return dst, err
	}
	if !utf8.Valid(dst[start:]) {
		return dst[:start], errorf(ErrMalformed, "decompressed text is not valid UTF-8")
	}
	return dst, nil
}
