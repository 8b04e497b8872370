package jsonscan

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/m2md/m2md/internal/testkit"
)

// FuzzJSONScan checks the scanner against encoding/json: whatever Validate
// accepts encoding/json accepts too, whatever it refuses is refused for a
// documented reason, and Summary agrees with a literal transcription of
// the Rust lookups (refSummary), and Parse builds the tree encoding/json
// decodes.
func FuzzJSONScan(f *testing.F) {
	for _, doc := range testkit.Corpus(f) {
		if len(doc.Data) < 4096 {
			f.Add(doc.Data)
		}
	}
	for _, s := range []string{
		`{"model":"a","model":"b","messages":[{"role":"user","role":"system"}]}`,
		`{"choices":[{"finish_reason":"length","message":{"tool_calls":null,"refusal":"x"}}],"usage":{"prompt_tokens_details":{"cached_tokens":1}}}`,
		`"\ud83d\ude00\u00e9"`, `"\ud800"`, `1e400`, `-0`, `[[[[]]]]`, `{"a":1e-400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Validate(data, Limits{})
		refValid := json.Valid(data)
		if err == nil {
			if !refValid || !utf8.Valid(data) {
				t.Fatalf("Validate accepted %q, encoding/json or UTF-8 refuses it", data)
			}
		} else {
			var e *Error
			if !errors.As(err, &e) || e.Offset < 0 || e.Offset > len(data) {
				t.Fatalf("error %v is not an *Error with a valid offset", err)
			}
			if refValid && utf8.Valid(data) && errors.Is(err, ErrSyntax) {
				// Only serde_json's extra rules may refuse what encoding/json accepts.
				if !strings.Contains(e.Reason, "surrogate") && e.Reason != "number out of range" {
					t.Fatalf("Validate refused valid %q: %v", data, err)
				}
			}
		}
		var sum Summary
		serr := sum.Scan(data, Limits{})
		if (serr == nil) != (err == nil) {
			t.Fatalf("Scan and Validate disagree: %v vs %v", serr, err)
		}
		if _, kerr := TopLevelKeys(data, Limits{}); (kerr == nil) != (err == nil) {
			t.Fatalf("TopLevelKeys and Validate disagree: %v vs %v", kerr, err)
		}
		if err != nil {
			var d Doc
			if _, perr := d.Parse(data, Limits{}); perr == nil {
				t.Fatalf("Parse accepted what Validate refuses: %v", err)
			}
			return
		}
		compareSummary(t, data, sum, refSummary(t, data))
		checkTree(t, data)
	})
}
