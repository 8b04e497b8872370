package legacy

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// Every decoder must either append a well-formed result or fail with one of
// the package's errors and leave dst exactly as it was.

var fuzzPrefix = []byte("keep")

func checkDecodeResult(t *testing.T, name string, out []byte, err error) []byte {
	t.Helper()
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || !(errors.Is(err, ErrMalformed) || errors.Is(err, ErrLimit) ||
			errors.Is(err, ErrNotUTF8) || errors.Is(err, ErrNonASCII)) {
			t.Fatalf("%s: untyped error %v", name, err)
		}
		if !bytes.Equal(out, fuzzPrefix) {
			t.Fatalf("%s: failed with %v but returned %q", name, err, out)
		}
		return nil
	}
	if !bytes.HasPrefix(out, fuzzPrefix) {
		t.Fatalf("%s: dst prefix lost", name)
	}
	return out[len(fuzzPrefix):]
}

func addCorpusSeeds(f *testing.F, encode func([]byte) ([]byte, error)) {
	for i, c := range testkit.Corpus(f) {
		if i%4 != 0 || len(c.Data) > 8<<10 { // a spread of shapes, kept small for speed
			continue
		}
		if enc, err := encode(c.Data); err == nil {
			f.Add(enc)
		}
	}
}

func FuzzDecodeT1(f *testing.F) {
	for _, v := range t1Vectors {
		f.Add([]byte(v.want))
		f.Add([]byte(v.in))
	}
	f.Add([]byte("#T1|\x0c\x01Hi\"}]}"))
	f.Add([]byte(`#T1|{"v":[18446744073709551616,-0,1e-400,1.5e300,0.000001,"\ud83d\ude00\u0001"]}`))
	addCorpusSeeds(f, func(b []byte) ([]byte, error) { return EncodeT1(nil, b, T1Options{}) })

	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := DecodeT1(bytes.Clone(fuzzPrefix), data, frame.Limits{})
		dec := checkDecodeResult(t, "DecodeT1", out, err)
		if err == nil {
			if !json.Valid(dec) || !utf8.Valid(dec) {
				t.Fatalf("DecodeT1 produced invalid JSON %q", dec)
			}
			// Decoding is idempotent: nothing is left to expand or restore.
			// Only floats may move: serde_json's default parser is not
			// correctly rounded, so it does not always read back its own
			// output exactly (40e71 -> 4.0000000000000006e+72 ->
			// 4.000000000000001e+72, in Rust too).
			again, err := DecodeT1(nil, dec, frame.Limits{})
			if err != nil || !sameJSONUpToFloatRounding(again, dec) {
				t.Fatalf("DecodeT1 not idempotent: %q -> %q (%v)", dec, again, err)
			}
		}

		// The same bytes as plain JSON: whatever EncodeT1 accepts must be
		// JSON, and must decode, with or without the pattern table.
		enc, err := EncodeT1(bytes.Clone(fuzzPrefix), data, T1Options{})
		enc = checkDecodeResult(t, "EncodeT1", enc, err)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("EncodeT1 accepted invalid JSON %q", data)
		}
		if !strings.HasPrefix(string(enc), PrefixT1) || !json.Valid(enc[len(PrefixT1):]) {
			t.Fatalf("EncodeT1 produced %q", enc)
		}
		plain, err := DecodeT1(nil, enc, frame.Limits{})
		if err != nil {
			t.Fatalf("DecodeT1(EncodeT1(%q)) failed: %v", data, err)
		}
		pat, err := EncodeT1(nil, data, T1Options{Patterns: true})
		if err != nil {
			t.Fatalf("EncodeT1 with patterns failed where without succeeded: %v", err)
		}
		viaPat, err := DecodeT1(nil, pat, frame.Limits{})
		if err != nil || !bytes.Equal(viaPat, plain) {
			t.Fatalf("pattern table changed the decoded document: %q vs %q (%v)", viaPat, plain, err)
		}
	})
}

