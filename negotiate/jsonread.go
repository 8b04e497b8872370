package negotiate

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A small RFC 8259 reader for control messages. encoding/json does not fit:
// it matches member names case-insensitively ("TIMESTAMP" would satisfy the
// required "timestamp"), lets the last of duplicate members win silently, has
// no depth limit below 10,000, and replaces invalid UTF-8 instead of
// refusing it. Control messages are small and rare, so a tree is fine here.

type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

func (k jsonKind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

type jsonValue struct {
	kind jsonKind
	// start and end delimit the value as written in the parsed input
	// (a string's quotes included): where a proof is blanked (§5).
	start, end int
	b          bool
	text       string // string value, or the number literal as written
	elems      []jsonValue
	members    []jsonMember
}

type jsonMember struct {
	name  string
	value jsonValue
}

type jsonLimits struct {
	maxDepth  int // nesting of arrays and objects
	maxItems  int // elements of one array, members of one object
	maxString int // bytes of one string as written
}

type jsonReader struct {
	data []byte
	pos  int
	lim  jsonLimits
}

func parseJSON(data []byte, lim jsonLimits) (jsonValue, error) {
	r := jsonReader{data: data, lim: lim}
	r.skipSpace()
	v, err := r.value(0)
	if err != nil {
		return jsonValue{}, err
	}
	r.skipSpace()
	if r.pos != len(r.data) {
		return jsonValue{}, r.errorf("data after the JSON value")
	}
	return v, nil
}

func (r *jsonReader) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: JSON offset %d: %s", ErrMalformedControl, r.pos, fmt.Sprintf(format, args...))
}

func (r *jsonReader) skipSpace() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

func (r *jsonReader) value(depth int) (jsonValue, error) {
	start := r.pos
	v, err := r.bareValue(depth)
	v.start, v.end = start, r.pos
	return v, err
}

func (r *jsonReader) bareValue(depth int) (jsonValue, error) {
	if r.pos >= len(r.data) {
		return jsonValue{}, r.errorf("unexpected end of input")
	}
	switch c := r.data[r.pos]; {
	case c == '{' || c == '[':
		if depth >= r.lim.maxDepth {
			return jsonValue{}, r.errorf("nesting deeper than %d", r.lim.maxDepth)
		}
		if c == '{' {
			return r.object(depth + 1)
		}
		return r.array(depth + 1)
	case c == '"':
		s, err := r.str()
		return jsonValue{kind: jsonString, text: s}, err
	case c == 't':
		return jsonValue{kind: jsonBool, b: true}, r.literal("true")
	case c == 'f':
		return jsonValue{kind: jsonBool}, r.literal("false")
	case c == 'n':
		return jsonValue{kind: jsonNull}, r.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return r.number()
	default:
		return jsonValue{}, r.errorf("unexpected character %q", c)
	}
}

func (r *jsonReader) literal(word string) error {
	if len(r.data)-r.pos < len(word) || string(r.data[r.pos:r.pos+len(word)]) != word {
		return r.errorf("invalid literal")
	}
	r.pos += len(word)
	return nil
}

func (r *jsonReader) object(depth int) (jsonValue, error) {
	r.pos++ // '{'
	v := jsonValue{kind: jsonObject}
	r.skipSpace()
	if r.pos < len(r.data) && r.data[r.pos] == '}' {
		r.pos++
		return v, nil
	}
	for {
		if len(v.members) == r.lim.maxItems {
			return jsonValue{}, r.errorf("object with more than %d members", r.lim.maxItems)
		}
		if r.pos >= len(r.data) || r.data[r.pos] != '"' {
			return jsonValue{}, r.errorf("expected a member name")
		}
		name, err := r.str()
		if err != nil {
			return jsonValue{}, err
		}
		r.skipSpace()
		if r.pos >= len(r.data) || r.data[r.pos] != ':' {
			return jsonValue{}, r.errorf("expected ':'")
		}
		r.pos++
		r.skipSpace()
		val, err := r.value(depth)
		if err != nil {
			return jsonValue{}, err
		}
		v.members = append(v.members, jsonMember{name: name, value: val})
		r.skipSpace()
		if r.pos >= len(r.data) {
			return jsonValue{}, r.errorf("unterminated object")
		}
		switch r.data[r.pos] {
		case ',':
			r.pos++
			r.skipSpace()
		case '}':
			r.pos++
			return v, nil
		default:
			return jsonValue{}, r.errorf("expected ',' or '}'")
		}
	}
}

