package legacy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"slices"
	"sync"
)

// strictBase64 matches the Rust base64 crate's STANDARD engine: standard
// alphabet, canonical '=' padding, no non-zero trailing bits. Go's decoder
// also skips '\r' and '\n', which Rust rejects, so decodeBase64 refuses
// them first (wire reference §2.2).
var strictBase64 = base64.StdEncoding.Strict()

// decodeBase64 decodes body into scratch (reused) and returns the decoded
// bytes. bodyOffset is where body starts in the caller's input, for errors.
func decodeBase64(codec string, scratch, body []byte, bodyOffset int) ([]byte, error) {
	if i := bytes.IndexAny(body, "\r\n"); i >= 0 {
		return nil, newError(codec, ErrMalformed, bodyOffset+i, "line break in the Base64 body")
	}
	n := strictBase64.DecodedLen(len(body))
	scratch = slices.Grow(scratch[:0], n)[:n]
	m, err := strictBase64.Decode(scratch, body)
	if err != nil {
		off := -1
		var ce base64.CorruptInputError
		if errors.As(err, &ce) {
			off = bodyOffset + int(ce)
		}
		return nil, newError(codec, ErrMalformed, off, "invalid Base64 body")
	}
	return scratch[:m], nil
}

// bufPool recycles scratch byte slices between calls.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > maxPooledBytes {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}