// sameJSONUpToFloatRounding reports whether a and b are the same JSON
// document, allowing float values to differ by a few units in the last place.
func sameJSONUpToFloatRounding(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, err1 := modelParse(a)
	vb, err2 := modelParse(b)
	return err1 == nil && err2 == nil && nearlyEqual(va, vb)
}

func nearlyEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !nearlyEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !nearlyEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		if !strings.ContainsAny(string(x)+string(y), ".eE") {
			return false // integers are kept exactly
		}
		fx, _ := x.Float64()
		fy, _ := y.Float64()
		diff := math.Abs(fx - fy)
		return diff <= 1e-14*math.Max(math.Abs(fx), math.Abs(fy)) || diff < 1e-300
	default:
		return a == b
	}
}

// Fuzzing uses a 1 MiB decompression cap so that bombs fail fast.
var fuzzZlibLimits = frame.Limits{MaxDecompressed: 1 << 20}

func FuzzDecodeZlib(f *testing.F) {
	for _, v := range zlibForeignVectors {
		f.Add([]byte(v))
	}
	f.Add([]byte(PrefixZlib))
	f.Add([]byte(PrefixZlib + "eJwDAAAAAAE="))
	addCorpusSeeds(f, func(b []byte) ([]byte, error) { return EncodeZlib(nil, b, frame.Limits{}) })

	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := DecodeZlib(bytes.Clone(fuzzPrefix), data, fuzzZlibLimits)
		dec := checkDecodeResult(t, "DecodeZlib", out, err)
		if err == nil {
			if !utf8.Valid(dec) || len(dec) > fuzzZlibLimits.MaxDecompressed {
				t.Fatalf("DecodeZlib produced %d bytes of invalid or oversized text", len(dec))
			}
			roundTripZlib(t, dec)
		}
		if utf8.Valid(data) {
			roundTripZlib(t, data)
		}
	})
}

func roundTripZlib(t *testing.T, text []byte) {
	enc, err := EncodeZlib(nil, text, fuzzZlibLimits)
	if err != nil {
		t.Fatalf("EncodeZlib: %v", err)
	}
	dec, err := DecodeZlib(nil, enc, fuzzZlibLimits)
	if err != nil || !bytes.Equal(dec, text) {
		t.Fatalf("zlib round trip of %q failed: %v", text, err)
	}
}

func FuzzDecodeDictionary(f *testing.F) {
	for _, v := range dictionaryVectors {
		f.Add([]byte(v.wire))
		f.Add([]byte(v.text))
	}
	f.Add([]byte(PrefixDictionary))
	f.Add([]byte("#M2M|1|IgABAAAA"))
	f.Add([]byte("#M2M|gYGBgYGBgYE="))
	addCorpusSeeds(f, func(b []byte) ([]byte, error) { return EncodeDictionary(nil, b, frame.Limits{}) })

	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := DecodeDictionary(bytes.Clone(fuzzPrefix), data, frame.Limits{})
		dec := checkDecodeResult(t, "DecodeDictionary", out, err)
		if err == nil {
			if !isASCII(dec) {
				t.Fatalf("DecodeDictionary produced non-ASCII text")
			}
			roundTripDictionary(t, dec)
		}
		if isASCII(data) {
			roundTripDictionary(t, data)
		} else if _, err := EncodeDictionary(nil, data, frame.Limits{}); !errors.Is(err, ErrNonASCII) {
			t.Fatalf("EncodeDictionary accepted non-ASCII input: %v", err)
		}
	})
}

func roundTripDictionary(t *testing.T, text []byte) {
	enc, err := EncodeDictionary(nil, text, frame.Limits{})
	if err != nil {
		t.Fatalf("EncodeDictionary: %v", err)
	}
	dec, err := DecodeDictionary(nil, enc, frame.Limits{})
	if err != nil || !bytes.Equal(dec, text) {
		t.Fatalf("dictionary round trip of %q failed: %v", text, err)
	}
}