func (r *jsonReader) array(depth int) (jsonValue, error) {
	r.pos++ // '['
	v := jsonValue{kind: jsonArray}
	r.skipSpace()
	if r.pos < len(r.data) && r.data[r.pos] == ']' {
		r.pos++
		return v, nil
	}
	for {
		if len(v.elems) == r.lim.maxItems {
			return jsonValue{}, r.errorf("array with more than %d elements", r.lim.maxItems)
		}
		val, err := r.value(depth)
		if err != nil {
			return jsonValue{}, err
		}
		v.elems = append(v.elems, val)
		r.skipSpace()
		if r.pos >= len(r.data) {
			return jsonValue{}, r.errorf("unterminated array")
		}
		switch r.data[r.pos] {
		case ',':
			r.pos++
			r.skipSpace()
		case ']':
			r.pos++
			return v, nil
		default:
			return jsonValue{}, r.errorf("expected ',' or ']'")
		}
	}
}

func (r *jsonReader) number() (jsonValue, error) {
	start := r.pos
	d := r.data
	if d[r.pos] == '-' {
		r.pos++
	}
	switch {
	case r.pos < len(d) && d[r.pos] == '0':
		r.pos++
	case r.pos < len(d) && d[r.pos] >= '1' && d[r.pos] <= '9':
		r.digits()
	default:
		return jsonValue{}, r.errorf("invalid number")
	}
	if r.pos < len(d) && d[r.pos] == '.' {
		r.pos++
		if r.digits() == 0 {
			return jsonValue{}, r.errorf("invalid number")
		}
	}
	if r.pos < len(d) && (d[r.pos] == 'e' || d[r.pos] == 'E') {
		r.pos++
		if r.pos < len(d) && (d[r.pos] == '+' || d[r.pos] == '-') {
			r.pos++
		}
		if r.digits() == 0 {
			return jsonValue{}, r.errorf("invalid number")
		}
	}
	if r.pos-start > 64 {
		return jsonValue{}, r.errorf("number literal longer than 64 bytes")
	}
	return jsonValue{kind: jsonNumber, text: string(d[start:r.pos])}, nil
}

func (r *jsonReader) digits() int {
	n := 0
	for r.pos < len(r.data) && r.data[r.pos] >= '0' && r.data[r.pos] <= '9' {
		r.pos++
		n++
	}
	return n
}

// str reads a string starting at the opening quote, refusing control
// characters, invalid UTF-8 and unpaired surrogate escapes (as serde_json does).
func (r *jsonReader) str() (string, error) {
	r.pos++ // opening quote
	start := r.pos
	d := r.data
	// Fast path: no escapes.
	for i := start; i < len(d); i++ {
		c := d[i]
		if c == '"' {
			if i-start > r.lim.maxString {
				return "", r.errorf("string longer than %d bytes", r.lim.maxString)
			}
			if !utf8.Valid(d[start:i]) {
				return "", r.errorf("string is not valid UTF-8")
			}
			r.pos = i + 1
			return string(d[start:i]), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			r.pos = i
			return "", r.errorf("control character in string")
		}
	}
	buf := make([]byte, 0, 64)
	for r.pos < len(d) {
		if r.pos-start > r.lim.maxString {
			return "", r.errorf("string longer than %d bytes", r.lim.maxString)
		}
		c := d[r.pos]
		switch {
		case c == '"':
			r.pos++
			if !utf8.Valid(buf) {
				return "", r.errorf("string is not valid UTF-8")
			}
			return string(buf), nil
		case c < 0x20:
			return "", r.errorf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			r.pos++
			continue
		}
		r.pos++ // backslash
		if r.pos >= len(d) {
			break
		}
		e := d[r.pos]
		r.pos++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			c1, ok := r.hex4()
			if !ok {
				return "", r.errorf("invalid \\u escape")
			}
			switch {
			case utf16.IsSurrogate(c1) && c1 < 0xdc00:
				if len(d)-r.pos < 2 || d[r.pos] != '\\' || d[r.pos+1] != 'u' {
					return "", r.errorf("unpaired surrogate escape")
				}
				r.pos += 2
				c2, ok := r.hex4()
				if !ok || c2 < 0xdc00 || c2 > 0xdfff {
					return "", r.errorf("unpaired surrogate escape")
				}
				buf = utf8.AppendRune(buf, utf16.DecodeRune(c1, c2))
			case utf16.IsSurrogate(c1):
				return "", r.errorf("unpaired surrogate escape")
			default:
				buf = utf8.AppendRune(buf, c1)
			}
		default:
			return "", r.errorf("invalid escape \\%c", e)
		}
	}
	return "", r.errorf("unterminated string")
}

