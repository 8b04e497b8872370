package tokennative

import "fmt"

// Encoding identifies a tokenizer. Its value is the tokenizer byte of the
// binary wire form (wire reference §5); Char gives the id character of the
// text form.
type Encoding byte

const (
	// Cl100k is OpenAI's cl100k_base (GPT-4, GPT-3.5): id char 'C', byte 00.
	Cl100k Encoding = 0x00
	// O200k is OpenAI's o200k_base (GPT-4o, o1, o3): id char 'O', byte 01.
	O200k Encoding = 0x01
	// Llama3 is Meta's Llama 3 tokenizer (128,000 BPE ranks and 256 special
	// tokens): id char 'L', byte 02. The Rust reference writes cl100k ids under
	// 'L'; m2md uses the real Llama 3 vocabulary (wire reference §12 row 20),
	// so a Rust peer decodes m2md's 'L' messages to the wrong text.
	Llama3 Encoding = 0x02
)

// encodingCount is the number of defined encodings; an Encoding below it is valid.
const encodingCount = 3

var encodingChars = [encodingCount]byte{Cl100k: 'C', O200k: 'O', Llama3: 'L'}

var encodingNames = [encodingCount]string{Cl100k: "cl100k_base", O200k: "o200k_base", Llama3: "llama3"}

// Char returns the id character of the text form ('C', 'O' or 'L'), or 0 for
// an undefined Encoding.
func (e Encoding) Char() byte {
	if e >= encodingCount {
		return 0
	}
	return encodingChars[e]
}

// String returns the tokenizer's name: "cl100k_base", "o200k_base" or "llama3".
func (e Encoding) String() string {
	if e >= encodingCount {
		return fmt.Sprintf("Encoding(0x%02x)", byte(e))
	}
	return encodingNames[e]
}

// Valid reports whether e is one of the defined encodings.
func (e Encoding) Valid() bool { return e < encodingCount }

// EncodingFromChar maps a text-form id character to its Encoding. Unlike the
// Rust reference, which falls back to cl100k, an unknown character is an
// error (wire reference §12 row 22): guessing a tokenizer yields wrong text.
func EncodingFromChar(c byte) (Encoding, error) {
	switch c {
	case 'C':
		return Cl100k, nil
	case 'O':
		return O200k, nil
	case 'L':
		return Llama3, nil
	}
	return 0, fmt.Errorf("%w: id character %q", ErrUnknownTokenizer, c)
}

// EncodingFromByte maps a binary-form tokenizer byte to its Encoding; an
// unknown byte is an error.
func EncodingFromByte(b byte) (Encoding, error) {
	if Encoding(b) >= encodingCount {
		return 0, fmt.Errorf("%w: tokenizer byte 0x%02x", ErrUnknownTokenizer, b)
	}
	return Encoding(b), nil
}
