package tokennative

import "errors"

// Errors. Every error this package returns wraps exactly one of these (use
// errors.Is), with the detail (offset, id, size) in its message.
var (
	// ErrNotTokenNative: the text form does not start with "#TK|".
	ErrNotTokenNative = errors.New("tokennative: missing #TK| prefix")
	// ErrMissingTokenizerID: the text form's id part is empty, or the binary
	// form is empty (Rust: "Missing tokenizer ID").
	ErrMissingTokenizerID = errors.New("tokennative: missing tokenizer id")
	// ErrMissingData: the text form has no '|' after the id (Rust: "Missing
	// encoded data").
	ErrMissingData = errors.New("tokennative: missing encoded data")
	// ErrUnknownTokenizer: the id character or byte names no tokenizer.
	ErrUnknownTokenizer = errors.New("tokennative: unknown tokenizer id")
	// ErrUnavailable: the encoding is known but not configured (Llama 3
	// without Config.Llama3Path).
	ErrUnavailable = errors.New("tokennative: tokenizer not available")
	// ErrBase64: the text form's data is not canonical padded standard Base64.
	ErrBase64 = errors.New("tokennative: invalid base64")
	// ErrTruncatedVarint: the data ends inside a token varint.
	ErrTruncatedVarint = errors.New("tokennative: truncated varint")
	// ErrVarintOverflow: a token varint is longer than 5 bytes or exceeds
	// 0xFFFFFFFF.
	ErrVarintOverflow = errors.New("tokennative: varint overflow")
	// ErrUnknownToken: a token id is outside the tokenizer's vocabulary.
	ErrUnknownToken = errors.New("tokennative: unknown token id")
	// ErrNotUTF8: the text to encode, or the decoded text, is not valid UTF-8.
	ErrNotUTF8 = errors.New("tokennative: invalid UTF-8")
	// ErrLimit: a message or decoded text exceeds the configured limit.
	ErrLimit = errors.New("tokennative: size limit exceeded")
	// ErrVocabulary: a Llama 3 vocabulary file cannot be read or is malformed.
	ErrVocabulary = errors.New("tokennative: bad vocabulary")
)
