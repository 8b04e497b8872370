package tokennative

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/internal/testkit"
)

// Expected Llama 3 ids. The first group is from ollama's own tests
// (tokenizer/bytepairencoding_test.go in the module the vocabulary comes
// from); the rest were computed with an independent implementation of Meta's
// tokenizer (tiktoken's rank merging over encoder.json, Python's regex module
// for the pattern), which also agreed with this package on the whole corpus
// and on War and Peace (993,273 tokens).
var llama3Vectors = []struct {
	text string
	ids  []uint32
}{
	{"hello world", []uint32{15339, 1917}},
	{"hello <|end_of_text|>", []uint32{15339, 220, 128001}},
	{"<|begin_of_text|>A B!", []uint32{128000, 32, 426, 0}},
	{"<|begin_of_text|>A<|end_of_text|>B!", []uint32{128000, 32, 128001, 33, 0}},
	{"<|begin_of_text|>A<|end_of_text|>B<|begin_of_text|>!", []uint32{128000, 32, 128001, 33, 128000, 0}},
	{"<|begin_of_text|>A<|end_of_text|>B<|begin_of_text|>!<|end_of_text|>", []uint32{128000, 32, 128001, 33, 128000, 0, 128001}},
	{"0", []uint32{15}},
	{"00", []uint32{410}},
	{"000", []uint32{931}},
	{"0000", []uint32{931, 15}},
	{"00000", []uint32{931, 410}},
	{"0000000000000000", []uint32{931, 931, 931, 931, 931, 15}},
	{"00000000000000000", []uint32{931, 931, 931, 931, 931, 410}},

	{"Hello, world!", []uint32{9906, 11, 1917, 0}},
	{"Die Bäckerei in Hamburg eröffnet nächste Woche.", []uint32{18674, 426, 2357, 377, 486, 72, 304, 51562, 2781, 52276, 4816, 63768, 5455, 82540, 13}},
	{"законодательства", []uint32{9136, 115921, 118925, 94071}},
	{"日本語のテキストを書きます。", []uint32{102433, 102158, 16144, 57933, 62903, 71634, 30512, 102181, 50834, 33541, 1811}},
	{"مرحبا بالعالم", []uint32{101244, 30925, 103645, 100700, 24102, 101952}},
	{"Großartig! Ça va très bien.", []uint32{77435, 8156, 472, 343, 0, 64105, 64, 11412, 25945, 14707, 13}},
	{"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>", []uint32{128000, 128006, 882, 128007, 271, 9906, 0, 128009}},
	{"<|python_tag|>x<|eom_id|><|finetune_right_pad_id|><|reserved_special_token_2|><|reserved_special_token_247|>", []uint32{128010, 87, 128008, 128004, 128005, 128255}},
	{"        indented = True\n", []uint32{286, 1280, 16243, 284, 3082, 198}},
	// Rank merging, as Meta's tiktoken-based tokenizer does. Merge-list BPE
	// (Hugging Face's tokenizer.json, ollama) gives [1131 32807] here.
	{"....\"\n\n\n", []uint32{1975, 15993}},
}

func TestLlama3Vectors(t *testing.T) {
	c := llama3Codec(t)
	tok := mustTokenizer(t, c, Llama3)
	cl := mustTokenizer(t, c, Cl100k)
	differ := 0
	for _, v := range llama3Vectors {
		got, err := tok.Encode(nil, []byte(v.text))
		if err != nil || !equalIDs(got, v.ids) {
			t.Errorf("%q = %v, %v; want %v", v.text, got, err, v.ids)
		}
		back, err := tok.Decode(nil, v.ids)
		if err != nil || string(back) != v.text {
			t.Errorf("Decode(%v) = %q, %v", v.ids, back, err)
		}
		for _, form := range []func([]byte, Encoding, []byte) ([]byte, error){c.AppendText, c.AppendBinary} {
			msg, err := form(nil, Llama3, []byte(v.text))
			if err != nil {
				t.Fatal(err)
			}
			decode := c.DecodeBinary
			if IsText(msg) {
				decode = c.DecodeText
			}
			if out, e, err := decode(nil, msg); err != nil || e != Llama3 || string(out) != v.text {
				t.Errorf("%q: round trip through %q gives %q, %v, %v", v.text, msg, out, e, err)
			}
		}
		if ids, _ := cl.Encode(nil, []byte(v.text)); !equalIDs(ids, v.ids) {
			differ++
		}
	}
	// Llama 3 extends cl100k's ranks: ASCII text shares ids, other scripts
	// and the special tokens do not.
	if differ < 10 {
		t.Errorf("only %d vectors differ between Llama 3 and cl100k", differ)
	}
	if msg, _ := c.AppendText(nil, Llama3, []byte("Hello, world!")); string(msg) != "#TK|L|sk0L/Q4A" {
		t.Errorf("Llama 3 text form of Hello, world! = %q", msg)
	}
}

