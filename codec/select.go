package codec

import (
	"unicode/utf8"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/jsonscan"
)

// Thresholds of the Rust engine's automatic selection (wire reference §1.3).
const (
	selectMinSize        = 100
	selectBrotliSize     = 1024
	selectRepetitionRate = 0.3
)

// Select picks the algorithm the Rust engine's compress_auto would, and
// says why:
//
//	< 100 bytes                        → none (framing would cost more than it saves)
//	> 1024 bytes                       → brotli
//	JSON with "messages"/"model"/"choices" at top level → m2m
//	repetition ratio > 0.3             → brotli
//	other JSON                         → m2m
//	anything else                      → none
func Select(data []byte) (Algorithm, string) {
	if len(data) < selectMinSize {
		return None, "shorter than 100 bytes: passthrough"
	}
	if len(data) > selectBrotliSize {
		return Brotli, "longer than 1024 bytes: Brotli"
	}
	keys, err := jsonscan.TopLevelKeys(data, jsonscan.Limits{})
	isJSON := err == nil
	if isJSON && (keys.Has(jsonscan.KeyMessages) || keys.Has(jsonscan.KeyModel) || keys.Has(jsonscan.KeyChoices)) {
		return M2M, "LLM API payload (top-level messages, model or choices): M2M v1 frame"
	}
	if repetitionRatio(data) > selectRepetitionRate {
		return Brotli, "repetitive content (ratio above 0.3): Brotli"
	}
	if isJSON {
		return M2M, "JSON: M2M v1 frame"
	}
	return None, "not JSON: passthrough"
}

// selectFor is Select limited to the forms that can carry what opt asks
// for: security needs an M2M v1 frame; the binary shape exists for M2M v1
// and TokenNative only (TokenNative for text that is not JSON).
func selectFor(data []byte, opt EncodeOptions) (Algorithm, string) {
	switch {
	case opt.Security != frame.SecurityNone:
		return M2M, "security " + opt.Security.String() + " is carried by M2M v1 frames only"
	case opt.Binary:
		if _, err := jsonscan.TopLevelKeys(data, jsonscan.Limits{}); err != nil {
			return TokenNative, "binary shape of text that is not JSON: TokenNative"
		}
		return M2M, "binary shape of JSON: M2M v1 frame"
	}
	return Select(data)
}

// repetitionRatio is 1 − distinct 4-grams / (chars − 3) over Unicode scalar
// values, as the Rust engine computes it (in float32).
func repetitionRatio(data []byte) float32 {
	if len(data) < selectMinSize {
		return 0
	}
	runes := make([]rune, 0, len(data))
	for len(data) > 0 {
		r, n := utf8.DecodeRune(data)
		runes = append(runes, r)
		data = data[n:]
	}
	if len(runes) < 4 {
		return 0
	}
	seen := make(map[[4]rune]struct{}, len(runes))
	for i := 0; i+4 <= len(runes); i++ {
		seen[[4]rune(runes[i:i+4])] = struct{}{}
	}
	return 1 - float32(len(seen))/float32(len(runes)-3)
}
