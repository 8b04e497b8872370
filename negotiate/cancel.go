package negotiate

import (
	"fmt"
)

// MaxCancelLen is the longest CANCEL message: the kind byte and a 10-byte
// request id.
const MaxCancelLen = 1 + maxUvarintLen

// AppendCancel appends a CANCEL message (docs/protocol.md §4.1) for
// requestID: the kind byte 03 and the request id as a minimal uvarint. It
// may be sent only in a session that negotiated FeatureCancel, on the
// channel the request travels on.
func AppendCancel(dst []byte, requestID uint64) ([]byte, error) {
	if requestID == 0 {
		return dst, fmt.Errorf("%w: request id 0", ErrBadCancel)
	}
	return appendUvarint(append(dst, byte(KindCancel)), requestID), nil
}

// ParseCancel reads a CANCEL message: kind 03, then a non-zero minimal
// uvarint request id, and nothing after it.
func ParseCancel(msg []byte) (uint64, error) {
	if len(msg) == 0 || Kind(msg[0]) != KindCancel {
		return 0, fmt.Errorf("%w: not a CANCEL", ErrBadCancel)
	}
	id, pos, err := readRequestID(msg, 1)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadCancel, err)
	}
	if pos != len(msg) {
		return 0, fmt.Errorf("%w: %d bytes after the request id", ErrBadCancel, len(msg)-pos)
	}
	return id, nil
}
