package tokennative

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/m2md/m2md/internal/testkit"
)

// unhex decodes a hex dump written with any spacing.
var unhex = testkit.Unhex

const specJSON = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello!"}]}`

// Wire reference §5 vectors: ids, text wire, binary wire (a "…" in the spec
// means only the leading bytes are given there).
var wireVectors = []struct {
	text       string
	enc        Encoding
	ids        []uint32
	textWire   string
	binaryWire string
	binaryFull bool
}{
	{"Hello, world!", Cl100k, []uint32{9906, 11, 1917, 0}, "#TK|C|sk0L/Q4A", "00 b2 4d 0b fd 0e 00", true},
	{"Hello, world!", O200k, []uint32{13225, 11, 2375, 0}, "#TK|O|qWcLxxIA", "01 a9 67 0b c7 12 00", true},
	{"Hello, how are you today?", Cl100k, []uint32{9906, 11, 1268, 527, 499, 3432, 30}, "#TK|C|sk0L9AmPBPMD6Boe", "00 b2 4d 0b f4 09 8f 04 f3 03 e8 1a 1e", true},
	{"Hello, how are you today?", O200k, []uint32{13225, 11, 1495, 553, 481, 4044, 30}, "#TK|O|qWcL1wupBOEDzB8e", "01 a9 67 0b d7 0b a9 04 e1 03 cc 1f 1e", true},
	{specJSON, Cl100k, []uint32{5018, 2590, 3332, 70, 418, 12, 19, 78, 2247, 16727, 67682, 5898, 3332, 882, 2247, 1834, 3332, 9906, 9135, 92, 14316},
		"#TK|C|mieeFIQaRqIDDBNOxxHXggHikASKLoQa8gbHEaoOhBqyTa9HXOxv", "00 9a 27 9e 14", false},
	{specJSON, O200k, []uint32{10848, 5079, 7534, 70, 555, 12, 19, 78, 4294, 35427, 16853, 10848, 8716, 7534, 1428, 4294, 3252, 7534, 13225, 18313, 92, 28000},
		"#TK|O|4FTXJ+46RqsEDBNOxiHjlALVgwHgVIxE7jqUC8YhtBnuOqlniY8BXODaAQ==", "01 e0 54 d7 27", false},
}

func TestWireVectors(t *testing.T) {
	c := New(Config{})
	for _, v := range wireVectors {
		t.Run(v.enc.String()+"/"+v.text[:min(len(v.text), 12)], func(t *testing.T) {
			tok := mustTokenizer(t, c, v.enc)
			ids, err := tok.Encode(nil, []byte(v.text))
			if err != nil || !equalIDs(ids, v.ids) {
				t.Fatalf("ids = %v, %v; want %v", ids, err, v.ids)
			}
			text, err := c.AppendText(nil, v.enc, []byte(v.text))
			if err != nil || string(text) != v.textWire {
				t.Errorf("text wire = %q, %v; want %q", text, err, v.textWire)
			}
			bin, err := c.AppendBinary(nil, v.enc, []byte(v.text))
			if err != nil {
				t.Fatal(err)
			}
			want := unhex(t, v.binaryWire)
			if v.binaryFull && !bytes.Equal(bin, want) || !bytes.HasPrefix(bin, want) {
				t.Errorf("binary wire = % x; want % x (full=%v)", bin, want, v.binaryFull)
			}
			// Both forms carry the same varints.
			varints := []byte{}
			for _, id := range v.ids {
				varints = appendVarint(varints, id)
			}
			if !bytes.Equal(bin[1:], varints) || base64.StdEncoding.EncodeToString(varints) != v.textWire[6:] {
				t.Errorf("binary body % x and text body %s do not both carry varints % x", bin[1:], v.textWire[6:], varints)
			}
			for _, form := range []struct {
				name   string
				decode func(dst, msg []byte) ([]byte, Encoding, error)
				msg    []byte
			}{{"text", c.DecodeText, []byte(v.textWire)}, {"binary", c.DecodeBinary, bin}} {
				got, enc, err := form.decode([]byte("keep:"), form.msg)
				if err != nil || string(got) != "keep:"+v.text || enc != v.enc {
					t.Errorf("%s decode = %q, %v, %v; want %q, %v", form.name, got, enc, err, "keep:"+v.text, v.enc)
				}
			}
			back, err := tok.Decode(nil, v.ids)
			if err != nil || string(back) != v.text {
				t.Errorf("Decode(ids) = %q, %v", back, err)
			}
		})
	}
}

// The Rust decoder ignores characters after the id in the id part, and
// decodes empty data to "".
func TestDecodeTextRustQuirks(t *testing.T) {
	c := New(Config{})
	for _, tc := range []struct{ msg, want string }{
		{"#TK|Cxyz|sk0L/Q4A", "Hello, world!"},
		{"#TK|C|", ""},
		{"#TK|O|", ""},
		{"#TK|OC|qWcLxxIA", "Hello, world!"},
	} {
		got, _, err := c.DecodeText(nil, []byte(tc.msg))
		if err != nil || string(got) != tc.want {
			t.Errorf("DecodeText(%q) = %q, %v; want %q", tc.msg, got, err, tc.want)
		}
	}
	got, enc, err := c.DecodeBinary(nil, []byte{0x01})
	if err != nil || len(got) != 0 || enc != O200k {
		t.Errorf("DecodeBinary(01) = %q, %v, %v; want empty o200k", got, enc, err)
	}
}

