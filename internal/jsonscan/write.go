package jsonscan

import "unicode/utf8"

// AppendString appends s as a JSON string literal escaped as serde_json
// escapes (wire reference §2.5), so m2md writes the bytes the Rust reference
// writes: only '"', '\\' and U+0000–U+001F are escaped, with the short forms
// \b \t \n \f \r and lower-case \u00xx for the rest; everything else, '/',
// '<', U+2028 and DEL included, is written raw. Invalid UTF-8, which JSON
// cannot carry, becomes U+FFFD, so the output is always valid JSON.
func AppendString[S string | []byte](dst []byte, s S) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	run := 0
	for i := 0; i < len(s); {
		e := escapes[s[i]]
		if e == 0 {
			i++
			continue
		}
		if e == 'x' {
			var buf [utf8.UTFMax]byte
			r, size := utf8.DecodeRune(buf[:copy(buf[:], s[i:])])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, s[run:i]...)
				dst = append(dst, "\ufffd"...)
				run = i + 1
			}
			i += size
			continue
		}
		c := s[i]
		dst = append(dst, s[run:i]...)
		if e == 'u' {
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		} else {
			dst = append(dst, '\\', e)
		}
		i++
		run = i
	}
	dst = append(dst, s[run:]...)
	return append(dst, '"')
}

// escapes maps a byte to 0 (written raw), its short escape letter, 'u'
// (\u00xx) or 'x' (the start of a UTF-8 sequence to check): one load a byte
// on the common path.
var escapes = func() (t [256]byte) {
	for c := utf8.RuneSelf; c < 256; c++ {
		t[c] = 'x'
	}
	for c := 0; c < 0x20; c++ {
		t[c] = 'u'
	}
	t['\b'], t['\t'], t['\n'], t['\f'], t['\r'] = 'b', 't', 'n', 'f', 'r'
	t['"'], t['\\'] = '"', '\\'
	return t
}()
