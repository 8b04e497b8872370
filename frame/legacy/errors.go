package legacy

import (
	"errors"
	"strconv"
)

// Sentinel errors. Every error returned by this package is an *Error whose
// Kind is one of these, so callers test with errors.Is and never parse text.
var (
	// ErrMalformed reports input that carries a legacy prefix but whose body
	// is not what that form requires (bad Base64, corrupt zlib stream,
	// invalid JSON, …).
	ErrMalformed = errors.New("malformed input")
	// ErrLimit reports input or output that exceeds a frame.Limits bound.
	ErrLimit = errors.New("limit exceeded")
	// ErrNotUTF8 reports text that is not valid UTF-8.
	ErrNotUTF8 = errors.New("not valid UTF-8")
	// ErrNonASCII reports a byte the dictionary codec cannot carry: m2md's
	// dictionary form is ASCII-only (wire reference §12, row 42).
	ErrNonASCII = errors.New("non-ASCII content")
)

// Error describes why a legacy encoder or decoder refused its input.
// It never quotes the input itself, so it is safe to log.
type Error struct {
	// Codec names the wire form: "t1", "zlib" or "dictionary".
	Codec string
	// Kind is one of the package's sentinel errors.
	Kind error
	// Offset is the byte offset in the input where the problem was found,
	// or -1 when the problem is not tied to a position. For DecodeT1 it
	// counts from the start of the JSON text, after the "#T1|" prefix and
	// after pattern expansion.
	Offset int
	// Detail says what was wrong, without payload bytes.
	Detail string
}

func (e *Error) Error() string {
	s := "legacy " + e.Codec + ": " + e.Kind.Error()
	if e.Offset >= 0 {
		s += " at byte " + strconv.Itoa(e.Offset)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap makes errors.Is(err, ErrMalformed) and friends work.
func (e *Error) Unwrap() error { return e.Kind }

func newError(codec string, kind error, offset int, detail string) *Error {
	return &Error{Codec: codec, Kind: kind, Offset: offset, Detail: detail}
}

const (
	codecT1         = "t1"
	codecZlib       = "zlib"
	codecDictionary = "dictionary"
)