func TestLlama3SpecialTokenTable(t *testing.T) {
	tok := mustTokenizer(t, llama3Codec(t), Llama3)
	if n := tok.NumIDs(); n != 128256 {
		t.Fatalf("NumIDs = %d, want 128256", n)
	}
	want := map[uint32]string{
		128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128002: "<|reserved_special_token_0|>",
		128003: "<|reserved_special_token_1|>", 128004: "<|finetune_right_pad_id|>", 128005: "<|reserved_special_token_2|>",
		128006: "<|start_header_id|>", 128007: "<|end_header_id|>", 128008: "<|eom_id|>", 128009: "<|eot_id|>",
		128010: "<|python_tag|>", 128011: "<|reserved_special_token_3|>", 128255: "<|reserved_special_token_247|>",
	}
	seen := map[string]bool{}
	for id := uint32(128000); id < 128256; id++ {
		text, err := tok.Decode(nil, []uint32{id})
		if err != nil {
			t.Fatalf("special id %d: %v", id, err)
		}
		if w, ok := want[id]; ok && string(text) != w {
			t.Errorf("id %d = %q, want %q", id, text, w)
		}
		if seen[string(text)] {
			t.Errorf("id %d repeats %q", id, text)
		}
		seen[string(text)] = true
		if ids, _ := tok.Encode(nil, text); !equalIDs(ids, []uint32{id}) {
			t.Errorf("%q encodes to %v, want [%d]", text, ids, id)
		}
	}
	if _, err := tok.Decode(nil, []uint32{128256}); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("id 128256: %v", err)
	}
}

func TestLlama3Availability(t *testing.T) {
	zero := New(Config{})
	if got := zero.Available(); !slices.Equal(got, []Encoding{Cl100k, O200k}) {
		t.Errorf("zero Config lists %v", got)
	}
	if _, err := zero.Tokenizer(Llama3); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Tokenizer(Llama3) without a path: %v", err)
	}
	c := New(Config{Llama3Path: "/nonexistent/llama3"})
	if got := c.Available(); !slices.Equal(got, []Encoding{Cl100k, O200k, Llama3}) {
		t.Errorf("configured Config lists %v", got)
	}
	if _, err := c.Tokenizer(Llama3); !errors.Is(err, ErrVocabulary) {
		t.Errorf("bad path: %v", err)
	}
	if _, _, err := c.DecodeText(nil, []byte("#TK|L|sk0L/Q4A")); !errors.Is(err, ErrVocabulary) {
		t.Errorf("decode with a bad path: %v", err)
	}
}

