package codec

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/llama3vocab"
	"github.com/m2md/m2md/internal/testkit"
	"github.com/m2md/m2md/tokennative"
)

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

var (
	hmacKey = bytes.Repeat([]byte{0x42}, 32)
	aeadKey = bytes.Repeat([]byte{0x24}, 32)
)

// TestCorpusRoundTripEveryForm: every corpus file, in every algorithm,
// tokenizer, shape and security mode, decodes through the auto-detecting
// entry point to the original bytes. T1 is lossy by design and is tested in
// frame/legacy; the dictionary form is ASCII-only.
func TestCorpusRoundTripEveryForm(t *testing.T) {
	// Only the Llama 3 forms need the vocabulary, so only they may skip
	// without it (and fail under CI): every other form always runs.
	c := New(Config{})
	type form struct {
		name string
		opt  EncodeOptions
		dec  DecodeOptions
		skip func([]byte) bool
	}
	forms := []form{
		{name: "none", opt: EncodeOptions{Algorithm: None}},
		{name: "brotli", opt: EncodeOptions{Algorithm: Brotli}},
		{name: "zlib", opt: EncodeOptions{Algorithm: Zlib}},
		{name: "dictionary", opt: EncodeOptions{Algorithm: Dictionary}, skip: func(b []byte) bool { return !isASCII(b) }},
		{name: "auto", opt: EncodeOptions{Auto: true}},
	}
	for _, bin := range []bool{false, true} {
		shape := map[bool]string{false: "text", true: "binary"}[bin]
		for _, sec := range []struct {
			mode frame.Security
			key  []byte
		}{{frame.SecurityNone, nil}, {frame.SecurityHMAC, hmacKey}, {frame.SecurityAEAD, aeadKey}} {
			forms = append(forms, form{
				name: "m2m/" + shape + "/" + sec.mode.String(),
				opt:  EncodeOptions{Algorithm: M2M, Binary: bin, Security: sec.mode, Key: sec.key},
				dec:  DecodeOptions{Key: sec.key},
			})
		}
		for _, enc := range []tokennative.Encoding{tokennative.Cl100k, tokennative.O200k, tokennative.Llama3} {
			forms = append(forms, form{
				name: "tokennative/" + shape + "/" + enc.String(),
				opt:  EncodeOptions{Algorithm: TokenNative, Binary: bin, Encoding: enc},
				dec:  DecodeOptions{TokenNativeBinary: bin},
			})
		}
	}
	files := testkit.Corpus(t)
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			c := c
			if f.opt.Encoding == tokennative.Llama3 {
				c = New(Config{Tokens: tokennative.Config{Llama3Path: llama3vocab.ForTest(t)}})
			}
			t.Parallel()
			for _, cf := range files {
				if f.skip != nil && f.skip(cf.Data) {
					continue
				}
				wire, enc, err := c.Encode(nil, cf.Data, f.opt)
				if err != nil {
					t.Fatalf("%s: encode: %v", cf.Name, err)
				}
				got, dec, err := c.Decode(nil, wire, f.dec)
				if err != nil {
					t.Fatalf("%s: decode: %v", cf.Name, err)
				}
				if !bytes.Equal(got, cf.Data) {
					t.Fatalf("%s: round trip differs (%d bytes, want %d)", cf.Name, len(got), len(cf.Data))
				}
				if dec.Algorithm != enc.Algorithm {
					t.Fatalf("%s: detected %s, encoded %s", cf.Name, dec.Algorithm, enc.Algorithm)
				}
				if f.opt.Algorithm == M2M && (dec.Binary != f.opt.Binary || dec.Security != f.opt.Security) {
					t.Fatalf("%s: detected binary=%v security=%s", cf.Name, dec.Binary, dec.Security)
				}
			}
		})
	}
}

// TestSelectEngineVectors are the Rust engine's selection tests (wire
// reference §11 "Engine") plus the corpus's 100-byte threshold files.
func TestSelectEngineVectors(t *testing.T) {
	chat := []byte(`{"model":"gpt-4o","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Summarize the plot of Hamlet in two sentences."}]}`)
	tests := []struct {
		name string
		in   []byte
		want Algorithm
	}{
		{"small", []byte("small"), None},
		{"chat json 100..1024", chat, M2M},
		{"hello world x100", []byte(strings.Repeat("hello world ", 100)), Brotli},
		{"99 bytes", testkit.CorpusFile(t, "req-chat-tiny-09.json"), None},
		{"100 bytes", testkit.CorpusFile(t, "req-chat-tiny-10.json"), M2M},
		{"over 1024", testkit.CorpusFile(t, "req-chat-1k-01.json"), Brotli},
		{"repetitive text", []byte(strings.Repeat("abcd", 40)), Brotli},
		{"plain json", []byte(`{"a":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37]}`), M2M},
		{"prose", []byte("The quick brown fox jumps over the lazy dog while seven zebras quietly graze beside an old mill, far from town."), None},
	}
	for _, tc := range tests {
		got, reason := Select(tc.in)
		if got != tc.want || reason == "" {
			t.Errorf("%s: Select = %s (%q), want %s", tc.name, got, reason, tc.want)
		}
	}
}

