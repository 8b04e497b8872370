package jsonscan

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		in   string
		want error // nil: valid
	}{
		{`{}`, nil},
		{` {"a" : [1, -2.5e3, true, false, null, "x"]} `, nil},
		{"\t\r\n[]\n", nil},
		{`"\u00e9\ud83d\ude00\n\"\\\/\b\f\r\t"`, nil},
		{`0`, nil},
		{`-0`, nil},
		{`1E+2`, nil},
		{`1e-400`, nil}, // underflows to 0: serde_json accepts it
		{`"日本語"`, nil},
		{``, ErrSyntax},
		{` `, ErrSyntax},
		{`{`, ErrSyntax},
		{`{"a"}`, ErrSyntax},
		{`{"a":1,}`, ErrSyntax},
		{`[1,]`, ErrSyntax},
		{`[1 2]`, ErrSyntax},
		{`{a:1}`, ErrSyntax},
		{`{"a":1}x`, ErrSyntax},
		{`{} {}`, ErrSyntax},
		{`01`, ErrSyntax},
		{`1.`, ErrSyntax},
		{`.5`, ErrSyntax},
		{`1e`, ErrSyntax},
		{`-`, ErrSyntax},
		{`+1`, ErrSyntax},
		{`tru`, ErrSyntax},
		{`nul`, ErrSyntax},
		{`True`, ErrSyntax},
		{`"abc`, ErrSyntax},
		{`"a\x"`, ErrSyntax},
		{`"\u12"`, ErrSyntax},
		{`"\u12G4"`, ErrSyntax},
		{"\"a\x01b\"", ErrSyntax},
		{"\"\xff\"", ErrSyntax},
		{"\"\xc3\"", ErrSyntax},
		{"\"\xed\xa0\x80\"", ErrSyntax}, // UTF-8-encoded surrogate
		{`"\ud800"`, ErrSyntax},
		{`"\ud800\u0041"`, ErrSyntax},
		{`"\udc00"`, ErrSyntax},
		{`1e400`, ErrSyntax},
		{`-1e309`, ErrSyntax},
		{"1" + strings.Repeat("0", 400), ErrSyntax},
		{"\xef\xbb\xbf{}", ErrSyntax}, // BOM: serde_json refuses it too
		{"[\v]", ErrSyntax},
	}
	for _, tt := range tests {
		err := Validate([]byte(tt.in), Limits{})
		if tt.want == nil {
			if err != nil {
				t.Errorf("Validate(%q) = %v, want nil", tt.in, err)
			}
			continue
		}
		if !errors.Is(err, tt.want) {
			t.Errorf("Validate(%q) = %v, want %v", tt.in, err, tt.want)
		}
		var e *Error
		if !errors.As(err, &e) || e.Offset < 0 || e.Offset > len(tt.in) {
			t.Errorf("Validate(%q): error %v has no sane offset", tt.in, err)
		}
	}
}

