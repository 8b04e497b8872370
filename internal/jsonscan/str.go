package jsonscan

import (
	"bytes"
	"unicode/utf8"
)

// Str is a JSON string value found by a scan. Raw aliases the scanned input.
type Str struct {
	// Raw is the string as written, between the quotes, escapes included.
	Raw []byte
	// Len is the UTF-8 byte length of the decoded value.
	Len int
	// Escaped reports whether Raw contains a backslash escape; when it does
	// not, Raw is the decoded value itself.
	Escaped bool
	// IsString is false when the key was absent or its value not a string;
	// the other fields are then zero.
	IsString bool
}

// Equal reports whether the value is a string equal to lit after decoding.
func (s Str) Equal(lit string) bool {
	if !s.IsString || s.Len != len(lit) {
		return false
	}
	if !s.Escaped {
		return string(s.Raw) == lit
	}
	return s.HasPrefix(lit)
}

// HasPrefix reports whether the value is a string whose decoded form starts
// with p. It decodes only as much of Raw as it needs.
func (s Str) HasPrefix(p string) bool {
	if !s.IsString || s.Len < len(p) {
		return false
	}
	if !s.Escaped {
		return len(s.Raw) >= len(p) && string(s.Raw[:len(p)]) == p
	}
	matched := 0
	for i := 0; matched < len(p) && i < len(s.Raw); {
		var unit [4]byte
		n, next := decodeUnit(s.Raw, i, &unit)
		for k := 0; k < n && matched < len(p); k++ {
			if unit[k] != p[matched] {
				return false
			}
			matched++
		}
		i = next
	}
	return matched == len(p)
}

// AppendDecoded appends the decoded value to dst.
func (s Str) AppendDecoded(dst []byte) []byte {
	if !s.Escaped {
		return append(dst, s.Raw...)
	}
	raw := s.Raw
	for i := 0; i < len(raw); {
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 {
			return append(dst, raw[i:]...)
		}
		dst = append(dst, raw[i:i+j]...)
		var unit [4]byte
		n, next := decodeUnit(raw, i+j, &unit)
		dst = append(dst, unit[:n]...)
		i = next
	}
	return dst
}

// decodeUnit decodes what starts at raw[i]: one plain byte, or one escape
// (a \uXXXX\uXXXX surrogate pair counts as one). It writes the decoded bytes
// to unit and returns their count and the index after the unit. Input that
// did not come from a successful scan is copied through rather than
// rejected, so a hand-made Str never causes a panic.
func decodeUnit(raw []byte, i int, unit *[4]byte) (n, next int) {
	if raw[i] != '\\' || i+1 >= len(raw) {
		unit[0] = raw[i]
		return 1, i + 1
	}
	switch raw[i+1] {
	case '"', '\\', '/':
		unit[0] = raw[i+1]
	case 'b':
		unit[0] = '\b'
	case 'f':
		unit[0] = '\f'
	case 'n':
		unit[0] = '\n'
	case 'r':
		unit[0] = '\r'
	case 't':
		unit[0] = '\t'
	case 'u':
		r, ok := hex4(raw, i+2)
		if !ok {
			unit[0] = raw[i]
			return 1, i + 1
		}
		next = i + 6
		if r >= 0xd800 && r < 0xdc00 {
			if lo, ok := hex4(raw, i+8); ok && i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' && lo >= 0xdc00 && lo < 0xe000 {
				r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
				next = i + 12
			}
		}
		return utf8.EncodeRune(unit[:], r), next
	default:
		unit[0] = raw[i]
		return 1, i + 1
	}
	return 1, i + 2
}

// hex4 parses the four hex digits at raw[i:i+4].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[i : i+4] {
		d := hexVal[c]
		if d < 0 {
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

var hexVal = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = int8(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = int8(c - 'a' + 10)
		t[c-'a'+'A'] = int8(c - 'a' + 10)
	}
	return t
}()
