package legacy

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// Vectors from wire reference §6.2.
var t1Vectors = []struct{ in, want string }{
	{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}]}`,
		`#T1|{"M":"g4o","messages":[{"c":"Hello","role":"user"}]}`,
	},
	{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}],"temperature":1.0,"stream":false,"n":1}`,
		`#T1|{"M":"g4o","messages":[{"c":"Hi","role":"user"}]}`,
	},
	{
		`{"model":"gpt-4o","messages":[{"role":"system","content":"You are helpful"},{"role":"user","content":"Hello"}],"max_tokens":100}`,
		`#T1|{"M":"g4o","messages":[{"c":"You are helpful","role":"S"},{"c":"Hello","role":"user"}],"x":100}`,
	},
	{
		`{"id":"chatcmpl-123","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`,
		`#T1|{"C":[{"fr":"stop","index":0,"message":{"c":"Hello!","role":"A"}}],"M":"g4o","id":"chatcmpl-123","object":"chat.completion","usage":{"ct":5,"pt":10,"tt":15}}`,
	},
}

func TestEncodeT1Vectors(t *testing.T) {
	for _, v := range t1Vectors {
		got, err := EncodeT1(nil, []byte(v.in), T1Options{})
		if err != nil {
			t.Fatalf("EncodeT1(%s): %v", v.in, err)
		}
		if string(got) != v.want {
			t.Errorf("EncodeT1(%s)\n got %s\nwant %s", v.in, got, v.want)
		}
	}
}

func TestDecodeT1Vector(t *testing.T) {
	const want = `{"frequency_penalty":0,"max_tokens":100,"messages":[{"content":"You are helpful","role":"system"},{"content":"Hello","role":"user"}],"model":"gpt-4o","n":1,"presence_penalty":0,"stream":false,"temperature":1.0,"top_p":1.0}`
	for _, src := range []string{t1Vectors[2].want, strings.TrimPrefix(t1Vectors[2].want, PrefixT1)} {
		got, err := DecodeT1(nil, []byte(src), frame.Limits{})
		if err != nil {
			t.Fatalf("DecodeT1(%s): %v", src, err)
		}
		if string(got) != want {
			t.Errorf("DecodeT1(%s)\n got %s\nwant %s", src, got, want)
		}
	}
}

func TestT1CorpusMatchesModel(t *testing.T) {
	for _, f := range testkit.Corpus(t) {
		enc, err := EncodeT1(nil, f.Data, T1Options{})
		if err != nil {
			t.Errorf("%s: EncodeT1: %v", f.Name, err)
			continue
		}
		v, err := modelParse(f.Data)
		if err != nil {
			t.Fatalf("%s: model parse: %v", f.Name, err)
		}
		var sb strings.Builder
		modelWrite(&sb, modelCompress(v, ""))
		if want := PrefixT1 + sb.String(); string(enc) != want {
			t.Errorf("%s: EncodeT1 differs from the model\n got %.300s\nwant %.300s", f.Name, enc, want)
		}

		dec, err := DecodeT1(nil, enc, frame.Limits{})
		if err != nil {
			t.Errorf("%s: DecodeT1: %v", f.Name, err)
			continue
		}
		want, err := modelT1RoundTrip(f.Data)
		if err != nil {
			t.Fatal(err)
		}
		if string(dec) != want {
			t.Errorf("%s: DecodeT1(EncodeT1) differs from the model\n got %.300s\nwant %.300s", f.Name, dec, want)
		}

		// With patterns the wire differs but the decoded document does not.
		pat, err := EncodeT1(nil, f.Data, T1Options{Patterns: true})
		if err != nil {
			t.Fatalf("%s: EncodeT1 with patterns: %v", f.Name, err)
		}
		dec2, err := DecodeT1(nil, pat, frame.Limits{})
		if err != nil || !bytes.Equal(dec2, dec) {
			t.Errorf("%s: pattern round trip differs (err %v)", f.Name, err)
		}
	}
}

