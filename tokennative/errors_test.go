package tokennative

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func textMsg(id byte, data []byte) []byte {
	return []byte("#TK|" + string(id) + "|" + base64.StdEncoding.EncodeToString(data))
}

func TestDecodeErrors(t *testing.T) {
	c := New(Config{})
	cl := mustTokenizer(t, c, Cl100k).v
	loneByte := cl.byteRank[0xe2] // the first byte of "…": not UTF-8 alone
	cases := []struct {
		name   string
		binary bool
		msg    []byte
		want   error
	}{
		{"empty", false, nil, ErrNotTokenNative},
		{"other prefix", false, []byte("#M2M|1|abc"), ErrNotTokenNative},
		{"short prefix", false, []byte("#TK"), ErrNotTokenNative},
		{"no id", false, []byte("#TK|"), ErrMissingTokenizerID},
		{"empty id", false, []byte("#TK||sk0L/Q4A"), ErrMissingTokenizerID},
		{"no data", false, []byte("#TK|C"), ErrMissingData},
		{"unknown id", false, []byte("#TK|X|sk0L/Q4A"), ErrUnknownTokenizer},
		{"lower-case id", false, []byte("#TK|c|sk0L/Q4A"), ErrUnknownTokenizer},
		{"non-ASCII id", false, []byte("#TK|é|sk0L/Q4A"), ErrUnknownTokenizer},
		{"llama unconfigured", false, []byte("#TK|L|sk0L/Q4A"), ErrUnavailable},
		{"base64 length", false, []byte("#TK|C|sk0L/Q4"), ErrBase64},
		{"base64 extra pad", false, []byte("#TK|C|sk0L/Q4A="), ErrBase64},
		{"base64 trailing bits", false, []byte("#TK|O|4FTXJ+46RqsEDBNOxiHjlALVgwHgVIxE7jqUC8YhtBnuOqlniY8BXODaAR=="), ErrBase64},
		{"base64 missing pad", false, []byte("#TK|O|4FTXJ+46RqsEDBNOxiHjlALVgwHgVIxE7jqUC8YhtBnuOqlniY8BXODaAQ"), ErrBase64},
		{"base64 newline", false, []byte("#TK|C|sk0L\n/Q4A"), ErrBase64},
		{"base64 CR", false, []byte("#TK|C|sk0L/Q4A\r"), ErrBase64},
		{"base64 space", false, []byte("#TK|C|sk0L /Q4A"), ErrBase64},
		{"base64 second bar", false, []byte("#TK|C|sk0L|/Q4A"), ErrBase64},
		{"base64url alphabet", false, []byte("#TK|O|4FTXJ-46RqsEDBNOxiHjlALVgwHgVIxE7jqUC8YhtBnuOqlniY8BXODaAQ=="), ErrBase64},
		{"truncated varint", false, textMsg('C', []byte{0xb2}), ErrTruncatedVarint},
		{"truncated after token", false, textMsg('C', []byte{0x00, 0x80, 0x80}), ErrTruncatedVarint},
		{"six-byte varint", false, textMsg('C', []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}), ErrVarintOverflow},
		{"five bytes over 32 bits", false, textMsg('C', []byte{0xff, 0xff, 0xff, 0xff, 0x1f}), ErrVarintOverflow},
		{"unused cl100k id", false, textMsg('C', appendVarint(nil, 100256)), ErrUnknownToken},
		{"cl100k gap", false, textMsg('C', appendVarint(nil, 100261)), ErrUnknownToken},
		{"past cl100k", false, textMsg('C', appendVarint(nil, 100277)), ErrUnknownToken},
		{"max u32", false, textMsg('C', appendVarint(nil, 0xffffffff)), ErrUnknownToken},
		{"unused o200k id", false, textMsg('O', appendVarint(nil, 199998)), ErrUnknownToken},
		{"past o200k", false, textMsg('O', appendVarint(nil, 200019)), ErrUnknownToken},
		{"lone UTF-8 lead byte", false, textMsg('C', appendVarint(nil, loneByte)), ErrNotUTF8},

		{"binary empty", true, nil, ErrMissingTokenizerID},
		{"binary unknown tokenizer", true, []byte{0x03, 0x00}, ErrUnknownTokenizer},
		{"binary 0xff tokenizer", true, []byte{0xff}, ErrUnknownTokenizer},
		{"binary text id char", true, []byte{'C', 0x00}, ErrUnknownTokenizer},
		{"binary llama unconfigured", true, []byte{0x02, 0x00}, ErrUnavailable},
		{"binary truncated", true, []byte{0x00, 0xb2, 0x4d, 0x8b}, ErrTruncatedVarint},
		{"binary overflow", true, []byte{0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrVarintOverflow},
		{"binary OOV", true, append([]byte{0x00}, appendVarint(nil, 100300)...), ErrUnknownToken},
		{"binary not UTF-8", true, append([]byte{0x00, 0x0b}, appendVarint(nil, loneByte)...), ErrNotUTF8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("prefix")
			decode := c.DecodeText
			if tc.binary {
				decode = c.DecodeBinary
			}
			got, _, err := decode(dst, tc.msg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if string(got) != "prefix" {
				t.Errorf("dst = %q after error, want it unchanged", got)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	c := New(Config{})
	for _, tc := range []struct {
		name string
		enc  Encoding
		text []byte
		want error
	}{
		{"invalid UTF-8", Cl100k, []byte("abc\xff"), ErrNotUTF8},
		{"surrogate", O200k, []byte("\xed\xa0\x80"), ErrNotUTF8},
		{"unknown encoding", Encoding(3), []byte("x"), ErrUnknownTokenizer},
		{"llama unconfigured", Llama3, []byte("x"), ErrUnavailable},
	} {
		for name, encode := range map[string]func([]byte, Encoding, []byte) ([]byte, error){"text": c.AppendText, "binary": c.AppendBinary} {
			got, err := encode([]byte("dst"), tc.enc, tc.text)
			if !errors.Is(err, tc.want) || string(got) != "dst" {
				t.Errorf("%s %s: %q, %v; want dst unchanged and %v", tc.name, name, got, err, tc.want)
			}
		}
	}
	if _, err := mustTokenizer(t, c, Cl100k).Encode(nil, []byte{0xc0, 0x80}); !errors.Is(err, ErrNotUTF8) {
		t.Errorf("Tokenizer.Encode(overlong NUL) = %v, want ErrNotUTF8", err)
	}
}

func TestTokenizerDecodeErrors(t *testing.T) {
	tok := mustTokenizer(t, New(Config{}), O200k)
	for _, tc := range []struct {
		ids  []uint32
		want error
	}{
		{[]uint32{13225, 199998}, ErrUnknownToken},
		{[]uint32{1 << 31}, ErrUnknownToken},
		{[]uint32{tok.v.byteRank[0xf0]}, ErrNotUTF8},
	} {
		got, err := tok.Decode([]byte("x"), tc.ids)
		if !errors.Is(err, tc.want) || string(got) != "x" {
			t.Errorf("Decode(%v) = %q, %v; want %v", tc.ids, got, err, tc.want)
		}
	}
	if n := tok.NumIDs(); n != 200019 {
		t.Errorf("o200k NumIDs = %d, want 200019", n)
	}
}

func TestLimits(t *testing.T) {
	hello := []byte("#TK|C|sk0L/Q4A")
	helloBin := unhex(t, "00 b2 4d 0b fd 0e 00")

	small := New(Config{MaxMessage: len(hello) - 1})
	if _, _, err := small.DecodeText(nil, hello); !errors.Is(err, ErrLimit) {
		t.Errorf("DecodeText over MaxMessage: %v", err)
	}
	if _, _, err := small.DecodeBinary(nil, bytes.Repeat(helloBin, 3)); !errors.Is(err, ErrLimit) {
		t.Errorf("DecodeBinary over MaxMessage: %v", err)
	}
	if _, err := small.AppendText(nil, Cl100k, []byte("Hello, world!")); !errors.Is(err, ErrLimit) {
		t.Errorf("AppendText output over MaxMessage: %v", err)
	}
	if got, err := small.AppendBinary([]byte("d"), Cl100k, bytes.Repeat([]byte("Hello, world! "), 2)); !errors.Is(err, ErrLimit) || string(got) != "d" {
		t.Errorf("AppendBinary output over MaxMessage: %q, %v", got, err)
	}

	// "Hello, world!" is 13 bytes: a 12-byte cap stops the decoder.
	tight := New(Config{MaxDecoded: 12})
	if got, _, err := tight.DecodeText([]byte("d"), hello); !errors.Is(err, ErrLimit) || string(got) != "d" {
		t.Errorf("DecodeText over MaxDecoded: %q, %v", got, err)
	}
	if _, _, err := tight.DecodeBinary(nil, helloBin); !errors.Is(err, ErrLimit) {
		t.Errorf("DecodeBinary over MaxDecoded: %v", err)
	}
	if _, err := tight.AppendText(nil, Cl100k, []byte("Hello, world!")); !errors.Is(err, ErrLimit) {
		t.Errorf("AppendText of text over MaxDecoded: %v", err)
	}
	if _, err := mustTokenizer(t, tight, Cl100k).Decode(nil, []uint32{9906, 11, 1917, 0}); !errors.Is(err, ErrLimit) {
		t.Errorf("Tokenizer.Decode over MaxDecoded: %v", err)
	}
	if got, _, err := New(Config{MaxDecoded: 13}).DecodeText(nil, hello); err != nil || string(got) != "Hello, world!" {
		t.Errorf("DecodeText at exactly MaxDecoded: %q, %v", got, err)
	}

	// Expansion: the 63-space token is a 2-byte varint, so 1 KB of varints
	// expands to 32 KB. The cap stops it before the memory is spent.
	cl := mustTokenizer(t, New(Config{}), Cl100k)
	spaces, _ := cl.Encode(nil, []byte(strings.Repeat(" ", 64)+"x"))
	if len(spaces) != 2 {
		t.Fatalf("64 spaces + x = %v, want one whitespace token and x", spaces)
	}
	bomb := []byte{0x00}
	for range 512 {
		bomb = appendVarint(bomb, spaces[0])
	}
	capped := New(Config{MaxDecoded: 4096})
	got, _, err := capped.DecodeBinary(make([]byte, 0, 16), bomb)
	if !errors.Is(err, ErrLimit) || len(got) != 0 {
		t.Errorf("expanding message: %d bytes, %v; want ErrLimit", len(got), err)
	}
	if out, _, err := New(Config{}).DecodeBinary(nil, bomb); err != nil || len(out) != 512*63 {
		t.Errorf("same message without the cap: %d bytes, %v; want 512×63 spaces", len(out), err)
	}

	// Limits clamp to the defaults: a larger value cannot loosen them.
	if c := New(Config{MaxMessage: 1 << 30, MaxDecoded: -1}); c.maxMessage != DefaultMaxMessage || c.maxDecoded != DefaultMaxDecoded {
		t.Errorf("limits not clamped: %d, %d", c.maxMessage, c.maxDecoded)
	}
	huge := make([]byte, DefaultMaxMessage+1)
	copy(huge, "#TK|C|")
	if _, _, err := New(Config{}).DecodeText(nil, huge); !errors.Is(err, ErrLimit) {
		t.Errorf("17 MiB message: %v", err)
	}
}

func TestEncodingIDs(t *testing.T) {
	for _, tc := range []struct {
		e    Encoding
		char byte
		name string
	}{{Cl100k, 'C', "cl100k_base"}, {O200k, 'O', "o200k_base"}, {Llama3, 'L', "llama3"}} {
		if tc.e.Char() != tc.char || tc.e.String() != tc.name || !tc.e.Valid() {
			t.Errorf("%d: char %q name %q", tc.e, tc.e.Char(), tc.e.String())
		}
		if e, err := EncodingFromChar(tc.char); err != nil || e != tc.e {
			t.Errorf("EncodingFromChar(%q) = %v, %v", tc.char, e, err)
		}
		if e, err := EncodingFromByte(byte(tc.e)); err != nil || e != tc.e {
			t.Errorf("EncodingFromByte(%d) = %v, %v", tc.e, e, err)
		}
	}
	if _, err := EncodingFromChar('H'); !errors.Is(err, ErrUnknownTokenizer) {
		t.Errorf("EncodingFromChar('H'): %v", err)
	}
	if _, err := EncodingFromByte(3); !errors.Is(err, ErrUnknownTokenizer) {
		t.Errorf("EncodingFromByte(3): %v", err)
	}
	if Encoding(3).Valid() || Encoding(3).Char() != 0 {
		t.Error("Encoding(3) valid")
	}
	if !IsText([]byte("#TK|C|")) || IsText([]byte("#TK")) || IsText([]byte{0x00}) {
		t.Error("IsText")
	}
}
