package frame

import (
	"errors"
	"fmt"
)

// Errors returned by this package wrap one of these sentinels (test with
// errors.Is) and add what was wrong, e.g.
// "frame: truncated: payload_len 123 exceeds the 40 bytes left".
var (
	// ErrBadPrefix: the input does not start with the expected prefix
	// ("#M2M|1|", or "#M2M[v3.0]|DATA:" for the Brotli text form).
	ErrBadPrefix = errors.New("frame: bad prefix")
	// ErrTruncated: the input ends before a field it announces.
	ErrTruncated = errors.New("frame: truncated")
	// ErrMalformed: a field has an impossible value (header_len < 20, bad
	// Base64, a broken Brotli stream, a payload that is not UTF-8, ...).
	ErrMalformed = errors.New("frame: malformed")
	// ErrChecksum: the payload's CRC-32 differs from the frame's.
	ErrChecksum = errors.New("frame: checksum mismatch")
	// ErrLimit: the input or its decompressed payload exceeds Limits.
	ErrLimit = errors.New("frame: limit exceeded")
	// ErrEncrypted: the frame is in AEAD mode (security 02); decrypt it
	// with the security package before decoding the payload.
	ErrEncrypted = errors.New("frame: payload is encrypted, decrypt it first")
	// ErrInvalidJSON: the document to encode, or a decoded payload, is not
	// JSON. An M2M v1 frame only ever carries JSON.
	ErrInvalidJSON = errors.New("frame: invalid JSON")
	// ErrFieldTooLong: a model or id to write in a header is longer than
	// the 255 bytes its length byte can describe (wire reference §12).
	ErrFieldTooLong = errors.New("frame: header field longer than 255 bytes")
	// ErrSchema: AppendEncodeSchema was given a schema byte the wire
	// reference does not define, or an extension block was to be written
	// on a frame that is not a chat request.
	ErrSchema = errors.New("frame: undefined schema")
	// ErrDelta: the frame's payload is a delta against a base document
	// (extension block with DELTA, docs/protocol.md §4.3); decode it with
	// package delta, which holds the base.
	ErrDelta = errors.New("frame: delta payload needs its base")
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}
