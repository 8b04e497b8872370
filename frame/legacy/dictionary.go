package legacy

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/m2md/m2md/frame"
)

// PrefixDictionary starts a dictionary-form message: the prefix, then
// standard padded Base64 of the text with common JSON fragments replaced by
// single bytes 0x80–0xB4.
//
// The prefix is also the beginning of the M2M v1 prefix "#M2M|1|", so a
// detector must test "#M2M|1|" first. That order is unambiguous for
// everything m2md writes: a Base64 body never contains '|', so a dictionary
// body cannot begin with "1|".
const PrefixDictionary = "#M2M|"

// dictionaryPatterns maps each code byte to its fragment (wire reference
// §6.3). Most fragments deliberately stop before a closing quote.
var dictionaryPatterns = [256]string{
	0x80: `{"role":"user","content":`,
	0x81: `{"role":"assistant","content":`,
	0x82: `{"role":"system","content":`,
	0x83: `"}`,
	0x84: `},`,
	0x85: `"}]`,
	0x86: `{"messages":[`,
	0x87: `{"model":`,
	0x88: `,"messages":[`,
	0x89: `,"max_tokens":`,
	0x8a: `,"temperature":`,
	0x8b: `,"stream":true`,
	0x8c: `,"stream":false`,
	0x90: `"gpt-4`,
	0x91: `"gpt-4o`,
	0x92: `"gpt-4o-mini`,
	0x93: `"gpt-3.5-turbo`,
	0x94: `"claude-3`,
	0x95: `"llama`,
	0xa0: `{"choices":[{`,
	0xa1: `"finish_reason":"stop"`,
	0xa2: `"finish_reason":"length"`,
	0xa3: `,"usage":{`,
	0xa4: `"prompt_tokens":`,
	0xa5: `,"completion_tokens":`,
	0xa6: `,"total_tokens":`,
	0xa7: `"index":0,`,
	0xa8: `"message":{`,
	0xa9: `"delta":{`,
	0xb0: `"tool_calls":[{`,
	0xb1: `"type":"function",`,
	0xb2: `"function":{`,
	0xb3: `"name":`,
	0xb4: `,"arguments":`,
}

type dictionaryCandidate struct {
	pattern []byte
	code    byte
}

// dictionaryByFirstByte lists, for each possible first byte, the patterns
// starting with it, longest first: the Rust encoder tries patterns in
// descending length and takes the first match.
var dictionaryByFirstByte = func() (t [256][]dictionaryCandidate) {
	for code, p := range dictionaryPatterns {
		if p != "" {
			t[p[0]] = append(t[p[0]], dictionaryCandidate{[]byte(p), byte(code)})
		}
	}
	for _, list := range t {
		slices.SortStableFunc(list, func(a, b dictionaryCandidate) int { return len(b.pattern) - len(a.pattern) })
	}
	return t
}()

// EncodeDictionary appends the dictionary form of text to dst.
//
// The body is always Base64. The Rust encoder sends texts shorter than 50
// bytes raw after the prefix; m2md does not, because its decoder refuses a
// body that is not Base64 (a Rust decoder reads both). text must be ASCII
// (ErrNonASCII otherwise: the Rust encoder panics on non-ASCII input and its
// decoder cannot round-trip it) and at most Limits.MaxDecompressed bytes.
// On error nothing is appended.
func EncodeDictionary(dst, text []byte, limits frame.Limits) ([]byte, error) {
	lim := limits.Effective()
	if len(text) > lim.MaxDecompressed {
		return dst, sizeError(codecDictionary, "text", len(text), lim.MaxDecompressed)
	}
	for i, c := range text {
		if c >= 0x80 {
			return dst, newError(codecDictionary, ErrNonASCII, i, "the dictionary form carries ASCII text only")
		}
	}
	buf := getBuf()
	defer putBuf(buf)
	packed := slices.Grow((*buf)[:0], len(text))
	for i := 0; i < len(text); {
		c := text[i]
		matched := false
		for _, cand := range dictionaryByFirstByte[c] {
			if bytes.HasPrefix(text[i:], cand.pattern) {
				packed = append(packed, cand.code)
				i += len(cand.pattern)
				matched = true
				break
			}
		}
		if !matched {
			packed = append(packed, c)
			i++
		}
	}
	*buf = packed
	total := len(PrefixDictionary) + strictBase64.EncodedLen(len(packed))
	if total > lim.MaxMessage {
		return dst, sizeError(codecDictionary, "encoded message", total, lim.MaxMessage)
	}
	dst = append(dst, PrefixDictionary...)
	return strictBase64.AppendEncode(dst, packed), nil
}

// DecodeDictionary appends the text carried by a dictionary-form message to
// dst. src may start with PrefixDictionary or be the bare Base64 body.
//
// Unlike the Rust decoder, which hands back a body that is not Base64
// unchanged and turns unknown bytes >= 0x80 into Latin-1 characters, this
// decoder refuses both (ErrMalformed, ErrNonASCII): a known prefix with a
// malformed body is an error (wire reference §12). The expanded size is
// computed and checked against Limits.MaxDecompressed before any output is
// written. On error nothing is appended.
func DecodeDictionary(dst, src []byte, limits frame.Limits) ([]byte, error) {
	lim := limits.Effective()
	if len(src) > lim.MaxMessage {
		return dst, sizeError(codecDictionary, "message", len(src), lim.MaxMessage)
	}
	body := src
	bodyOffset := 0
	if bytes.HasPrefix(src, []byte(PrefixDictionary)) {
		body = src[len(PrefixDictionary):]
		bodyOffset = len(PrefixDictionary)
	}
	buf := getBuf()
	defer putBuf(buf)
	packed, err := decodeBase64(codecDictionary, *buf, body, bodyOffset)
	if err != nil {
		return dst, err
	}
	*buf = packed

	size := 0
	for i, c := range packed {
		switch {
		case c < 0x80:
			size++
		case dictionaryPatterns[c] != "":
			size += len(dictionaryPatterns[c])
		default:
			return dst, newError(codecDictionary, ErrNonASCII, -1,
				"decoded byte "+strconv.Itoa(i)+" is 0x"+strconv.FormatUint(uint64(c), 16)+", neither ASCII nor a dictionary code")
		}
	}
	if size > lim.MaxDecompressed {
		return dst, sizeError(codecDictionary, "decoded text", size, lim.MaxDecompressed)
	}
	dst = slices.Grow(dst, size)
	run := 0
	for i, c := range packed {
		if c >= 0x80 {
			dst = append(dst, packed[run:i]...)
			dst = append(dst, dictionaryPatterns[c]...)
			run = i + 1
		}
	}
	return append(dst, packed[run:]...), nil
}
