package tokennative

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"sync/atomic"
	"unicode/utf8"
)

// strictBase64 is the Rust decoder's Base64: canonical padding, zero trailing bits.
var strictBase64 = base64.StdEncoding.Strict()

// TextPrefix starts every message in the text form.
const TextPrefix = "#TK|"

// IsText reports whether msg starts with the text form's prefix.
func IsText(msg []byte) bool { return bytes.HasPrefix(msg, []byte(TextPrefix)) }

// Codec encodes and decodes TokenNative messages. It is safe for concurrent
// use; tokenizers are loaded on first use and shared by every Codec in the
// process.
type Codec struct {
	llama3Path string
	maxMessage int
	maxDecoded int
	tokenizers [encodingCount]atomic.Pointer[Tokenizer]
}

// New returns a Codec for cfg. It loads nothing: each tokenizer is loaded on
// first use.
func New(cfg Config) *Codec {
	return &Codec{
		llama3Path: cfg.Llama3Path,
		maxMessage: clampLimit(cfg.MaxMessage, DefaultMaxMessage),
		maxDecoded: clampLimit(cfg.MaxDecoded, DefaultMaxDecoded),
	}
}

// Available lists the encodings this Codec can use: Cl100k and O200k, and
// Llama3 when Config.Llama3Path is set.
func (c *Codec) Available() []Encoding {
	if c.llama3Path == "" {
		return []Encoding{Cl100k, O200k}
	}
	return []Encoding{Cl100k, O200k, Llama3}
}

// Tokenizer returns the tokenizer for e, loading its vocabulary if this
// process has not yet. Errors: ErrUnknownTokenizer (e undefined),
// ErrUnavailable (Llama3 without Llama3Path), ErrVocabulary (the Llama 3
// files cannot be read or are malformed).
func (c *Codec) Tokenizer(e Encoding) (*Tokenizer, error) {
	if !e.Valid() {
		return nil, fmt.Errorf("%w: %v", ErrUnknownTokenizer, e)
	}
	if t := c.tokenizers[e].Load(); t != nil {
		return t, nil
	}
	var v *vocab
	var err error
	switch e {
	case Cl100k:
		v, err = cl100kVocab()
	case O200k:
		v, err = o200kVocab()
	case Llama3:
		if c.llama3Path == "" {
			return nil, fmt.Errorf("%w: %v needs Config.Llama3Path", ErrUnavailable, e)
		}
		v, err = llama3Vocab(c.llama3Path)
	}
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{v: v, maxDecoded: c.maxDecoded}
	c.tokenizers[e].Store(t)
	return t, nil
}

// AppendBinary appends the binary form of text to dst: the tokenizer byte,
// then each token id as a varint. On error dst is returned unchanged.
func (c *Codec) AppendBinary(dst []byte, e Encoding, text []byte) ([]byte, error) {
	t, err := c.Tokenizer(e)
	if err != nil {
		return dst, err
	}
	if err := t.checkText(text); err != nil {
		return dst, err
	}
	st := getEncState()
	defer putEncState(st)
	st.ids = t.v.appendTokens(st.ids[:0], bytesToString(text), st)
	start := len(dst)
	dst = append(dst, byte(e))
	for _, id := range st.ids {
		dst = appendVarint(dst, id)
	}
	if n := len(dst) - start; n > c.maxMessage {
		return dst[:start], fmt.Errorf("%w: binary message of %d bytes exceeds %d", ErrLimit, n, c.maxMessage)
	}
	return dst, nil
}