// TestDecodeSpecVectors decodes the wire reference's text vectors through
// the auto-detecting entry point.
func TestDecodeSpecVectors(t *testing.T) {
	c := New(Config{})
	tests := []struct {
		wire, want string
		algo       Algorithm
		key        []byte
	}{
		{"#M2M|1|IgABAAAAAAAAAAAAAAAAAAAAAAAGZ3B0LTRvAQECCtejOz4AAABuYFWkeyJtb2RlbCI6ImdwdC00byIsIm1lc3NhZ2VzIjpbeyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJIaSJ9XX0=",
			`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`, M2M, nil},
		{"#M2M|1|IgABAQAAAAAAAAAAAAAAAAAAAAAGZ3B0LTRvAQECCtejOz4AAABuYFWkeyJtb2RlbCI6ImdwdC00byIsIm1lc3NhZ2VzIjpbeyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJIaSJ9XX32hBjyzhkGGaLEzPY18OnpwGUaO7vGYnA32mMOFrxmcg==",
			`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`, M2M, hmacKey},
		{"#M2M|1|JwACAJgAAAAAAAAAAAAAAAAAAAAKY2hhdGNtcGwtMQABBwCM4eo2VgAAAL/ssld7ImlkIjoiY2hhdGNtcGwtMSIsImNob2ljZXMiOlt7ImZpbmlzaF9yZWFzb24iOiJsZW5ndGgifV0sInVzYWdlIjp7InByb21wdF90b2tlbnMiOjd9fQ==",
			`{"id":"chatcmpl-1","choices":[{"finish_reason":"length"}],"usage":{"prompt_tokens":7}}`, M2M, nil},
		{"#TK|C|sk0L/Q4A", "Hello, world!", TokenNative, nil},
		{"#TK|O|qWcLxxIA", "Hello, world!", TokenNative, nil},
		{"#M2M[v3.0]|DATA:G0gA4IzUYs0Z7kSQt5Rd17Rmoim2N9N+ikUHHHLgcMCwBRIIBrUHJJJVAlfrvNoC86Y93dhTpQBYJ1jxLf74",
			`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello, world!"}]}`, Brotli, nil},
		{"#M2M|hoAiSGVsbG+FfQ==", `{"messages":[{"role":"user","content":"Hello"}]}`, Dictionary, nil},
		{`#T1|{"M":"g4o","messages":[{"c":"You are helpful","role":"S"},{"c":"Hello","role":"user"}],"x":100}`,
			`{"frequency_penalty":0,"max_tokens":100,"messages":[{"content":"You are helpful","role":"system"},{"content":"Hello","role":"user"}],"model":"gpt-4o","n":1,"presence_penalty":0,"stream":false,"temperature":1.0,"top_p":1.0}`, T1, nil},
		{"#BR|whatever", "#BR|whatever", None, nil},
		{`{"model":"x"}`, `{"model":"x"}`, None, nil},
	}
	for _, tc := range tests {
		got, info, err := c.Decode(nil, []byte(tc.wire), DecodeOptions{Key: tc.key})
		if err != nil || string(got) != tc.want || info.Algorithm != tc.algo {
			t.Errorf("Decode(%.30q) = %q, %s, %v; want %q, %s", tc.wire, got, info.Algorithm, err, tc.want, tc.algo)
		}
	}
}