func (r *jsonReader) hex4() (rune, bool) {
	if len(r.data)-r.pos < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(r.data[r.pos:r.pos+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	r.pos += 4
	return rune(v), true
}

// Typed access. Member names match exactly; a name that occurs twice is an
// error (a message must not mean two things); unknown members are ignored.
// For optional members, null is the same as absent.

type jsonObj struct {
	v    *jsonValue
	path string
}

func (o jsonObj) errorf(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s%s: %s", ErrMalformedControl, o.path, name, fmt.Sprintf(format, args...))
}

// get returns the member's value, or nil if it is absent or null.
func (o jsonObj) get(name string) (*jsonValue, error) {
	var found *jsonValue
	for i := range o.v.members {
		m := &o.v.members[i]
		if m.name != name {
			continue
		}
		if found != nil {
			return nil, o.errorf(name, "duplicate member")
		}
		found = &m.value
	}
	if found != nil && found.kind == jsonNull {
		return nil, nil
	}
	return found, nil
}

// span returns where the member's value is written; zero when absent.
func (o jsonObj) span(name string) span {
	for i := range o.v.members {
		if m := &o.v.members[i]; m.name == name {
			return span{m.value.start, m.value.end}
		}
	}
	return span{}
}

func (o jsonObj) typed(name string, kind jsonKind, required bool) (*jsonValue, error) {
	v, err := o.get(name)
	if err != nil {
		return nil, err
	}
	if v == nil {
		if required {
			return nil, o.errorf(name, "required member missing")
		}
		return nil, nil
	}
	if v.kind != kind {
		return nil, o.errorf(name, "expected %s, got %s", kind, v.kind)
	}
	return v, nil
}

func (o jsonObj) object(name string, required bool) (jsonObj, bool, error) {
	v, err := o.typed(name, jsonObject, required)
	if v == nil {
		return jsonObj{}, false, err
	}
	return jsonObj{v: v, path: o.path + name + "."}, true, nil
}

func (o jsonObj) str(name string, required bool) (string, bool, error) {
	v, err := o.typed(name, jsonString, required)
	if v == nil {
		return "", false, err
	}
	return v.text, true, nil
}

func (o jsonObj) boolean(name string, required bool) (bool, error) {
	v, err := o.typed(name, jsonBool, required)
	if v == nil {
		return false, err
	}
	return v.b, nil
}

// uint reads a non-negative integer literal (no fraction, no exponent, no
// sign) that fits in 64 bits: serde_json's as_u64.
func (o jsonObj) uint(name string, required bool) (uint64, bool, error) {
	v, err := o.typed(name, jsonNumber, required)
	if v == nil {
		return 0, false, err
	}
	n, err := strconv.ParseUint(v.text, 10, 64)
	if err != nil {
		return 0, false, o.errorf(name, "not an unsigned 64-bit integer: %s", v.text)
	}
	return n, true, nil
}

func (o jsonObj) float32(name string, required bool) (float32, error) {
	v, err := o.typed(name, jsonNumber, required)
	if v == nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(v.text, 32)
	if err != nil {
		return 0, o.errorf(name, "not a 32-bit float: %s", v.text)
	}
	return float32(f), nil
}

func (o jsonObj) strings(name string, required bool) ([]string, bool, error) {
	v, err := o.typed(name, jsonArray, required)
	if v == nil {
		return nil, false, err
	}
	out := make([]string, len(v.elems))
	for i := range v.elems {
		if v.elems[i].kind != jsonString {
			return nil, false, o.errorf(name, "element %d: expected string, got %s", i, v.elems[i].kind)
		}
		out[i] = v.elems[i].text
	}
	return out, true, nil
}

// stringMap reads an object whose members are all strings (Rust's
// HashMap<String, String>). Duplicate names are an error.
func (o jsonObj) stringMap(name string) (map[string]string, error) {
	v, err := o.typed(name, jsonObject, false)
	if v == nil {
		return nil, err
	}
	out := make(map[string]string, len(v.members))
	for _, m := range v.members {
		if m.value.kind != jsonString {
			return nil, o.errorf(name, "member %q: expected string, got %s", m.name, m.value.kind)
		}
		if _, dup := out[m.name]; dup {
			return nil, o.errorf(name, "duplicate member %q", m.name)
		}
		out[m.name] = m.value.text
	}
	return out, nil
}