// AppendText appends the text form of text to dst: "#TK|", the id character,
// '|', and the Base64 (standard alphabet, padded) of the token varints, as the
// Rust reference writes it. On error dst is returned unchanged.
func (c *Codec) AppendText(dst []byte, e Encoding, text []byte) ([]byte, error) {
	t, err := c.Tokenizer(e)
	if err != nil {
		return dst, err
	}
	if err := t.checkText(text); err != nil {
		return dst, err
	}
	st := getEncState()
	defer putEncState(st)
	st.ids = t.v.appendTokens(st.ids[:0], bytesToString(text), st)
	buf := st.buf[:0]
	for _, id := range st.ids {
		buf = appendVarint(buf, id)
	}
	st.buf = buf
	if n := len(TextPrefix) + 2 + base64.StdEncoding.EncodedLen(len(buf)); n > c.maxMessage {
		return dst, fmt.Errorf("%w: text message of %d bytes exceeds %d", ErrLimit, n, c.maxMessage)
	}
	dst = append(dst, TextPrefix...)
	dst = append(dst, e.Char(), '|')
	return base64.StdEncoding.AppendEncode(dst, buf), nil
}

// DecodeText appends the text that a text-form message decodes to, and
// returns its encoding. As the Rust reference: the part after "#TK|" is split
// at the first '|'; the id is the first character before it (the rest of that
// part is ignored); "#TK|C|" decodes to "". Unlike it, an unknown id is an
// error. Errors wrap ErrLimit, ErrNotTokenNative, ErrMissingTokenizerID,
// ErrMissingData, ErrUnknownTokenizer, ErrUnavailable, ErrBase64,
// ErrTruncatedVarint, ErrVarintOverflow, ErrUnknownToken or ErrNotUTF8. On
// error dst is returned unchanged: never partial text.
func (c *Codec) DecodeText(dst, msg []byte) ([]byte, Encoding, error) {
	if len(msg) > c.maxMessage {
		return dst, 0, fmt.Errorf("%w: message of %d bytes exceeds %d", ErrLimit, len(msg), c.maxMessage)
	}
	if !IsText(msg) {
		return dst, 0, ErrNotTokenNative
	}
	rest := msg[len(TextPrefix):]
	idPart, data, found := bytes.Cut(rest, []byte{'|'})
	if len(idPart) == 0 {
		return dst, 0, ErrMissingTokenizerID
	}
	if !found {
		return dst, 0, ErrMissingData
	}
	e, err := EncodingFromChar(idPart[0])
	if err != nil {
		r, _ := utf8.DecodeRune(idPart)
		return dst, 0, fmt.Errorf("%w: id character %q", ErrUnknownTokenizer, r)
	}
	t, err := c.Tokenizer(e)
	if err != nil {
		return dst, e, err
	}
	// Go's decoder skips CR and LF; the Rust decoder rejects them (§2.2).
	// (Two IndexByte scans are several times faster than one IndexAny.)
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return dst, e, fmt.Errorf("%w: line feed at data offset %d", ErrBase64, i)
	}
	if i := bytes.IndexByte(data, '\r'); i >= 0 {
		return dst, e, fmt.Errorf("%w: carriage return at data offset %d", ErrBase64, i)
	}
	st := getEncState()
	defer putEncState(st)
	st.buf, err = strictBase64.AppendDecode(st.buf[:0], data)
	if err != nil {
		return dst, e, fmt.Errorf("%w: %v", ErrBase64, err)
	}
	out, err := t.v.appendDecoded(dst, st.buf, c.maxDecoded)
	return out, e, err
}

// DecodeBinary appends the text that a binary-form message decodes to, and
// returns its encoding. An empty message is ErrMissingTokenizerID, an
// unknown tokenizer byte ErrUnknownTokenizer; the other errors are those of
// DecodeText. On error dst is returned unchanged.
func (c *Codec) DecodeBinary(dst, msg []byte) ([]byte, Encoding, error) {
	if len(msg) > c.maxMessage {
		return dst, 0, fmt.Errorf("%w: message of %d bytes exceeds %d", ErrLimit, len(msg), c.maxMessage)
	}
	if len(msg) == 0 {
		return dst, 0, ErrMissingTokenizerID
	}
	e, err := EncodingFromByte(msg[0])
	if err != nil {
		return dst, 0, err
	}
	t, err := c.Tokenizer(e)
	if err != nil {
		return dst, e, err
	}
	out, err := t.v.appendDecoded(dst, msg[1:], c.maxDecoded)
	return out, e, err
}