// A document that uses none of the mapped keys, values or defaults comes
// back as serde_json's normalisation of itself.
func TestT1NormalizesUnmappedDocuments(t *testing.T) {
	docs := []string{
		`{ "zeta" : [1, 2.50, -0, 1E2, true, false, "a\/b"], "alpha" : {"nested": "é\u00e9\ud83d\ude00"} }`,
		`[{"b":1,"q":2},[],{}]`,
		`"just a string"`,
		`12345678901234567890`,
		` 0.000012 `,
	}
	for _, d := range docs {
		enc, err := EncodeT1(nil, []byte(d), T1Options{})
		if err != nil {
			t.Fatalf("EncodeT1(%s): %v", d, err)
		}
		want, err := modelNormalize([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		if string(enc) != PrefixT1+want {
			t.Errorf("EncodeT1(%s) = %s, want %s%s", d, enc, PrefixT1, want)
		}
		dec, err := DecodeT1(nil, enc, frame.Limits{})
		if err != nil || string(dec) != want {
			t.Errorf("DecodeT1(%s) = %s, %v; want %s", enc, dec, err, want)
		}
	}
}

func TestEncodeT1Transformations(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"nulls dropped at every depth", `{"a":{"b":null,"d":[{"e":null}]},"z":null}`, `{"a":{"d":[{}]}}`},
		{"defaults dropped at every depth",
			`{"x":{"temperature":1,"top_p":0.9995,"n":1,"stream":false,"frequency_penalty":0.0,"presence_penalty":-0,"logit_bias":{},"stop":null}}`,
			`{"x":{}}`},
		{"defaults judged on abbreviated keys too", `{"T":1.0,"p":1,"s":false,"f":0,"P":0,"lb":{},"S":null}`, `{}`},
		{"temperature within 0.001 is lossy", `{"temperature":1.0005}`, `{}`},
		{"non-defaults kept", `{"temperature":0.7,"top_p":0.9,"n":2,"stream":true,"frequency_penalty":0.5,"presence_penalty":0.5,"logit_bias":{"50256":-100}}`,
			`{"P":0.5,"T":0.7,"f":0.5,"lb":{"50256":-100},"n":2,"p":0.9,"s":true}`},
		{"n as float is not the default", `{"n":1.0}`, `{"n":1.0}`},
		{"temperature as string is not a default", `{"temperature":"1"}`, `{"T":"1"}`},
		{"roles mapped, user kept", `{"role":"system","x":[{"role":"assistant"},{"role":"function"},{"role":"tool"},{"role":"user"}]}`,
			`{"role":"S","x":[{"role":"A"},{"role":"F"},{"role":"T"},{"role":"user"}]}`},
		{"role values in arrays inherit the key", `{"role":["system",["tool"],"developer"]}`, `{"role":["S",["T"],"developer"]}`},
		{"role under r", `{"r":"assistant"}`, `{"r":"A"}`},
		{"models mapped exactly", `{"model":"gpt-4o-mini","M":"llama-3.3-70b","y":{"model":"meta-llama/llama-3.3-70b"}}`, `{"M":"g4om","y":{"M":"meta-llama/llama-3.3-70b"}}`},
		{"model under M", `{"M":"qwen-2.5-coder-32b"}`, `{"M":"qc32"}`},
		{"values only mapped under their key", `{"name":"system","content":"gpt-4o"}`, `{"c":"gpt-4o","name":"system"}`},
		{"finish_reason values kept", `{"finish_reason":"tool_calls"}`, `{"fr":"tool_calls"}`},
		{"all 25 keys", `{"content":1,"model":2,"temperature":3,"max_tokens":4,"stream":5,"stop":6,"top_p":7,"frequency_penalty":8,"presence_penalty":9,"function_call":10,"arguments":11,"tool_calls":12,"tool_choice":13,"response_format":14,"logit_bias":15,"logprobs":16,"top_logprobs":17,"choices":18,"finish_reason":19,"prompt_tokens":20,"completion_tokens":21,"total_tokens":22,"delta":23,"system_fingerprint":24,"error":25}`,
			`{"C":18,"D":23,"E":25,"M":2,"P":9,"S":6,"T":3,"a":11,"c":1,"ct":21,"f":8,"fc":10,"fr":19,"lb":15,"lp":16,"p":7,"pt":20,"rf":14,"s":5,"sf":24,"tc":12,"tlp":17,"tt":22,"tx":13,"x":4}`},
		{"unlisted keys kept", `{"messages":1,"message":2,"usage":3,"index":4,"id":5,"n":6,"seed":7,"tools":8,"type":9}`,
			`{"id":5,"index":4,"message":2,"messages":1,"n":6,"seed":7,"tools":8,"type":9,"usage":3}`},
		{"collision: greatest original key wins", `{"c":1,"content":2}`, `{"c":2}`},
		{"collision: dropped member does not win", `{"content":null,"c":1}`, `{"c":1}`},
		{"duplicate key: last wins before filtering", `{"temperature":0.5,"temperature":null}`, `{}`},
		{"duplicate key: last wins", `{"a":1,"a":2}`, `{"a":2}`},
		{"keys sorted by UTF-8 bytes", `{"é":1,"z":2,"Z":3,"a":4,"ä":5}`, `{"Z":3,"a":4,"z":2,"ä":5,"é":1}`},
		{"escaped key is decoded before lookup", `{"\u0063ontent":"x"}`, `{"c":"x"}`},
		{"escaped role value is decoded before lookup", `{"role":"\u0073ystem"}`, `{"role":"S"}`},
		{"string escapes normalised", `{"a":"\u00e9\/\u0001\ud83d\ude00\"\\\b\f\n\r\t\u2028<\u007f"}`,
			"{\"a\":\"é/\\u0001😀\\\"\\\\\\b\\f\\n\\r\\t\u2028<\u007f\"}"},
		{"raw non-ASCII kept", `{"a":"日本語 ✓"}`, `{"a":"日本語 ✓"}`},
		{"escaped key with quote", `{"a\"b":1}`, `{"a\"b":1}`},
		{"top-level array", `[{"role":"system"},null]`, `[{"role":"S"},null]`},
		{"top-level scalar string is not mapped", `"system"`, `"system"`},
		{"whitespace removed", " \t\r\n{ \"a\" : [ 1 , 2 ] }\n", `{"a":[1,2]}`},
	}
	for _, tc := range tests {
		got, err := EncodeT1(nil, []byte(tc.in), T1Options{})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if want := PrefixT1 + tc.want; string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, want)
		}
	}
}