// The layouts hold the same vocabulary: a directory with encoder.json and
// vocab.bpe, encoder.json named directly, and a tiktoken rank file
// (tokenizer.model) made from it, in a directory or named directly.
func TestLlama3Layouts(t *testing.T) {
	dir := llama3Path(t)
	tokens, merges, _, err := readLlama3(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(merges) == 0 {
		t.Fatal("vocab.bpe beside encoder.json was not read")
	}
	var model strings.Builder
	for r, tok := range tokens {
		fmt.Fprintf(&model, "%s %d\n", base64.StdEncoding.EncodeToString(tok), r)
	}
	modelDir := t.TempDir()
	modelFile := filepath.Join(modelDir, "tokenizer.model")
	if err := os.WriteFile(modelFile, []byte(model.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "encoder.json"), modelDir, modelFile} {
		got, _, _, err := readLlama3(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !slices.EqualFunc(got, tokens, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Errorf("%s: other ranks than %s", path, dir)
		}
	}
	// Through the public API, the rank file encodes as encoder.json does.
	sample := testkit.CorpusFile(t, "conversations/conv-02/turn-04.json")
	want, err := mustTokenizer(t, New(Config{Llama3Path: dir}), Llama3).Encode(nil, sample)
	if err != nil {
		t.Fatal(err)
	}
	got, err := mustTokenizer(t, New(Config{Llama3Path: modelDir}), Llama3).Encode(nil, sample)
	if err != nil || !equalIDs(got, want) {
		t.Errorf("tokenizer.model encodes differently from encoder.json (%v)", err)
	}
}

func TestLlama3BadVocabularies(t *testing.T) {
	dir := llama3Path(t)
	encoderJSON, err := os.ReadFile(filepath.Join(dir, "encoder.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Every token line of encoder.json is `  "token": id,`; "!" is id 0.
	first := []byte(`"!": 0,`)
	if !bytes.Contains(encoderJSON, first) {
		t.Fatal("encoder.json layout changed: no `\"!\": 0,`")
	}
	edit := func(replacement string) []byte {
		return bytes.Replace(encoderJSON, first, []byte(replacement), 1)
	}
	cases := []struct {
		name          string
		encoder       []byte
		rankFile      string
		wantInMessage string
	}{
		{"gpt-2 sized", []byte(`{"a": 0, "b": 1}`), "", "not a Llama 3 vocabulary"},
		{"not JSON", []byte(`{"a": 0,`), "", "want a string"},
		{"trailing garbage", []byte(`{"a": 0} x`), "", "not one JSON object"},
		{"fractional id", []byte(`{"a": 0.5}`), "", "want a token id"},
		{"negative id", []byte(`{"a": -1}`), "", "want a token id"},
		{"bad escape", []byte(`{"\q": 0}`), "", "bad escape"},
		{"id out of range", edit(`"!": 128000,`), "", "outside"},
		{"duplicate id", edit(`"!": 1,`), "", "twice"},
		{"not GPT-2 alphabet", edit(`"\u4e00": 0,`), "", "GPT-2 byte alphabet"},
		{"missing byte", edit(`"!!!!!!!!x": 0,`), "", "byte 0x21 has no token"},
		{"duplicate bytes", bytes.Replace(encoderJSON, []byte(`"\"": 1,`), []byte(`"\u0021": 1,`), 1), "", "same bytes"},
		{"rank file short", nil, "IQ== 0\n", "not a Llama 3 vocabulary"},
		{"rank file bad base64", nil, "!!! 0\n", "bad base64"},
		{"rank file bad rank", nil, "IQ== x\n", "rank"},
		{"rank file no rank", nil, "IQ==\n", "not"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			if tc.encoder != nil {
				os.WriteFile(filepath.Join(d, "encoder.json"), tc.encoder, 0o644)
			}
			if tc.rankFile != "" {
				os.WriteFile(filepath.Join(d, "tokenizer.model"), []byte(tc.rankFile), 0o644)
			}
			_, err := New(Config{Llama3Path: d}).Tokenizer(Llama3)
			if !errors.Is(err, ErrVocabulary) || !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Errorf("err = %v; want ErrVocabulary mentioning %q", err, tc.wantInMessage)
			}
		})
	}
	if _, err := New(Config{Llama3Path: t.TempDir()}).Tokenizer(Llama3); !errors.Is(err, ErrVocabulary) {
		t.Errorf("empty directory: %v", err)
	}
}

// vocab.bpe must agree with encoder.json; a disagreeing one fails the load.
func TestLlama3MergesCheck(t *testing.T) {
	dir := llama3Path(t)
	v := mustTokenizer(t, llama3Codec(t), Llama3).v
	merges, err := os.ReadFile(filepath.Join(dir, "vocab.bpe"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkMerges(merges, v); err != nil {
		t.Fatalf("the real vocab.bpe: %v", err)
	}
	firstEnd := bytes.IndexByte(merges, '\n') + 1
	for _, tc := range []struct {
		name, wantInMessage string
		merges              []byte
	}{
		{"version header", "", []byte("#version: 0.2\nĠ Ġ\n")},
		{"CRLF", "", []byte("Ġ Ġ\r\ni n\r\n")},
		{"unknown merge", "lacks", []byte("Ġ Ġx\n")},
		{"out of rank order", "not rank order", append(append([]byte{}, merges[firstEnd:firstEnd+2000]...), merges[:firstEnd]...)},
		{"three parts", "not a merge", []byte("Ġ Ġ Ġ\n")},
		{"one part", "not a merge", []byte("Ġ\n")},
		{"outside alphabet", "GPT-2 byte alphabet", []byte("\u4e00 Ġ\n")},
	} {
		err := checkMerges(tc.merges, v)
		if tc.wantInMessage == "" && err != nil || tc.wantInMessage != "" && (!errors.Is(err, ErrVocabulary) || !strings.Contains(err.Error(), tc.wantInMessage)) {
			t.Errorf("%s: %v; want an error mentioning %q", tc.name, err, tc.wantInMessage)
		}
	}
	// Through the loader: encoder.json with a disagreeing vocab.bpe beside it.
	d := t.TempDir()
	encoderJSON, err := os.ReadFile(filepath.Join(dir, "encoder.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(d, "encoder.json"), encoderJSON, 0o644)
	os.WriteFile(filepath.Join(d, "vocab.bpe"), []byte("Ġ Ġx\n"), 0o644)
	if _, err := New(Config{Llama3Path: d}).Tokenizer(Llama3); !errors.Is(err, ErrVocabulary) || !strings.Contains(err.Error(), "vocab.bpe") {
		t.Errorf("mismatched vocab.bpe: %v", err)
	}
}

// A failed load is retried, but not for every message: within the retry
// interval the error is returned from the cache.
func TestLlama3RetryAfterFailure(t *testing.T) {
	src := llama3Path(t)
	d := t.TempDir()
	c := New(Config{Llama3Path: d})
	if _, err := c.Tokenizer(Llama3); !errors.Is(err, ErrVocabulary) {
		t.Fatalf("empty directory: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(src, "encoder.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "encoder.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tokenizer(Llama3); !errors.Is(err, ErrVocabulary) {
		t.Fatalf("within the retry interval: %v, want the cached error", err)
	}
	defer func(old time.Duration) { llama3RetryInterval = old }(llama3RetryInterval)
	llama3RetryInterval = 0
	if _, err := c.Tokenizer(Llama3); err != nil {
		t.Fatalf("after the retry interval: %v", err)
	}
}
