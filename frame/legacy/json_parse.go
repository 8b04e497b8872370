package legacy

import (
	"math"
	"strconv"

	"github.com/m2md/m2md/frame"
)

// This file is a JSON parser with serde_json's semantics (wire reference
// §2.5), because T1 output must be byte-identical to what the Rust reference
// produces: which literals stay integers, how floats are rounded, which
// strings are rejected. It builds a flat node table instead of a tree of Go
// values: strings and integers are kept as spans of the input, so parsing a
// message allocates only the table itself.

type kind uint8

const (
	kindNull kind = iota
	kindFalse
	kindTrue
	kindInt    // serde's u64 or i64: the literal is already its canonical text
	kindFloat  // serde's f64: the value's bits are in a (high) and b (low)
	kindString // span a..b between the quotes, escapes still in place
	kindArray  // children nodes[a : a+b]
	kindObject // members nodes[a : a+b], each carrying its key span
)

// node is one parsed value. Members of an object also carry their key: a
// span of the input, or of the parser's arena when the key had escapes and
// had to be decoded for sorting and table lookups.
type node struct {
	kind   kind
	esc    bool // string value contains backslash escapes
	keyEsc bool // ka..kb index the arena, not the input
	a, b   uint32
	ka, kb uint32
}

func (n node) float() float64 { return math.Float64frombits(uint64(n.a)<<32 | uint64(n.b)) }

func floatNode(f float64) node {
	bits := math.Float64bits(f)
	return node{kind: kindFloat, a: uint32(bits >> 32), b: uint32(bits)}
}

type parser struct {
	src       []byte
	pos       int
	depth     int
	maxDepth  int
	maxString int
	maxArray  int
	nodes     []node // finished children, contiguous per container
	stack     []node // children of containers still open
	arena     []byte // decoded keys that contained escapes
}

func (p *parser) reset(src []byte, lim frame.Limits) {
	p.src = src
	p.pos = 0
	p.depth = 0
	p.maxDepth = lim.MaxDepth
	p.maxString = lim.MaxString
	p.maxArray = lim.MaxArray
	p.nodes = p.nodes[:0]
	p.stack = p.stack[:0]
	p.arena = p.arena[:0]
}

func (p *parser) fail(kind error, detail string) error {
	return newError(codecT1, kind, p.pos, detail)
}

// key returns the decoded key of an object member.
func (p *parser) key(n node) []byte {
	if n.keyEsc {
		return p.arena[n.ka:n.kb]
	}
	return p.src[n.ka:n.kb]
}

// parseDocument parses exactly one JSON value, with optional surrounding
// whitespace, as serde_json::from_str does. The caller has checked that src
// is valid UTF-8 and no longer than the message limits (so offsets fit in
// uint32).
func (p *parser) parseDocument(src []byte, lim frame.Limits) (node, error) {
	p.reset(src, lim)
	v, err := p.parseValue()
	if err != nil {
		return node{}, err
	}
	p.skipSpace()
	if p.pos != len(p.src) {
		return node{}, p.fail(ErrMalformed, "trailing characters after the JSON value")
	}
	return v, nil
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) parseValue() (node, error) {
	p.skipSpace()
	if p.pos >= len(p.src) {
		return node{}, p.fail(ErrMalformed, "unexpected end of input, expected a value")
	}
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.parseContainer(kindObject, '}')
	case c == '[':
		return p.parseContainer(kindArray, ']')
	case c == '"':
		start, end, esc, err := p.scanString()
		return node{kind: kindString, esc: esc, a: start, b: end}, err
	case c == 't':
		return p.parseLiteral("true", kindTrue)
	case c == 'f':
		return p.parseLiteral("false", kindFalse)
	case c == 'n':
		return p.parseLiteral("null", kindNull)
	case c == '-' || isDigit(c):
		return p.parseNumber()
	default:
		return node{}, p.fail(ErrMalformed, "expected a JSON value")
	}
}

func (p *parser) parseLiteral(lit string, k kind) (node, error) {
	if len(p.src)-p.pos < len(lit) || string(p.src[p.pos:p.pos+len(lit)]) != lit {
		return node{}, p.fail(ErrMalformed, "invalid literal, expected "+lit)
	}
	p.pos += len(lit)
	return node{kind: k}, nil
}