func TestDecodeT1Transformations(t *testing.T) {
	const defaults = `"frequency_penalty":0,"n":1,"presence_penalty":0,"stream":false,"temperature":1.0,"top_p":1.0`
	tests := []struct{ name, in, want string }{
		{"defaults restored into a request", `{"M":"g4o"}`, `{` + defaults[:strings.Index(defaults, `"n"`)] + `"model":"gpt-4o",` + defaults[strings.Index(defaults, `"n"`):] + `}`},
		{"present values not overwritten", `{"messages":[],"T":0.5,"p":0.25,"n":3,"s":true,"f":1,"P":2}`,
			`{"frequency_penalty":1,"messages":[],"n":3,"presence_penalty":2,"stream":true,"temperature":0.5,"top_p":0.25}`},
		{"no defaults without messages or model", `{"x":1,"C":[]}`, `{"choices":[],"max_tokens":1}`},
		{"only the outermost request gets defaults", `{"messages":[{"model":"x"}],"n":1,"s":false,"T":1.0,"p":1.0,"f":0,"P":0}`,
			`{"frequency_penalty":0,"messages":[{"model":"x"}],"n":1,"presence_penalty":0,"stream":false,"temperature":1.0,"top_p":1.0}`},
		{"nested requests get defaults when the top is not one", `[{"q":{"messages":[]}},1]`,
			`[{"q":{` + defaults[:strings.Index(defaults, `"n"`)] + `"messages":[],` + defaults[strings.Index(defaults, `"n"`):] + `}},1]`},
		{"keys expanded at every depth (lossy for literal short keys)", `{"a":{"x":{"c":1,"sf":2,"E":3}}}`, `{"arguments":{"max_tokens":{"content":1,"error":3,"system_fingerprint":2}}}`},
		{"roles expanded, including a literal T", `{"r":"S","role":["A","F","T","user"]}`, `{"r":"system","role":["assistant","function","tool","user"]}`},
		{"expansion collision: greatest input key wins", `{"c":1,"content":2}`, `{"content":2}`},
		{"pattern expansion", "\x0c\x01Hi\"}]}", `{` + defaults[:strings.Index(defaults, `"n"`)] + `"messages":[{"content":"Hi","role":"user"}],` + defaults[strings.Index(defaults, `"n"`):] + `}`},
		{"escapes normalised", `{"k":"\u0041\/"}`, `{"k":"A/"}`},
	}
	for _, tc := range tests {
		got, err := DecodeT1(nil, []byte(PrefixT1+tc.in), frame.Limits{})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestT1Numbers(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0", "0"},
		{"-0", "-0.0"},
		{"-0.0", "-0.0"},
		{"7", "7"},
		{"-7", "-7"},
		{"1.0", "1.0"},
		{"1.50", "1.5"},
		{"1e3", "1000.0"},
		{"1E+3", "1000.0"},
		{"2.5e-5", "0.000025"},
		{"123.456e-2", "1.23456"},
		{"0.1", "0.1"},
		{"0.30000000000000004", "0.30000000000000004"},
		{"1e15", "1000000000000000.0"},
		{"9999999999999998.0", "9999999999999998.0"},
		{"1e16", "1e+16"},
		{"1.5e300", "1.5e+300"},
		{"-1.5e300", "-1.5e+300"},
		{"0.00001", "0.00001"},
		{"0.000001", "1e-6"},
		{"1e-7", "1e-7"},
		{"1.25e-7", "1.25e-7"},
		{"3.01702372e-06", "3.01702372e-6"},
		{"7.26152368e-05", "0.0000726152368"},
		{"1.7976931348623157e308", "1.7976931348623157e+308"},
		{"5e-324", "5e-324"},
		{"2.220446049250313e-16", "2.220446049250313e-16"},
		{"1e-400", "0.0"},
		{"-1e-400", "-0.0"},
		{"0e99999999999", "0.0"},
		{"1e-99999999999", "0.0"},
		{"18446744073709551615", "18446744073709551615"},
		{"18446744073709551616", "1.8446744073709552e+19"},
		{"100000000000000000000", "1e+20"},
		{"-9223372036854775808", "-9223372036854775808"},
		{"-9223372036854775809", "-9.223372036854776e+18"},
		{"123456789012345678", "123456789012345678"},
		{"18446744073709551616.5", "1.8446744073709552e+19"},
		// serde_json issues #692 and #1170: its default parser turns this into 9007199254740990.
		{"9007199254740991.0", "9007199254740990.0"},
		{"9007199254740991", "9007199254740991"},
		// 40 × 1e71 with 1e71 inexact: serde keeps the double rounding (found by fuzzing).
		{"40e71", "4.0000000000000006e+72"},
	}
	for _, tc := range tests {
		got, err := EncodeT1(nil, []byte(`{"v":`+tc.in+`}`), T1Options{})
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if want := PrefixT1 + `{"v":` + tc.want + `}`; string(got) != want {
			t.Errorf("%s: got %s, want %s", tc.in, got, want)
		}
	}
}

func TestT1RejectsMalformed(t *testing.T) {
	bad := []string{
		``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `[1 2]`, `{"a":1}x`, `{"a":1}{}`,
		`01`, `-`, `-a`, `1.`, `.5`, `+1`, `1e`, `1e+`, `--1`, `0x10`, `NaN`, `Infinity`, `tru`, `nul`,
		`1e400`, `-1e400`, `1e99999999999`, `"abc`, "\"a\x01b\"", `"\x"`, `"\u12"`, `"\u12G4"`,
		`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800x"`, `"\ud800\n"`, "\ufeff{}", `'a'`,
	}
	for _, in := range bad {
		_, err := EncodeT1(nil, []byte(in), T1Options{})
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("EncodeT1(%q) error = %v, want ErrMalformed", in, err)
		}
		_, err = DecodeT1(nil, []byte(PrefixT1+in), frame.Limits{})
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeT1(%q) error = %v, want ErrMalformed", in, err)
		}
	}
	// Whitespace control characters are pattern codes, so a T1 body with a
	// newline outside strings does not parse (the Rust decoder agrees).
	if _, err := DecodeT1(nil, []byte("#T1|{\"a\":1}\n"), frame.Limits{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("newline after the body: %v, want ErrMalformed", err)
	}
	for _, in := range []string{"{\"a\":\"\xff\"}", "\xc3"} {
		if _, err := EncodeT1(nil, []byte(in), T1Options{}); !errors.Is(err, ErrNotUTF8) {
			t.Errorf("EncodeT1(%q) error = %v, want ErrNotUTF8", in, err)
		}
		if _, err := DecodeT1(nil, []byte(PrefixT1+in), frame.Limits{}); !errors.Is(err, ErrNotUTF8) {
			t.Errorf("DecodeT1(%q) error = %v, want ErrNotUTF8", in, err)
		}
	}
}

