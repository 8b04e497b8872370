package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// Kind is the type of a JSON value.
type Kind uint8

const (
	KindNone Kind = iota
	KindObject
	KindArray
	KindString
	KindNumber
	KindTrue
	KindFalse
	KindNull
)

// scanner walks one document. It is a recursive-descent parser: one call
// per nested container, bounded by maxDepth, so the Go stack stays small.
// Scalars are reported through the fields str, u64, u64ok and arrLen rather
// than return values: the caller reads them right after the value returns,
// before anything else can overwrite them.
type scanner struct {
	data []byte
	pos  int
	lim  Limits

	// Results of the last value scanned.
	str    Str
	u64    uint64
	u64ok  bool
	num    float64 // serde_json's as_f64 of the last number
	numInt bool    // serde_json keeps the last number as an integer
	arrLen int

	sum  *Summary // nil when only validating or listing keys
	msg  msgState
	part partState

	keys Key // well-known top-level keys seen

	tree *Doc // Parse mode
}

// Validate reports whether data is one JSON document within lim.
func Validate(data []byte, lim Limits) error {
	s := scanner{data: data, lim: lim.effective()}
	return s.document(ctxNone)
}

// TopLevelKeys validates data and returns the set of well-known keys
// (KeyModel, KeyMessages, KeyChoices, ...) present at the top level of an
// object document. Keys are compared after decoding escapes, as serde_json
// does. A document whose top level is not an object has no keys.
func TopLevelKeys(data []byte, lim Limits) (Key, error) {
	s := scanner{data: data, lim: lim.effective()}
	if err := s.document(ctxKeys); err != nil {
		return 0, err
	}
	return s.keys, nil
}

func (s *scanner) document(top ctx) error {
	s.skipSpace()
	start := s.pos
	kind, err := s.value(0, top)
	if err != nil {
		return err
	}
	if top == ctxTree {
		s.tree.push(s, kind, start, Str{}, 0)
	}
	s.skipSpace()
	if s.pos != len(s.data) {
		return syntaxErr(s.pos, "trailing characters after the document")
	}
	return nil
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\n', '\r', '\t':
			s.pos++
		default:
			return
		}
	}
}

// value scans the value at s.pos (no leading space). depth is the number
// of containers enclosing it.
func (s *scanner) value(depth int, c ctx) (Kind, error) {
	if s.pos >= len(s.data) {
		return KindNone, syntaxErr(s.pos, "unexpected end of input, expected a value")
	}
	switch b := s.data[s.pos]; b {
	case '{':
		return KindObject, s.object(depth+1, c)
	case '[':
		return KindArray, s.array(depth+1, c)
	case '"':
		return KindString, s.string()
	case 't':
		return KindTrue, s.literal("true")
	case 'f':
		return KindFalse, s.literal("false")
	case 'n':
		return KindNull, s.literal("null")
	default:
		if b == '-' || (b >= '0' && b <= '9') {
			return KindNumber, s.number()
		}
		return KindNone, syntaxErr(s.pos, "unexpected character, expected a value")
	}
}

func (s *scanner) literal(lit string) error {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return syntaxErr(s.pos, "invalid literal")
	}
	s.pos += len(lit)
	return nil
}

func (s *scanner) object(depth int, c ctx) error {
	if depth > s.lim.MaxDepth {
		return &Error{Err: ErrDepth, Offset: s.pos, Reason: "object nested deeper than " + strconv.Itoa(s.lim.MaxDepth)}
	}
	s.pos++ // '{'
	s.beginObject(c)
	s.skipSpace()
	base := 0
	if c == ctxTree {
		base = len(s.tree.stack)
	}
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		if c == ctxTree {
			s.tree.close(base)
		}
		s.endObject(c)
		return nil
	}
	for {
		if c == ctxTree && len(s.tree.stack)-base == s.lim.MaxMembers {
			return &Error{Err: ErrArrayTooLong, Offset: s.pos, Reason: "object has more than " + strconv.Itoa(s.lim.MaxArray) + " members"}
		}
		if s.pos >= len(s.data) || s.data[s.pos] != '"' {
			return syntaxErr(s.pos, "expected a string key")
		}
		nameAt := s.pos + 1
		if err := s.string(); err != nil {
			return err
		}
		var name Str
		k := keyNone
		if c == ctxTree {
			name = s.str
		} else if c != ctxNone {
			k = s.lookupKey(c)
		}
		s.skipSpace()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			return syntaxErr(s.pos, "expected ':' after object key")
		}
		s.pos++
		s.skipSpace()
		child := c
		if c != ctxTree {
			child = ctxNone
			if k != keyNone {
				child = s.beforeMember(k)
			}
		}
		start := s.pos
		kind, err := s.value(depth, child)
		if err != nil {
			return err
		}
		if c == ctxTree {
			s.tree.push(s, kind, start, name, nameAt)
		} else if k != keyNone {
			s.afterMember(k, kind)
		}
		s.skipSpace()
		if s.pos >= len(s.data) {
			return syntaxErr(s.pos, "unexpected end of input in object")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
			s.skipSpace()
		case '}':
			s.pos++
			if c == ctxTree {
				s.tree.close(base)
			}
			s.endObject(c)
			return nil
		default:
			return syntaxErr(s.pos, "expected ',' or '}' in object")
		}
	}
}

