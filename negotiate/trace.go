package negotiate

import (
	"errors"
	"fmt"
)

// The trace block of a traced request (feature trace, docs/protocol.md
// §4.8): a W3C trace context in binary, after the DATA header's peer.
//
//	0   16  trace-id, not all zero
//	16  8   parent-id (the sender's span), not all zero
//	24  1   trace-flags
//	25  1   tracestate length S (0-255)
//	26  S   tracestate, bytes 20-7e
const (
	// TraceIDLen and SpanIDLen are the W3C trace-id and parent-id sizes.
	TraceIDLen = 16
	SpanIDLen  = 8
	// MaxTraceStateLen bounds the tracestate a trace block carries.
	MaxTraceStateLen = 255
	// MaxTraceLen is the longest trace block.
	MaxTraceLen = traceFixedLen + MaxTraceStateLen

	traceFixedLen = TraceIDLen + SpanIDLen + 2
)

// Trace is a W3C trace context as a trace block carries it.
type Trace struct {
	TraceID [TraceIDLen]byte
	SpanID  [SpanIDLen]byte
	Flags   byte
	// State is the tracestate header's value, "" when absent: at most
	// MaxTraceStateLen bytes of 20-7e.
	State string
}

// AppendTrace appends t's trace block to dst. It refuses what ParseData
// would refuse: a zero trace or span id, a tracestate too long or outside
// 20-7e.
func AppendTrace(dst []byte, t *Trace) ([]byte, error) {
	if t.TraceID == ([TraceIDLen]byte{}) || t.SpanID == ([SpanIDLen]byte{}) {
		return dst, fmt.Errorf("%w: trace block with a zero trace-id or parent-id", ErrBadDataHeader)
	}
	if err := checkTraceState(t.State); err != nil {
		return dst, fmt.Errorf("%w: %w", ErrBadDataHeader, err)
	}
	dst = append(dst, t.TraceID[:]...)
	dst = append(dst, t.SpanID[:]...)
	dst = append(dst, t.Flags, byte(len(t.State)))
	return append(dst, t.State...), nil
}

// ParseTrace reads a trace block (DataHeader.Trace).
func ParseTrace(b []byte) (Trace, error) {
	var t Trace
	n, err := traceLen(b)
	if err != nil {
		return t, fmt.Errorf("%w: %w", ErrBadDataHeader, err)
	}
	if n != len(b) {
		return t, fmt.Errorf("%w: %d bytes after the trace block", ErrBadDataHeader, len(b)-n)
	}
	copy(t.TraceID[:], b)
	copy(t.SpanID[:], b[TraceIDLen:])
	t.Flags = b[TraceIDLen+SpanIDLen]
	t.State = string(b[traceFixedLen:])
	return t, nil
}

// TraceLen checks the trace block at the start of b and returns its
// length; what follows it is not read.
func TraceLen(b []byte) (int, error) {
	n, err := traceLen(b)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadDataHeader, err)
	}
	return n, nil
}

func traceLen(b []byte) (int, error) {
	if len(b) < traceFixedLen {
		return 0, fmt.Errorf("trace block truncated: %d of at least %d bytes", len(b), traceFixedLen)
	}
	if allZero(b[:TraceIDLen]) || allZero(b[TraceIDLen:TraceIDLen+SpanIDLen]) {
		return 0, errors.New("trace block with a zero trace-id or parent-id")
	}
	s := int(b[traceFixedLen-1])
	if len(b)-traceFixedLen < s {
		return 0, fmt.Errorf("tracestate of %d bytes exceeds the remaining %d", s, len(b)-traceFixedLen)
	}
	for _, c := range b[traceFixedLen : traceFixedLen+s] {
		if c < 0x20 || c > 0x7e {
			return 0, fmt.Errorf("tracestate byte %#02x outside 20-7e", c)
		}
	}
	return traceFixedLen + s, nil
}

func checkTraceState(s string) error {
	if len(s) > MaxTraceStateLen {
		return fmt.Errorf("tracestate of %d bytes exceeds %d", len(s), MaxTraceStateLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("tracestate byte %#02x outside 20-7e", s[i])
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