// TestKnownPrefixMalformedIsError: a known prefix with a bad body is an
// error, never the input handed back and never partial output.
func TestKnownPrefixMalformedIsError(t *testing.T) {
	c := New(Config{})
	for _, wire := range []string{
		"#M2M|1|", "#M2M|1|short", "#M2M|1|" + strings.Repeat("A", 50), "#M2M|1|IgAB\nAAAA",
		"#TK|", "#TK|C", "#TK|Z|sk0L", "#TK|C|!!!", "#TK|C|/////w==",
		"#M2M[v3.0]|", "#M2M[v3.0]|DATA:notbase64!", "#M2M[v3.0]|DATA:AAAA",
		"#T1|{not json", "#M2M[v2.0]|DATA:AAAA", "#M2M[v2.0]|nodata", "#M2M|%%%",
	} {
		dst := []byte("keep")
		got, _, err := c.Decode(dst, []byte(wire), DecodeOptions{})
		if err == nil {
			t.Errorf("Decode(%q): no error", wire)
		}
		if string(got) != "keep" {
			t.Errorf("Decode(%q): dst changed to %q on error", wire, got)
		}
	}
}

func TestProtectedFrameNeedsKey(t *testing.T) {
	c := New(Config{})
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		wire, _, err := c.Encode(nil, testkit.CorpusFile(t, "req-chat-1k-02.json"), EncodeOptions{Algorithm: M2M, Security: mode, Key: aeadKey})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Decode(nil, wire, DecodeOptions{}); !errors.Is(err, ErrKeyRequired) {
			t.Errorf("%s without key: %v, want ErrKeyRequired", mode, err)
		}
		if _, _, err := c.Decode(nil, wire, DecodeOptions{Key: hmacKey}); err == nil {
			t.Errorf("%s with the wrong key decoded", mode)
		}
	}
}

func TestEncodeRefusesImpossibleOptions(t *testing.T) {
	c := New(Config{})
	body := testkit.CorpusFile(t, "req-chat-1k-02.json")
	for _, opt := range []EncodeOptions{
		{Algorithm: Brotli, Binary: true},
		{Algorithm: TokenNative, Security: frame.SecurityHMAC, Key: hmacKey},
		{Algorithm: M2M, Security: frame.SecurityAEAD, Key: []byte("short")},
		{Algorithm: Algorithm(99)},
		{Algorithm: TokenNative, Encoding: tokennative.Llama3},
		{Algorithm: M2M, Binary: true, Security: frame.SecurityHMAC},
	} {
		if out, _, err := c.Encode(nil, body, opt); err == nil || out != nil {
			t.Errorf("Encode(%+v) = %d bytes, %v; want an error and no output", opt, len(out), err)
		}
	}
	if _, err := ParseAlgorithm("gzip"); !errors.Is(err, ErrUnknownAlgorithm) {
		t.Errorf("ParseAlgorithm(gzip): %v", err)
	}
}

func TestRepetitionRatioCountsRunes(t *testing.T) {
	// 100 identical 3-byte runes: 97 4-grams, 1 distinct.
	s := []byte(strings.Repeat("日", 100))
	if n := utf8.RuneCount(s); n != 100 {
		t.Fatal(n)
	}
	if r := repetitionRatio(s); r < 0.98 {
		t.Fatalf("ratio %v", r)
	}
}

// TestAutoCarriesWhatIsAsked: with security or the binary shape, auto picks
// a form that has them, at every size, and the result decodes back.
func TestAutoCarriesWhatIsAsked(t *testing.T) {
	key := bytes.Repeat([]byte{0x42}, 32)
	c := New(Config{})
	for _, tc := range []struct {
		name string
		in   []byte
		opt  EncodeOptions
		want Algorithm
	}{
		{"aead tiny", []byte(`{"model":"gpt-4o","messages":[]}`), EncodeOptions{Auto: true, Security: frame.SecurityAEAD, Key: key}, M2M},
		{"hmac large", bytes.Repeat([]byte(" "), 2000), EncodeOptions{Auto: true, Security: frame.SecurityHMAC, Key: key}, M2M},
		{"binary tiny JSON", []byte(`{"a":1}`), EncodeOptions{Auto: true, Binary: true}, M2M},
		{"binary text", []byte("not JSON at all, just words"), EncodeOptions{Auto: true, Binary: true}, TokenNative},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "hmac large" {
				tc.in = append(append([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"`), tc.in...), `"}]}`...)
			}
			wire, info, err := c.Encode(nil, tc.in, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if info.Algorithm != tc.want || info.Reason == "" {
				t.Fatalf("picked %v (%q), want %v", info.Algorithm, info.Reason, tc.want)
			}
			got, _, err := c.Decode(nil, wire, DecodeOptions{Key: key, TokenNativeBinary: tc.want == TokenNative})
			if err != nil || !bytes.Equal(got, tc.in) {
				t.Fatalf("round trip: %v", err)
			}
		})
	}
}
