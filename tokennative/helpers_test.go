package tokennative

import (
	"slices"
	"sync"
	"testing"

	"github.com/dlclark/regexp2/v2"
	"github.com/tiktoken-go/tokenizer/codec"

	"github.com/m2md/m2md/internal/llama3vocab"
)

// Reference implementations: tiktoken-go (regexp2 pre-tokenization, its own
// byte-pair merge); they ignore special tokens.
var refCodecs = sync.OnceValue(func() map[Encoding]*codec.Codec {
	return map[Encoding]*codec.Codec{Cl100k: codec.NewCl100kBase(), O200k: codec.NewO200kBase()}
})

func referenceIDs(t testing.TB, e Encoding, text string) []uint32 {
	t.Helper()
	ids, _, err := refCodecs()[e].Encode(text)
	if err != nil {
		t.Fatalf("tiktoken-go %v: %v", e, err)
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

const (
	patternCL    = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// The reference pre-tokenizer is regexp2's interpreter: wrapping the pattern
// in a group keeps regexp2 from using the code tiktoken-go generated for the
// bare pattern, which has two bugs (see TestTiktokenGoPretokenizerBugs).
var refRegexps = sync.OnceValue(func() [2]*regexp2.Regexp {
	return [2]*regexp2.Regexp{
		regexp2.MustCompile("(?:"+patternCL+")", regexp2.None),
		regexp2.MustCompile("(?:"+patternO200k+")", regexp2.None),
	}
})

// tiktokenGoRegexps are the engines tiktoken-go runs (its generated code,
// registered for these exact pattern strings).
var tiktokenGoRegexps = sync.OnceValue(func() [2]*regexp2.Regexp {
	refCodecs() // registers the generated engines
	return [2]*regexp2.Regexp{regexp2.MustCompile(patternCL, regexp2.None), regexp2.MustCompile(patternO200k, regexp2.None)}
})

// referencePieces splits s with regexp2's interpreter (backtracking,
// leftmost-first: the semantics of tiktoken's fancy-regex).
func referencePieces(t testing.TB, o200k bool, s string) []string {
	t.Helper()
	return regexpPieces(t, refRegexps()[b2i(o200k)], s)
}

// tiktokenGoPieces splits s as tiktoken-go does.
func tiktokenGoPieces(t testing.TB, o200k bool, s string) []string {
	t.Helper()
	return regexpPieces(t, tiktokenGoRegexps()[b2i(o200k)], s)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func regexpPieces(t testing.TB, re *regexp2.Regexp, s string) []string {
	t.Helper()
	var out []string
	m, err := re.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		out = append(out, m.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// compareWithTiktokenGo checks that the ordinary (no special tokens) ids of
// text equal tiktoken-go's, unless tiktoken-go splits text wrongly (then
// tiktoken-go is not a reference for it and the result is false).
func compareWithTiktokenGo(t testing.TB, v *vocab, text string) bool {
	t.Helper()
	got := v.appendOrdinary(nil, text, new(encState))
	want := referenceIDs(t, v.enc, text)
	if equalIDs(got, want) {
		return true
	}
	if !slices.Equal(tiktokenGoPieces(t, v.o200k, text), referencePieces(t, v.o200k, text)) {
		return false
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("%v %q: token %d: got %v, tiktoken-go %v", v.enc, text, i, got[max(0, i-2):min(len(got), i+3)], want[max(0, i-2):min(len(want), i+3)])
			return true
		}
	}
	t.Errorf("%v %q: got %d tokens, tiktoken-go %d", v.enc, text, len(got), len(want))
	return true
}

// ourPieces splits s with the hand-written matchers.
func ourPieces(o200k bool, s string) []string {
	initClassTable()
	var out []string
	for i := 0; i < len(s); {
		var j int
		if o200k {
			j = splitO200k(s, i)
		} else {
			j = splitCL(s, i)
		}
		if j <= i || j > len(s) {
			panic("split did not advance")
		}
		out = append(out, s[i:j])
		i = j
	}
	return out
}

// hasSpecialText reports whether s contains a special token string of e,
// which tiktoken-go does not recognise.
func hasSpecialText(v *vocab, s string) bool {
	at, _, _ := v.findSpecial(s)
	return at >= 0
}

func mustTokenizer(t testing.TB, c *Codec, e Encoding) *Tokenizer {
	t.Helper()
	tok, err := c.Tokenizer(e)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The real Llama 3 vocabulary comes from the Go module proxy (or
// M2MD_LLAMA3_VOCAB); see internal/llama3vocab.
var locateLlama3 = llama3vocab.Locate

// llama3Path returns the Llama 3 vocabulary directory. Without it the test
// fails under CI (env CI set) and is skipped elsewhere.
func llama3Path(t testing.TB) string {
	t.Helper()
	return llama3vocab.ForTest(t)
}

func llama3Codec(t testing.TB) *Codec {
	t.Helper()
	return New(Config{Llama3Path: llama3Path(t)})
}

func equalIDs(a, b []uint32) bool { return slices.Equal(a, b) }
