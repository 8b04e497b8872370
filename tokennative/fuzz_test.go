package tokennative

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/m2md/m2md/internal/testkit"
)

// fuzzCodec has every encoding this machine can load (Llama 3 when its
// vocabulary is reachable; the unit tests insist on it under CI).
var fuzzCodec = sync.OnceValue(func() *Codec {
	cfg := Config{}
	if p, err := locateLlama3(); err == nil {
		cfg.Llama3Path = p
	}
	return New(cfg)
})

var decodeErrors = []error{
	ErrLimit, ErrNotTokenNative, ErrMissingTokenizerID, ErrMissingData, ErrUnknownTokenizer,
	ErrUnavailable, ErrBase64, ErrTruncatedVarint, ErrVarintOverflow, ErrUnknownToken, ErrNotUTF8,
}

func isDecodeError(err error) bool {
	return slices.ContainsFunc(decodeErrors, func(e error) bool { return errors.Is(err, e) })
}

func fuzzSeeds(f *testing.F, add func(msg []byte)) {
	c := New(Config{})
	for _, v := range wireVectors {
		add([]byte(v.textWire))
		b, _ := c.AppendBinary(nil, v.enc, []byte(v.text))
		add(b)
	}
	for _, f := range testkit.Corpus(f) {
		if len(f.Data) > 2048 {
			continue
		}
		for _, e := range []Encoding{Cl100k, O200k} {
			m, _ := c.AppendText(nil, e, f.Data)
			add(m)
			m, _ = c.AppendBinary(nil, e, f.Data)
			add(m)
		}
	}
}

// checkDecoded asserts what any successful decode must satisfy: valid UTF-8
// that encodes to a message decoding to the same text.
func checkDecoded(t *testing.T, c *Codec, e Encoding, text []byte) {
	if !utf8.Valid(text) {
		t.Fatalf("decoded text is not UTF-8: %q", text)
	}
	msg, err := c.AppendText(nil, e, text)
	if err != nil {
		t.Fatalf("re-encoding decoded text: %v", err)
	}
	back, e2, err := c.DecodeText(nil, msg)
	if err != nil || e2 != e || !bytes.Equal(back, text) {
		t.Fatalf("decoded text %q does not round-trip: %q, %v", text, back, err)
	}
}

func FuzzDecodeText(f *testing.F) {
	fuzzSeeds(f, func(msg []byte) {
		if IsText(msg) {
			f.Add(msg)
		}
	})
	for _, s := range []string{"", "#TK|", "#TK|C", "#TK||", "#TK|L|sk0L/Q4A", "#TK|X|AA==", "#TK|C|gA==", "#TK|C|/////w8=", "#TK|C|//////8B", "#TK|Cx|sk0L/Q4A"} {
		f.Add([]byte(s))
	}
	c := fuzzCodec()
	f.Fuzz(func(t *testing.T, msg []byte) {
		out, e, err := c.DecodeText([]byte("dst"), msg)
		if err != nil {
			if !isDecodeError(err) || string(out) != "dst" {
				t.Fatalf("error %v (output %q): not a typed error, or output changed", err, out)
			}
			return
		}
		if !bytes.HasPrefix(out, []byte("dst")) || len(msg) < 6 || msg[4] != e.Char() {
			t.Fatalf("decoded %q as %v from %q", out, e, msg)
		}
		checkDecoded(t, c, e, out[3:])
	})
}

func FuzzDecodeBinary(f *testing.F) {
	fuzzSeeds(f, func(msg []byte) {
		if !IsText(msg) {
			f.Add(msg)
		}
	})
	for _, b := range [][]byte{{}, {0x00}, {0x01}, {0x02, 0x00}, {0x03}, {0x00, 0x80}, {0x00, 0xff, 0xff, 0xff, 0xff, 0x0f}, {0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}} {
		f.Add(b)
	}
	c := fuzzCodec()
	f.Fuzz(func(t *testing.T, msg []byte) {
		out, e, err := c.DecodeBinary([]byte("dst"), msg)
		if err != nil {
			if !isDecodeError(err) || string(out) != "dst" {
				t.Fatalf("error %v (output %q): not a typed error, or output changed", err, out)
			}
			return
		}
		if byte(e) != msg[0] {
			t.Fatalf("decoded as %v from tokenizer byte %02x", e, msg[0])
		}
		checkDecoded(t, c, e, out[3:])
	})
}