func TestT1Limits(t *testing.T) {
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name string
		lim  frame.Limits
		ok   string
		bad  string
	}{
		{"default depth 32", frame.Limits{}, nested(32), nested(33)},
		{"depth", frame.Limits{MaxDepth: 2}, `[{"a":1}]`, `[{"a":[]}]`},
		{"string", frame.Limits{MaxString: 3}, `["abc"]`, `["abcd"]`},
		{"string counted as written", frame.Limits{MaxString: 6}, `["\u00e9"]`, `["\u00e9x"]`},
		{"key", frame.Limits{MaxString: 3}, `{"abc":1}`, `{"abcd":1}`},
		{"array", frame.Limits{MaxArray: 2}, `[1,[2,3]]`, `[1,2,3]`},
		{"limits above the defaults are clamped", frame.Limits{MaxDepth: 1000}, nested(32), nested(33)},
	}
	for _, tc := range tests {
		if _, err := EncodeT1(nil, []byte(tc.ok), T1Options{Limits: tc.lim}); err != nil {
			t.Errorf("%s: EncodeT1(%s): %v", tc.name, tc.ok, err)
		}
		if _, err := DecodeT1(nil, []byte(tc.ok), tc.lim); err != nil {
			t.Errorf("%s: DecodeT1(%s): %v", tc.name, tc.ok, err)
		}
		if _, err := EncodeT1(nil, []byte(tc.bad), T1Options{Limits: tc.lim}); !errors.Is(err, ErrLimit) {
			t.Errorf("%s: EncodeT1(%s) error = %v, want ErrLimit", tc.name, tc.bad, err)
		}
		if _, err := DecodeT1(nil, []byte(tc.bad), tc.lim); !errors.Is(err, ErrLimit) {
			t.Errorf("%s: DecodeT1(%s) error = %v, want ErrLimit", tc.name, tc.bad, err)
		}
	}

	// MaxArray bounds arrays, not objects' members.
	if _, err := EncodeT1(nil, []byte(`{"a":1,"b":2,"c":3}`), T1Options{Limits: frame.Limits{MaxArray: 2}}); err != nil {
		t.Errorf("object of 3 members with MaxArray 2: %v", err)
	}

	// Sizes: input, encoded message, decoded output, pattern expansion.
	if _, err := EncodeT1(nil, []byte(`{"a":"0123456789"}`), T1Options{Limits: frame.Limits{MaxDecompressed: 10}}); !errors.Is(err, ErrLimit) {
		t.Errorf("oversized JSON input: %v", err)
	}
	if _, err := EncodeT1(nil, []byte(`{"a":"0123456789"}`), T1Options{Limits: frame.Limits{MaxMessage: 20}}); !errors.Is(err, ErrLimit) {
		t.Errorf("oversized encoded message: %v", err)
	}
	if _, err := DecodeT1(nil, []byte(`#T1|{"a":"0123456789"}`), frame.Limits{MaxMessage: 20}); !errors.Is(err, ErrLimit) {
		t.Errorf("oversized T1 message: %v", err)
	}
	if _, err := DecodeT1(nil, []byte(`#T1|{"M":"g4o"}`), frame.Limits{MaxDecompressed: 50}); !errors.Is(err, ErrLimit) {
		t.Errorf("output grown past the limit by restored defaults: %v", err)
	}
	if _, err := DecodeT1(nil, []byte("#T1|"+strings.Repeat("\x0c", 100)), frame.Limits{MaxDecompressed: 1000}); !errors.Is(err, ErrLimit) {
		t.Errorf("pattern expansion past the limit: %v", err)
	}
}