func (s *scanner) array(depth int, c ctx) error {
	if depth > s.lim.MaxDepth {
		return &Error{Err: ErrDepth, Offset: s.pos, Reason: "array nested deeper than " + strconv.Itoa(s.lim.MaxDepth)}
	}
	s.pos++ // '['
	s.skipSpace()
	n := 0
	base := 0
	if c == ctxTree {
		base = len(s.tree.stack)
	}
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		s.arrLen = 0
		if c == ctxTree {
			s.tree.close(base)
		}
		return nil
	}
	for {
		if n == s.lim.MaxArray {
			return &Error{Err: ErrArrayTooLong, Offset: s.pos, Reason: "array has more than " + strconv.Itoa(s.lim.MaxArray) + " elements"}
		}
		start := s.pos
		kind, err := s.value(depth, elementCtx(c, n))
		if err != nil {
			return err
		}
		if c == ctxTree {
			s.tree.push(s, kind, start, Str{}, 0)
		}
		n++
		s.skipSpace()
		if s.pos >= len(s.data) {
			return syntaxErr(s.pos, "unexpected end of input in array")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
			s.skipSpace()
		case ']':
			s.pos++
			s.arrLen = n
			if c == ctxTree {
				s.tree.close(base)
			}
			return nil
		default:
			return syntaxErr(s.pos, "expected ',' or ']' in array")
		}
	}
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// specialMask flags, for 8 string bytes loaded little-endian, the bytes
// that need a closer look: '"', '\\', a control character or a non-ASCII
// byte. Each term is the classic "has byte less than / equal to" bit
// trick: it may also flag bytes above a flagged one (borrows propagate
// upwards), but the lowest flagged byte is always a real match and the
// mask is zero only when no byte matches.
func specialMask(w uint64) uint64 {
	quote := w ^ (lsb * '"')
	backslash := w ^ (lsb * '\\')
	return ((w-lsb*0x20)&^w | (quote-lsb)&^quote | (backslash-lsb)&^backslash | w) & msb
}

// string scans the string at s.pos (the opening quote) and records it in
// s.str. It validates escapes and UTF-8 and computes the decoded length.
func (s *scanner) string() error {
	data := s.data
	start := s.pos + 1
	i := start
	shrink := 0 // bytes as written minus bytes decoded
	escaped := false
	for {
		for i+8 <= len(data) {
			if m := specialMask(binary.LittleEndian.Uint64(data[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(data) {
			return syntaxErr(s.pos, "unterminated string")
		}
		b := data[i]
		switch {
		case b == '"':
			if i-start > s.lim.MaxString {
				return &Error{Err: ErrStringTooLong, Offset: s.pos, Reason: "string of " + strconv.Itoa(i-start) + " bytes exceeds " + strconv.Itoa(s.lim.MaxString)}
			}
			s.str = Str{Raw: data[start:i:i], Len: i - start - shrink, Escaped: escaped, IsString: true}
			s.pos = i + 1
			return nil
		case b == '\\':
			escaped = true
			if i+1 < len(data) && simpleEscape[data[i+1]] {
				shrink++
				i += 2
				break
			}
			n, w, err := s.escape(i)
			if err != nil {
				return err
			}
			shrink += w - n
			i += w
		case b < 0x20:
			return syntaxErr(i, "control character in string")
		case b < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size <= 1 {
				return syntaxErr(i, "invalid UTF-8 in string")
			}
			i += size
		}
		if i-start > s.lim.MaxString {
			return &Error{Err: ErrStringTooLong, Offset: s.pos, Reason: "string exceeds " + strconv.Itoa(s.lim.MaxString) + " bytes"}
		}
	}
}

// escape validates the escape at data[i] (a backslash) and returns the
// decoded byte count n and the bytes w it occupies as written.
func (s *scanner) escape(i int) (n, w int, err error) {
	data := s.data
	if i+1 >= len(data) {
		return 0, 0, syntaxErr(i, "unterminated escape")
	}
	switch data[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 1, 2, nil
	case 'u':
	default:
		return 0, 0, syntaxErr(i, "invalid escape")
	}
	r, ok := hex4(data, i+2)
	if !ok {
		return 0, 0, syntaxErr(i, "invalid \\u escape")
	}
	switch {
	case r >= 0xdc00 && r < 0xe000:
		return 0, 0, syntaxErr(i, "lone low surrogate in \\u escape")
	case r >= 0xd800 && r < 0xdc00:
		if i+7 >= len(data) || data[i+6] != '\\' || data[i+7] != 'u' {
			return 0, 0, syntaxErr(i, "lone high surrogate in \\u escape")
		}
		lo, ok := hex4(data, i+8)
		if !ok || lo < 0xdc00 || lo >= 0xe000 {
			return 0, 0, syntaxErr(i, "high surrogate not followed by a low surrogate")
		}
		return 4, 12, nil
	}
	return utf8.RuneLen(r), 6, nil
}

// simpleEscape marks the characters that form a two-byte escape.
var simpleEscape = [256]bool{'"': true, '\\': true, '/': true, 'b': true, 'f': true, 'n': true, 'r': true, 't': true}
