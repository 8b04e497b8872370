package frame

import (
	"unicode/utf8"

	"github.com/m2md/m2md/internal/bufpool"
)

// AppendErrorBody appends the OpenAI-style error document m2md sends in
// its error replies (docs/protocol.md §4):
//
//	{"error":{"message":"…","type":"m2md_error","code":"…"}}
//
// Strings are escaped as serde_json writes them; invalid UTF-8 becomes
// U+FFFD so the result is always valid JSON.
func AppendErrorBody(dst []byte, code, message string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendJSONString(dst, message)
	dst = append(dst, `,"type":"m2md_error","code":`...)
	dst = appendJSONString(dst, code)
	return append(dst, "}}"...)
}

// AppendErrorFrame appends a binary-shape Error frame (schema 10) whose
// payload is AppendErrorBody(code, message): a response header with an
// empty id and model and finish reason ff. It fails only when message is
// too large for the default Limits.
func AppendErrorFrame(dst []byte, code, message string) ([]byte, error) {
	body := bufpool.Get(len(code) + len(message) + 128)
	defer bufpool.Put(body)
	*body = AppendErrorBody((*body)[:0], code, message)
	return appendFrame(dst, *body, SchemaError, Limits{})
}

// appendJSONString appends s as a JSON string literal with serde_json's
// escaping (wire reference §2.5).
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, "\uFFFD"...)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch c {
		case '"':
			dst = append(dst, `\"`...)
		case '\\':
			dst = append(dst, `\\`...)
		case '\b':
			dst = append(dst, `\b`...)
		case '\f':
			dst = append(dst, `\f`...)
		case '\n':
			dst = append(dst, `\n`...)
		case '\r':
			dst = append(dst, `\r`...)
		case '\t':
			dst = append(dst, `\t`...)
		default:
			if c < 0x20 {
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				dst = append(dst, c)
			}
		}
		i++
	}
	return append(dst, '"')
}