func TestT1ErrorsLeaveDstAlone(t *testing.T) {
	dst := []byte("keep")
	out, err := EncodeT1(dst, []byte(`{"a":[1,2,`), T1Options{})
	if err == nil || string(out) != "keep" {
		t.Errorf("EncodeT1 on error returned %q, %v", out, err)
	}
	out, err = DecodeT1(dst, []byte(`#T1|{"M":"g4o"}`), frame.Limits{MaxDecompressed: 50})
	if err == nil || string(out) != "keep" {
		t.Errorf("DecodeT1 on error returned %q, %v", out, err)
	}
	out, err = DecodeT1(dst, []byte(t1Vectors[0].want), frame.Limits{})
	if err != nil || !strings.HasPrefix(string(out), "keep{") {
		t.Errorf("DecodeT1 does not append: %q, %v", out, err)
	}
	var e *Error
	_, err = EncodeT1(nil, []byte(`{"a" 1}`), T1Options{})
	if !errors.As(err, &e) || e.Codec != "t1" || e.Offset != 5 {
		t.Errorf("error = %#v, want a t1 *Error at offset 5", err)
	}
}

func TestT1Patterns(t *testing.T) {
	for i, pat := range t1Patterns {
		code := string(rune(i + 1))
		if got := string(applyT1Patterns([]byte("#T1|"+pat), 4)); got != "#T1|"+code {
			t.Errorf("pattern %d: compressed to %q", i+1, got)
		}
		if got := string(expandT1Patterns(nil, []byte("x"+code+code))); got != "x"+pat+pat {
			t.Errorf("pattern %d: expanded to %q", i+1, got)
		}
	}
	// Table order matters: pattern 5 consumes the '{' that pattern 11 needs.
	if got := string(applyT1Patterns([]byte(`"choices":[{"index":0,"delta":{"c":"x"}}]`), 0)); got != "\"choices\":[\x05\"c\":\"x\"}}]" {
		t.Errorf("ordered replacement gave %q", got)
	}
	// The prefix area before from is never touched.
	if got := string(applyT1Patterns([]byte(`"choices":[{|"choices":[{`), 13)); got != "\"choices\":[{|\x0b" {
		t.Errorf("replacement before from: %q", got)
	}

	got, err := EncodeT1(nil, []byte(`{"messages":[{"role":"user"}],"x":{"index":0,"message":{"role":"tool"}}}`), T1Options{Patterns: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "#T1|\x0c{\"role\":\"user\"}],\"x\":\x06\"role\":\"T\"}}}"; string(got) != want {
		t.Errorf("EncodeT1 with patterns = %q, want %q", got, want)
	}
}
