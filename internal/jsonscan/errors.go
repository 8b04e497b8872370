package jsonscan

import (
	"errors"
	"strconv"
)

// Sentinel errors wrapped by every *Error the scanner returns.
var (
	// ErrSyntax: the input is not a JSON document (RFC 8259 plus the
	// serde_json rules in the package comment).
	ErrSyntax = errors.New("jsonscan: invalid JSON")
	// ErrDepth: arrays and objects nest deeper than Limits.MaxDepth.
	ErrDepth = errors.New("jsonscan: nesting too deep")
	// ErrStringTooLong: a string or key is longer than Limits.MaxString bytes as written.
	ErrStringTooLong = errors.New("jsonscan: string too long")
	// ErrArrayTooLong: an array has more than Limits.MaxArray elements.
	ErrArrayTooLong = errors.New("jsonscan: array too long")
)

// Error reports where and why a scan failed.
type Error struct {
	// Err is one of the sentinel errors above.
	Err error
	// Offset is the byte offset in the input where the failure was detected.
	Offset int
	// Reason says what was wrong, e.g. "unterminated string".
	Reason string
}

func (e *Error) Error() string {
	return e.Err.Error() + ": " + e.Reason + " at offset " + strconv.Itoa(e.Offset)
}

// Unwrap lets errors.Is match the sentinel.
func (e *Error) Unwrap() error { return e.Err }

func syntaxErr(off int, reason string) error {
	return &Error{Err: ErrSyntax, Offset: off, Reason: reason}
}
