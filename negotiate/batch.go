package negotiate

import (
	"errors"
	"fmt"
)

// ErrBadBatch reports the JSON of a batch reply (FlagBatch) that is not an
// array of one or more chunks (docs/protocol.md §4.4).
var ErrBadBatch = errors.New("negotiate: malformed batch of stream chunks")

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
	depth, start, inString, escaped := 0, 1, false, false
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
	for i := 1; i < len(b)-1; i++ {
		c := b[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth == maxBatchDepth {
				return dst[:n], fmt.Errorf("%w: nested deeper than %d", ErrBadBatch, maxBatchDepth)
			}
			open[depth] = c + 2 // ']' = '[' + 2, '}' = '{' + 2
			depth++
		case ']', '}':
			if depth == 0 || open[depth-1] != c {
				return dst[:n], fmt.Errorf("%w: unmatched %q at byte %d", ErrBadBatch, c, i)
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
	if inString || depth != 0 {
		return dst[:n], fmt.Errorf("%w: unterminated string or bracket", ErrBadBatch)
	}
	if err := add(b[start : len(b)-1 : len(b)-1]); err != nil {
		return dst[:n], err
	}
	return dst, nil
}