// parseContainer parses an object or an array. Children are collected on
// p.stack while the container is open and moved to p.nodes, contiguously,
// when it closes, so a container only needs (first child, count).
func (p *parser) parseContainer(k kind, closer byte) (node, error) {
	if p.depth >= p.maxDepth {
		return node{}, p.fail(ErrLimit, "JSON nesting deeper than "+strconv.Itoa(p.maxDepth))
	}
	p.depth++
	p.pos++ // '{' or '['
	base := len(p.stack)
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == closer {
		p.pos++
	} else {
		for {
			var ka, kb uint32
			var keyEsc bool
			if k == kindObject {
				p.skipSpace()
				if p.pos >= len(p.src) || p.src[p.pos] != '"' {
					return node{}, p.fail(ErrMalformed, "expected a string key")
				}
				ks, ke, esc, err := p.scanString()
				if err != nil {
					return node{}, err
				}
				ka, kb = ks, ke
				if esc {
					keyEsc = true
					ka = uint32(len(p.arena))
					p.arena = appendUnescaped(p.arena, p.src[ks:ke])
					kb = uint32(len(p.arena))
				}
				p.skipSpace()
				if p.pos >= len(p.src) || p.src[p.pos] != ':' {
					return node{}, p.fail(ErrMalformed, "expected ':' after an object key")
				}
				p.pos++
			} else if len(p.stack)-base >= p.maxArray {
				return node{}, p.fail(ErrLimit, "array longer than "+strconv.Itoa(p.maxArray)+" elements")
			}
			v, err := p.parseValue()
			if err != nil {
				return node{}, err
			}
			v.ka, v.kb, v.keyEsc = ka, kb, keyEsc
			p.stack = append(p.stack, v)
			p.skipSpace()
			if p.pos >= len(p.src) {
				return node{}, p.fail(ErrMalformed, "unexpected end of input inside a container")
			}
			c := p.src[p.pos]
			p.pos++
			if c == closer {
				break
			}
			if c != ',' {
				p.pos--
				return node{}, p.fail(ErrMalformed, "expected ',' or a closing bracket")
			}
			// serde_json rejects a trailing comma; parseValue (arrays) and
			// the key check (objects) do the same here.
		}
	}
	first := len(p.nodes)
	count := len(p.stack) - base
	p.nodes = append(p.nodes, p.stack[base:]...)
	p.stack = p.stack[:base]
	p.depth--
	return node{kind: k, a: uint32(first), b: uint32(count)}, nil
}

// scanString validates the string starting at the opening quote at p.pos
// and returns the span between the quotes. It enforces MaxString on the
// bytes as written before anything is copied, and rejects what serde_json
// rejects when deserializing a String: raw control characters, unknown
// escapes, malformed \u escapes and unpaired surrogates.
func (p *parser) scanString() (start, end uint32, esc bool, err error) {
	s := p.src
	begin := p.pos + 1
	i := begin
	for {
		if i >= len(s) {
			p.pos = i
			return 0, 0, false, p.fail(ErrMalformed, "unexpected end of input inside a string")
		}
		c := s[i]
		if c == '"' {
			break
		}
		if i-begin >= p.maxString {
			p.pos = begin
			return 0, 0, false, p.fail(ErrLimit, "string longer than "+strconv.Itoa(p.maxString)+" bytes")
		}
		switch {
		case c == '\\':
			esc = true
			n, perr := p.scanEscape(i)
			if perr != nil {
				return 0, 0, false, perr
			}
			i += n
		case c < 0x20:
			p.pos = i
			return 0, 0, false, p.fail(ErrMalformed, "control character inside a string")
		default:
			i++
		}
	}
	p.pos = i + 1
	return uint32(begin), uint32(i), esc, nil
}

// scanEscape validates the escape sequence starting at the backslash at i
// and returns its length.
func (p *parser) scanEscape(i int) (int, error) {
	s := p.src
	if i+1 >= len(s) {
		p.pos = i
		return 0, p.fail(ErrMalformed, "unexpected end of input inside a string escape")
	}
	switch s[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, nil
	case 'u':
	default:
		p.pos = i
		return 0, p.fail(ErrMalformed, "invalid escape in a string")
	}
	r, ok := hex4(s, i+2)
	if !ok {
		p.pos = i
		return 0, p.fail(ErrMalformed, "invalid \\u escape in a string")
	}
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		p.pos = i
		return 0, p.fail(ErrMalformed, "lone trailing surrogate in a \\u escape")
	case r >= 0xD800 && r <= 0xDBFF:
		if i+7 >= len(s) || s[i+6] != '\\' || s[i+7] != 'u' {
			p.pos = i
			return 0, p.fail(ErrMalformed, "leading surrogate not followed by a \\u escape")
		}
		r2, ok := hex4(s, i+8)
		if !ok || r2 < 0xDC00 || r2 > 0xDFFF {
			p.pos = i + 6
			return 0, p.fail(ErrMalformed, "leading surrogate not followed by a trailing surrogate")
		}
		return 12, nil
	}
	return 6, nil
}

func hex4(s []byte, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range s[i : i+4] {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
