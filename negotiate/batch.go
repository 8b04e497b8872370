package negotiate

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrBadBatch reports the JSON of a batch reply (FlagBatch) that is not an
// array of one or more chunks (docs/protocol.md §4.4).
var ErrBadBatch = errors.New("negotiate: malformed batch of stream chunks")

// Batch sizes (docs/protocol.md §4.4): a batch carries at most MaxBatchJSON
// bytes of JSON, and the daemon marks a delivery BATCH only when both
// sessions' max_payload is at least MinBatchPayload, so that every batch
// fits both (Brotli never grows 64 KiB by more than a few bytes; the
// frame's headers and tag are well under 1 KiB).
const (
	MaxBatchJSON    = 64 << 10
	MinBatchPayload = 2 * MaxBatchJSON
)

// maxBatchDepth bounds the nesting SplitBatch follows, as the codec's JSON
// rules do (wire reference §2.5).
const maxBatchDepth = 128

// AppendBatch appends the JSON of a batch reply carrying chunks, in order:
// "[" chunk ("," chunk)* "]", each chunk byte for byte, nothing between.
func AppendBatch(dst []byte, chunks [][]byte) []byte {
	dst = append(dst, '[')
	for i, c := range chunks {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, c...)
	}
	return append(dst, ']')
}

// SplitBatch appends to dst the chunks of a batch reply's JSON, each the
// bytes between the array's separators as they were sent (subslices of b).
// It checks the array's structure (strings, brackets matched, one or more
// non-blank elements, nothing after the array), not each chunk's JSON: a
// chunk is passed on as a chunk of its own would be.
func SplitBatch(dst [][]byte, b []byte) ([][]byte, error) {
	if len(b) < 3 || b[0] != '[' || b[len(b)-1] != ']' {
		return dst, fmt.Errorf("%w: not a JSON array of chunks", ErrBadBatch)
	}
	var open [maxBatchDepth]byte // the closing bracket each open one needs
	depth, start := 0, 1
	n := len(dst)
	add := func(el []byte) error {
		for _, c := range el {
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				dst = append(dst, el)
				return nil
			}
		}
		return fmt.Errorf("%w: empty element %d", ErrBadBatch, len(dst)-n)
	}
	last := len(b) - 1 // the closing bracket
	for i := 1; i < last; i++ {
		switch b[i] {
		case '"':
			// Skip the string: most of a chunk's bytes are in strings.
			end := skipString(b[:last], i+1)
			if end < 0 {
				return dst[:n], fmt.Errorf("%w: unterminated string", ErrBadBatch)
			}
			i = end
		case '[', '{':
			if depth == maxBatchDepth {
				return dst[:n], fmt.Errorf("%w: nested deeper than %d", ErrBadBatch, maxBatchDepth)
			}
			open[depth] = b[i] + 2 // ']' = '[' + 2, '}' = '{' + 2
			depth++
		case ']', '}':
			if depth == 0 || open[depth-1] != b[i] {
				return dst[:n], fmt.Errorf("%w: unmatched %q at byte %d", ErrBadBatch, b[i], i)
			}
			depth--
		case ',':
			if depth == 0 {
				if err := add(b[start:i:i]); err != nil {
					return dst[:n], err
				}
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return dst[:n], fmt.Errorf("%w: unterminated bracket", ErrBadBatch)
	}
	if err := add(b[start : len(b)-1 : len(b)-1]); err != nil {
		return dst[:n], err
	}
	return dst, nil
}

// skipString returns the index of the quote that closes the string whose
// content starts at b[i], or -1 when b ends first.
func skipString(b []byte, i int) int {
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		e := bytes.IndexByte(b[i:i+q], '\\')
		if e < 0 {
			return i + q
		}
		i += e + 2 // the backslash and the byte it escapes
		if i > len(b) {
			return -1
		}
	}
}
