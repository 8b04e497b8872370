package legacy

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// Vectors from wire reference §6.3.
var dictionaryVectors = []struct{ text, packed, wire string }{
	{
		`{"messages":[{"role":"user","content":"Hello"}]}`,
		"86 80 22 48 65 6c 6c 6f 85 7d",
		"#M2M|hoAiSGVsbG+FfQ==",
	},
	{
		`{"model":"gpt-4o","messages":[{"role":"system","content":"Be helpful"},{"role":"user","content":"Hello"}]}`,
		"87 91 22 88 82 22 42 65 20 68 65 6c 70 66 75 6c 83 2c 80 22 48 65 6c 6c 6f 85 7d",
		"#M2M|h5EiiIIiQmUgaGVscGZ1bIMsgCJIZWxsb4V9",
	},
}

func TestDictionaryVectors(t *testing.T) {
	for _, v := range dictionaryVectors {
		got, err := EncodeDictionary(nil, []byte(v.text), frame.Limits{})
		if err != nil || string(got) != v.wire {
			t.Errorf("EncodeDictionary(%s) = %s, %v; want %s", v.text, got, err, v.wire)
		}
		packed, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(v.wire, PrefixDictionary))
		if want := strings.ReplaceAll(v.packed, " ", ""); hex.EncodeToString(packed) != want {
			t.Errorf("%s: packed bytes %x, want %s", v.text, packed, want)
		}
		for _, src := range []string{v.wire, strings.TrimPrefix(v.wire, PrefixDictionary)} {
			dec, err := DecodeDictionary(nil, []byte(src), frame.Limits{})
			if err != nil || string(dec) != v.text {
				t.Errorf("DecodeDictionary(%s) = %s, %v", src, dec, err)
			}
		}
	}
}

func TestDictionaryEveryCode(t *testing.T) {
	codes := 0
	for c, pat := range dictionaryPatterns {
		if pat == "" {
			continue
		}
		codes++
		got, err := EncodeDictionary(nil, []byte(pat), frame.Limits{})
		if want := PrefixDictionary + base64.StdEncoding.EncodeToString([]byte{byte(c)}); err != nil || string(got) != want {
			t.Errorf("pattern %q encoded to %s, %v; want %s", pat, got, err, want)
		}
		dec, err := DecodeDictionary(nil, got, frame.Limits{})
		if err != nil || string(dec) != pat {
			t.Errorf("code %#x decoded to %q, %v", c, dec, err)
		}
	}
	if codes != 34 {
		t.Errorf("%d codes, want 34", codes)
	}
	// Longest first: `"}]` beats `"}`, `"gpt-4o-mini` beats `"gpt-4o` and `"gpt-4`.
	for text, want := range map[string]string{`"}]`: "85", `"}`: "83", `"gpt-4o-mini"`: "9222", `"gpt-4o"`: "9122", `"gpt-4"`: "9022"} {
		got, _ := EncodeDictionary(nil, []byte(text), frame.Limits{})
		packed, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(string(got), PrefixDictionary))
		if hex.EncodeToString(packed) != want {
			t.Errorf("%s packed to %x, want %s", text, packed, want)
		}
	}
}

func TestDictionaryCorpusRoundTrip(t *testing.T) {
	ascii, packedTotal, plainTotal := 0, 0, 0
	for _, f := range testkit.Corpus(t) {
		enc, err := EncodeDictionary(nil, f.Data, frame.Limits{})
		if !isASCII(f.Data) {
			if !errors.Is(err, ErrNonASCII) {
				t.Errorf("%s: non-ASCII file encoded: %v", f.Name, err)
			}
			continue
		}
		ascii++
		if err != nil {
			t.Fatalf("%s: EncodeDictionary: %v", f.Name, err)
		}
		dec, err := DecodeDictionary([]byte("x"), enc, frame.Limits{})
		if err != nil || !bytes.Equal(dec[1:], f.Data) {
			t.Fatalf("%s: round trip failed: %v", f.Name, err)
		}
		packedTotal += len(enc) - len(PrefixDictionary)
		plainTotal += base64.StdEncoding.EncodedLen(len(f.Data))
	}
	if packedTotal >= plainTotal {
		t.Errorf("patterns saved nothing over the corpus: %d vs %d bytes", packedTotal, plainTotal)
	}
	if ascii < 40 {
		t.Errorf("only %d ASCII corpus files", ascii)
	}
}

func TestDictionaryRejects(t *testing.T) {
	b64 := func(b ...byte) string { return PrefixDictionary + base64.StdEncoding.EncodeToString(b) }
	tests := []struct {
		name string
		in   string
		lim  frame.Limits
		want error
	}{
		{"Rust raw short form", `#M2M|{"model":"gpt-4o"}`, frame.Limits{}, ErrMalformed},
		{"M2M v1 frame", "#M2M|1|IgABAAAA", frame.Limits{}, ErrMalformed},
		{"unpadded", "#M2M|hoAiSGVsbG+FfQ", frame.Limits{}, ErrMalformed},
		{"non-zero trailing bits", "#M2M|hoAiSGVsbG+FfR==", frame.Limits{}, ErrMalformed},
		{"line break", "#M2M|hoAiSGVs\nbG+FfQ==", frame.Limits{}, ErrMalformed},
		{"unused code 0x8d", b64('a', 0x8d), frame.Limits{}, ErrNonASCII},
		{"unused code 0xff", b64(0xff), frame.Limits{}, ErrNonASCII},
		{"Latin-1 byte", b64('c', 'a', 'f', 0xe9), frame.Limits{}, ErrNonASCII},
		{"expansion over the limit", b64(0x81, 0x81), frame.Limits{MaxDecompressed: 59}, ErrLimit},
		{"message over the limit", "#M2M|hoAiSGVsbG+FfQ==", frame.Limits{MaxMessage: 20}, ErrLimit},
	}
	for _, tc := range tests {
		out, err := DecodeDictionary([]byte("keep"), []byte(tc.in), tc.lim)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: error = %v, want %v", tc.name, err, tc.want)
		}
		if string(out) != "keep" {
			t.Errorf("%s: dst changed to %q", tc.name, out)
		}
	}
	if out, err := DecodeDictionary(nil, []byte(b64(0x81, 0x81)), frame.Limits{MaxDecompressed: 60}); err != nil || len(out) != 60 {
		t.Errorf("expansion exactly at the limit: %d bytes, %v", len(out), err)
	}
	if out, err := DecodeDictionary(nil, []byte(PrefixDictionary), frame.Limits{}); err != nil || len(out) != 0 {
		t.Errorf("empty body: %q, %v", out, err)
	}

	var e *Error
	if _, err := EncodeDictionary(nil, []byte("abc\xc3\xa9"), frame.Limits{}); !errors.As(err, &e) || e.Kind != ErrNonASCII || e.Offset != 3 {
		t.Errorf("non-ASCII text: %v", err)
	}
	if _, err := EncodeDictionary(nil, []byte(dictionaryVectors[0].text), frame.Limits{MaxDecompressed: 10}); !errors.Is(err, ErrLimit) {
		t.Errorf("text over MaxDecompressed: %v", err)
	}
	if _, err := EncodeDictionary(nil, []byte(dictionaryVectors[0].text), frame.Limits{MaxMessage: 20}); !errors.Is(err, ErrLimit) {
		t.Errorf("message over MaxMessage: %v", err)
	}
}
