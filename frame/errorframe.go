package frame

import (
	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/internal/jsonscan"
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
	dst = jsonscan.AppendString(dst, message)
	dst = append(dst, `,"type":"m2md_error","code":`...)
	dst = jsonscan.AppendString(dst, code)
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
