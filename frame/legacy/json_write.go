package legacy

import "unicode/utf8"

// serde_json's string escaping: only '"', '\\' and U+0000–U+001F are
// escaped, with the short forms \b \t \n \f \r and lower-case \u00xx for the
// rest. Everything else, '/', '<', U+2028 and DEL included, is written raw.

const hexDigits = "0123456789abcdef"

// escapeTable maps a byte to 0 (write raw), a short-escape letter, or 'u'.
var escapeTable = func() (t [256]byte) {
	for c := 0; c < 0x20; c++ {
		t[c] = 'u'
	}
	t['\b'] = 'b'
	t['\t'] = 't'
	t['\n'] = 'n'
	t['\f'] = 'f'
	t['\r'] = 'r'
	t['"'] = '"'
	t['\\'] = '\\'
	return t
}()

func appendEscapedByte(dst []byte, c byte) []byte {
	switch e := escapeTable[c]; e {
	case 0:
		return append(dst, c)
	case 'u':
		return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
	default:
		return append(dst, '\\', e)
	}
}

// appendQuoted writes decoded string bytes as a serde_json string literal.
func appendQuoted(dst, s []byte) []byte {
	dst = append(dst, '"')
	run := 0
	for i, c := range s {
		if escapeTable[c] == 0 {
			continue
		}
		dst = append(dst, s[run:i]...)
		dst = appendEscapedByte(dst, c)
		run = i + 1
	}
	dst = append(dst, s[run:]...)
	return append(dst, '"')
}

// appendReescaped writes a validated, still-escaped JSON string body (the
// bytes between the quotes of the input) the way serde_json would write the
// decoded string, without materialising the decoded form.
func appendReescaped(dst, raw []byte) []byte {
	dst = append(dst, '"')
	run := 0
	for i := 0; i < len(raw); {
		if raw[i] != '\\' {
			i++
			continue
		}
		dst = append(dst, raw[run:i]...)
		r, n := decodeEscape(raw, i)
		if r < utf8.RuneSelf {
			dst = appendEscapedByte(dst, byte(r))
		} else {
			dst = utf8.AppendRune(dst, r)
		}
		i += n
		run = i
	}
	dst = append(dst, raw[run:]...)
	return append(dst, '"')
}

// appendUnescaped appends the decoded form of a validated string body.
func appendUnescaped(dst, raw []byte) []byte {
	run := 0
	for i := 0; i < len(raw); {
		if raw[i] != '\\' {
			i++
			continue
		}
		dst = append(dst, raw[run:i]...)
		r, n := decodeEscape(raw, i)
		dst = utf8.AppendRune(dst, r)
		i += n
		run = i
	}
	return append(dst, raw[run:]...)
}

// decodeEscape decodes the escape at raw[i] (a backslash), which scanString
// has already validated, and returns the rune and the escape's length.
func decodeEscape(raw []byte, i int) (rune, int) {
	switch raw[i+1] {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r, _ := hex4(raw, i+2)
		if r >= 0xD800 && r <= 0xDBFF {
			r2, _ := hex4(raw, i+8)
			return (r-0xD800)<<10 | (r2 - 0xDC00) + 0x10000, 12
		}
		return r, 6
	default: // '"', '\\', '/'
		return rune(raw[i+1]), 2
	}
}