func TestLimits(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	objNest := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	arr := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]" }
	str := func(n int) string { return `"` + strings.Repeat("x", n) + `"` }
	type limitCase struct {
		name string
		in   string
		lim  Limits
		want error
	}
	tests := []limitCase{
		{"depth 32 arrays", nest(32), Limits{}, nil},
		{"depth 33 arrays", nest(33), Limits{}, ErrDepth},
		{"depth 32 objects", objNest(32), Limits{}, nil},
		{"depth 33 objects", objNest(33), Limits{}, ErrDepth},
		{"depth 5 of 4", nest(5), Limits{MaxDepth: 4}, ErrDepth},
		{"deep hostile", nest(1_000_000), Limits{}, ErrDepth},
		{"10000 elements", arr(10_000), Limits{}, nil},
		{"10001 elements", arr(10_001), Limits{}, ErrArrayTooLong},
		{"3 of 2 elements", arr(3), Limits{MaxArray: 2}, ErrArrayTooLong},
		{"string at limit", str(100), Limits{MaxString: 100}, nil},
		{"string over limit", str(101), Limits{MaxString: 100}, ErrStringTooLong},
		{"key over limit", `{` + str(101) + `:1}`, Limits{MaxString: 100}, ErrStringTooLong},
		{"escapes count as written", `"` + strings.Repeat(`\n`, 51) + `"`, Limits{MaxString: 100}, ErrStringTooLong},
	}
	if !raceEnabled { // 10 MiB through the race detector takes seconds
		tests = append(tests,
			limitCase{"10 MiB string", str(10 << 20), Limits{}, nil},
			limitCase{"10 MiB + 1 string", str(10<<20 + 1), Limits{}, ErrStringTooLong})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate([]byte(tt.in), tt.lim)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// A string longer than the limit fails before the scanner reaches its end:
// the limit is enforced while scanning, not afterwards.
func TestStringLimitFailsEarly(t *testing.T) {
	in := []byte(`"` + strings.Repeat("\\n", 1000)) // unterminated: only the limit can fail it
	err := Validate(in, Limits{MaxString: 100})
	if !errors.Is(err, ErrStringTooLong) {
		t.Fatalf("got %v, want ErrStringTooLong", err)
	}
}

func TestSpecialMatchesBytewise(t *testing.T) {
	isSpecial := func(b byte) bool { return b == '"' || b == '\\' || b < 0x20 || b >= 0x80 }
	rng := rand.New(rand.NewPCG(1, 2))
	var buf [8]byte
	check := func() {
		w := binary.LittleEndian.Uint64(buf[:])
		want := false
		for _, b := range buf {
			want = want || isSpecial(b)
		}
		if got := specialMask(w) != 0; got != want {
			t.Fatalf("specialMask(% x) != 0 is %v, want %v", buf, got, want)
		}
		if want {
			first := 0
			for !isSpecial(buf[first]) {
				first++
			}
			if got := bits.TrailingZeros64(specialMask(w)) >> 3; got != first {
				t.Fatalf("specialMask(% x) flags byte %d first, want %d", buf, got, first)
			}
		}
	}
	// Every byte value in every position, among otherwise plain bytes.
	for pos := range buf {
		for v := 0; v < 256; v++ {
			for i := range buf {
				buf[i] = 'a'
			}
			buf[pos] = byte(v)
			check()
		}
	}
	rounds := 200_000
	if raceEnabled {
		rounds = 20_000
	}
	for range rounds {
		for i := range buf {
			// Bias towards the interesting boundaries.
			switch rng.IntN(4) {
			case 0:
				buf[i] = byte(0x1e + rng.IntN(6))
			case 1:
				buf[i] = byte(0x5a + rng.IntN(5))
			default:
				buf[i] = byte(rng.IntN(256))
			}
		}
		check()
	}
}

func TestStrDecoding(t *testing.T) {
	tests := []struct {
		in      string // a JSON string literal
		decoded string
	}{
		{`"plain"`, "plain"},
		{`"a\nb"`, "a\nb"},
		{`"\u00e9"`, "é"},
		{`"\u20ac"`, "€"},
		{`"\ud83d\ude00"`, "😀"},
		{`"\"\\\/\b\f\r\t"`, "\"\\/\b\f\r\t"},
		{`"日本\u8a9e"`, "日本語"},
		{`"\u0000"`, "\x00"},
	}
	for _, tt := range tests {
		s := scanner{data: []byte(tt.in), lim: Limits{}.effective()}
		if err := s.string(); err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if s.str.Len != len(tt.decoded) {
			t.Errorf("%s: Len = %d, want %d", tt.in, s.str.Len, len(tt.decoded))
		}
		if got := string(s.str.AppendDecoded(nil)); got != tt.decoded {
			t.Errorf("%s: decoded %q, want %q", tt.in, got, tt.decoded)
		}
		if !s.str.Equal(tt.decoded) || s.str.Equal(tt.decoded+"x") {
			t.Errorf("%s: Equal is wrong", tt.in)
		}
		for i := 0; i <= len(tt.decoded); i++ {
			if !s.str.HasPrefix(tt.decoded[:i]) {
				t.Errorf("%s: HasPrefix(%q) = false", tt.in, tt.decoded[:i])
			}
		}
		if s.str.HasPrefix(tt.decoded + "x") {
			t.Errorf("%s: HasPrefix past the end", tt.in)
		}
	}
}

// A hand-made Str with broken escapes must not panic.
func TestStrMalformedNoPanic(t *testing.T) {
	for _, raw := range []string{`\`, `\u`, `\u12`, `\ud800`, `\ud800\u`, `\q`, `x\`} {
		s := Str{Raw: []byte(raw), Len: len(raw), Escaped: true, IsString: true}
		_ = s.AppendDecoded(nil)
		_ = s.HasPrefix("ab")
		_ = s.Equal(raw)
	}
}

func TestTopLevelKeys(t *testing.T) {
	tests := []struct {
		in   string
		want Key
		err  error
	}{
		{`{"model":"x","messages":[]}`, KeyModel | KeyMessages, nil},
		{`{"choices":[{"model":1}],"x":{"id":2}}`, KeyChoices, nil},
		{`{"mod\u0065l":1,"stream":null}`, KeyModel | KeyStream, nil},
		{`{"a":{"model":1}}`, 0, nil},
		{`[{"model":1}]`, 0, nil},
		{`"model"`, 0, nil},
		{`{"model":1,}`, 0, ErrSyntax},
	}
	for _, tt := range tests {
		got, err := TopLevelKeys([]byte(tt.in), Limits{})
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("%s: err %v, want %v", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: got %b, %v; want %b", tt.in, got, err, tt.want)
		}
		if got.HasAny(KeyModel|KeyMessages|KeyChoices) != (tt.want&(KeyModel|KeyMessages|KeyChoices) != 0) {
			t.Errorf("%s: HasAny is wrong", tt.in)
		}
	}
}

func TestValidateAllocatesNothing(t *testing.T) {
	doc := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"h\u00e9llo"}],"n":1.5e3}`)
	var sum Summary
	allocs := testing.AllocsPerRun(100, func() {
		if err := Validate(doc, Limits{}); err != nil {
			t.Fatal(err)
		}
		if err := sum.Scan(doc, Limits{}); err != nil {
			t.Fatal(err)
		}
		if _, err := TopLevelKeys(doc, Limits{}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run, want 0", allocs)
	}
}
