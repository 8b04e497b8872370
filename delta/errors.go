package delta

import (
	"errors"
	"fmt"
)

// Errors returned by this package wrap one of these sentinels (test with
// errors.Is); limit errors wrap frame.ErrLimit instead.
var (
	// ErrNoBase: the frame is a delta and no base was given (the receiver
	// does not hold it). A provider answers base_missing.
	ErrNoBase = errors.New("delta: base not held")
	// ErrBaseMismatch: the document reconstructed with the given base fails
	// the frame's CRC-32: the sender used another base. A provider answers
	// base_missing.
	ErrBaseMismatch = errors.New("delta: reconstructed document fails the frame's CRC-32 (wrong base)")
	// ErrCorrupt: the delta is not a zstd frame of the form §4.3 allows,
	// or does not decode.
	ErrCorrupt = errors.New("delta: corrupt delta")
	// ErrNotDelta: AppendDecodeFrame was given a frame whose extension
	// block does not say DELTA.
	ErrNotDelta = errors.New("delta: frame is not a delta")
	// ErrTooLarge: base and document together exceed MaxSpan, the most a
	// delta is encoded across; send the document in full.
	ErrTooLarge = errors.New("delta: base and document too large for a delta")
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}