// FuzzEncodeRoundTrip: any valid UTF-8 round-trips in every encoding and
// form; cl100k and o200k ids equal tiktoken-go's wherever tiktoken-go
// pre-tokenizes correctly (see TestTiktokenGoPretokenizerBugs) and there is
// no special-token text (tiktoken-go has none).
func FuzzEncodeRoundTrip(f *testing.F) {
	for _, s := range pretokenizeCases {
		f.Add(s)
	}
	for _, v := range wireVectors {
		f.Add(v.text)
	}
	for _, v := range llama3Vectors {
		f.Add(v.text)
	}
	for _, fl := range testkit.Corpus(f) {
		if len(fl.Data) <= 1024 {
			f.Add(string(fl.Data))
		}
	}
	c := fuzzCodec()
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			if _, err := c.AppendBinary(nil, Cl100k, []byte(s)); !errors.Is(err, ErrNotUTF8) {
				t.Fatalf("invalid UTF-8 accepted: %v", err)
			}
			return
		}
		for _, e := range c.Available() {
			tok := mustTokenizer(t, c, e)
			ids, err := tok.Encode(nil, []byte(s))
			if err != nil {
				t.Fatalf("%v: %v", e, err)
			}
			if back, err := tok.Decode(nil, ids); err != nil || string(back) != s {
				t.Fatalf("%v: %q decodes to %q, %v", e, s, back, err)
			}
			text, err := c.AppendText(nil, e, []byte(s))
			if err != nil {
				t.Fatal(err)
			}
			bin, err := c.AppendBinary(nil, e, []byte(s))
			if err != nil {
				t.Fatal(err)
			}
			if out, _, err := c.DecodeText(nil, text); err != nil || string(out) != s {
				t.Fatalf("%v text form: %q, %v", e, out, err)
			}
			if out, _, err := c.DecodeBinary(nil, bin); err != nil || string(out) != s {
				t.Fatalf("%v binary form: %q, %v", e, out, err)
			}
			if e != Llama3 && !hasSpecialText(tok.v, s) {
				compareWithTiktokenGo(t, tok.v, s)
			}
		}
	})
}

// FuzzPretokenize: the hand-written matchers split exactly as a
// backtracking regex engine (regexp2's interpreter) does.
func FuzzPretokenize(f *testing.F) {
	for _, s := range pretokenizeCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// regexp2's interpreter backtracks badly on some long inputs (a second
		// for 3 KB); the matchers' behaviour does not depend on length.
		if !utf8.ValidString(s) || len(s) > 512 {
			return
		}
		for _, o200k := range []bool{false, true} {
			got, want := ourPieces(o200k, s), referencePieces(t, o200k, s)
			if !slices.Equal(got, want) {
				t.Fatalf("o200k=%v %q: got %q, want %q", o200k, s, got, want)
			}
		}
	})
}

// FuzzBytePairMerge: the heap merge equals the scan merge, and the tokens
// spell the piece. Pieces are arbitrary bytes here, longer than text makes them.
func FuzzBytePairMerge(f *testing.F) {
	f.Add([]byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"))
	f.Add([]byte("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"))
	f.Add([]byte(strings.Repeat("=-", 40)))
	f.Add([]byte("\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf"))
	c := New(Config{})
	vs := []*vocab{mustTokenizer(f, c, Cl100k).v, mustTokenizer(f, c, O200k).v}
	f.Fuzz(func(t *testing.T, piece []byte) {
		if len(piece) < 2 {
			return
		}
		s := string(piece)
		for _, v := range vs {
			heap := v.bpeHeap(nil, s, new(encState))
			if len(s) <= bpeScanMax {
				if scan := v.bpeScan(nil, s, new([bpeScanMax + 1]bpePart)); !slices.Equal(scan, heap) {
					t.Fatalf("%v %q: scan %v, heap %v", v.enc, s, scan, heap)
				}
			}
			var spelled []byte
			for _, id := range heap {
				spelled = append(spelled, v.token(id)...)
			}
			if !bytes.Equal(spelled, piece) {
				t.Fatalf("%v %q: tokens %v spell %q", v.enc, s, heap, spelled)
			}
		}
	})
}
