package tokennative

import (
	"fmt"
	"unicode/utf8"
)

// Tokenizer turns text into token ids and back for one Encoding. It is safe
// for concurrent use. Get one from Codec.Tokenizer; it applies the Codec's
// MaxDecoded limit.
type Tokenizer struct {
	v          *vocab
	maxDecoded int
}

// Encoding returns the tokenizer's Encoding.
func (t *Tokenizer) Encoding() Encoding { return t.v.enc }

// NumIDs returns one more than the largest token id (special tokens included);
// some ids below it may be unused.
func (t *Tokenizer) NumIDs() int { return t.v.numIDs() }

// Encode appends the token ids of text to dst, exactly as tiktoken-rs's
// encode_with_special_tokens: special token strings anywhere in text (such as
// "<|endoftext|>") become their special ids. text must be valid UTF-8
// (ErrNotUTF8) and at most MaxDecoded bytes (ErrLimit).
func (t *Tokenizer) Encode(dst []uint32, text []byte) ([]uint32, error) {
	if err := t.checkText(text); err != nil {
		return dst, err
	}
	st := getEncState()
	dst = t.v.appendTokens(dst, bytesToString(text), st)
	putEncState(st)
	return dst, nil
}

// Decode appends the text of ids to dst. An id outside the vocabulary is
// ErrUnknownToken; text that is not valid UTF-8 (ids that split a
// character) is ErrNotUTF8; text longer than MaxDecoded is ErrLimit. On error
// dst is returned unchanged.
func (t *Tokenizer) Decode(dst []byte, ids []uint32) ([]byte, error) {
	return t.v.appendDecodedIDs(dst, ids, t.maxDecoded)
}

func (t *Tokenizer) checkText(text []byte) error {
	if len(text) > t.maxDecoded {
		return fmt.Errorf("%w: text of %d bytes exceeds %d", ErrLimit, len(text), t.maxDecoded)
	}
	if !utf8.Valid(text) {
		return fmt.Errorf("%w: text to encode", ErrNotUTF8)
	}
	return nil
}