// Wire reference §2.1 and §11 varint vectors.
func TestVarints(t *testing.T) {
	for _, tc := range []struct {
		v    uint32
		wire string
	}{{0, "00"}, {1, "01"}, {127, "7f"}, {128, "80 01"}, {300, "ac 02"}, {16383, "ff 7f"}, {16384, "80 80 01"}, {0xffffffff, "ff ff ff ff 0f"}} {
		got := appendVarint(nil, tc.v)
		if want := unhex(t, tc.wire); !bytes.Equal(got, want) {
			t.Errorf("appendVarint(%d) = % x, want % x", tc.v, got, want)
		}
		v, n, err := readVarint(got)
		if err != nil || v != tc.v || n != len(got) {
			t.Errorf("readVarint(% x) = %d, %d, %v", got, v, n, err)
		}
	}
	for _, v := range []uint32{0, 1, 127, 128, 255, 256, 16383, 16384, 100000} {
		b := appendVarint(nil, v)
		if got, n, err := readVarint(b); err != nil || got != v || n != len(b) {
			t.Errorf("round trip %d: %d, %d, %v", v, got, n, err)
		}
	}
	total := 0
	for v := range uint32(1000) {
		total += len(appendVarint(nil, v))
	}
	if avg := float64(total) / 1000; avg >= 2 {
		t.Errorf("tokens 0..999 average %.2f varint bytes, want < 2", avg)
	}
	// Non-minimal encodings are accepted, as by the Rust decoder.
	if v, n, err := readVarint([]byte{0x80, 0x00}); err != nil || v != 0 || n != 2 {
		t.Errorf("non-minimal zero: %d, %d, %v", v, n, err)
	}
}

func TestSpecialTokens(t *testing.T) {
	c := New(Config{})
	cases := []struct {
		enc  Encoding
		text string
		want []any // ordinary text (encoded by tiktoken-go) or a special id
	}{
		{Cl100k, "<|endoftext|>", []any{uint32(100257)}},
		{Cl100k, "hello <|endoftext|>", []any{"hello ", uint32(100257)}},
		{Cl100k, "a<|fim_prefix|>b<|fim_middle|>c<|fim_suffix|>d<|endofprompt|>", []any{"a", uint32(100258), "b", uint32(100259), "c", uint32(100260), "d", uint32(100276)}},
		{Cl100k, "<|endoftext|><|endoftext|>x", []any{uint32(100257), uint32(100257), "x"}},
		{Cl100k, "<|<|endoftext|>|>", []any{"<|", uint32(100257), "|>"}},
		{Cl100k, "<|endoftext|  <|endoftext>  <|unknown|>", []any{"<|endoftext|  <|endoftext>  <|unknown|>"}},
		{O200k, "<|endoftext|> and <|endofprompt|>", []any{uint32(199999), " and ", uint32(200018)}},
		{O200k, "<|fim_prefix|>", []any{"<|fim_prefix|>"}}, // cl100k only
	}
	for _, tc := range cases {
		var want []uint32
		for _, w := range tc.want {
			switch w := w.(type) {
			case string:
				want = append(want, referenceIDs(t, tc.enc, w)...)
			case uint32:
				want = append(want, w)
			}
		}
		tok := mustTokenizer(t, c, tc.enc)
		got, err := tok.Encode(nil, []byte(tc.text))
		if err != nil || !equalIDs(got, want) {
			t.Errorf("%v %q = %v, %v; want %v", tc.enc, tc.text, got, err, want)
		}
		back, err := tok.Decode(nil, got)
		if err != nil || string(back) != tc.text {
			t.Errorf("%v %q decodes to %q, %v", tc.enc, tc.text, back, err)
		}
	}
}

// The decoder copies tokens in 16-byte moves without bounds checks; that is
// safe only because every token is followed by at least decodePad arena
// bytes. Check the invariant for every vocabulary.
func TestArenaPadding(t *testing.T) {
	c := New(Config{})
	encs := []Encoding{Cl100k, O200k}
	if _, err := locateLlama3(); err == nil {
		c = llama3Codec(t)
		encs = append(encs, Llama3)
	}
	for _, e := range encs {
		v := mustTokenizer(t, c, e).v
		last := v.offs[len(v.offs)-1]
		if int(last)+decodePad != len(v.arena) {
			t.Errorf("%v: last token ends at %d, arena is %d bytes: want %d bytes of padding", e, last, len(v.arena), decodePad)
		}
		for id := 1; id < len(v.offs); id++ {
			if v.offs[id] < v.offs[id-1] {
				t.Fatalf("%v: offsets decrease at id %d", e, id)
			}
		}
	}
}
