package frame

import "unicode/utf8"

// pricing is a model's price in cents per 1,000 tokens (wire reference §3.11).
type pricing struct {
	prefix        string
	input, output float32
}

// prices is checked in order; the first prefix of the lower-cased model
// name wins.
var prices = [...]pricing{
	{"gpt-4o-mini", 0.015, 0.06},
	{"gpt-4o", 0.25, 1.00},
	{"gpt-4-turbo", 1.00, 3.00},
	{"gpt-4", 3.00, 6.00},
	{"gpt-3.5-turbo", 0.05, 0.15},
	{"o1-preview", 1.50, 6.00},
	{"o1-mini", 0.30, 1.20},
	{"o3-mini", 0.11, 0.44},
	{"o3", 2.00, 8.00},
	{"claude-3-opus", 1.50, 7.50},
	{"claude-3.5-sonnet", 0.30, 1.50},
	{"claude-3-5-sonnet", 0.30, 1.50},
	{"claude-3-sonnet", 0.30, 1.50},
	{"claude-3.5-haiku", 0.08, 0.40},
	{"claude-3-5-haiku", 0.08, 0.40},
	{"claude-3-haiku", 0.025, 0.125},
	{"gemini-1.5-pro", 0.125, 0.50},
	{"gemini-1.5-flash", 0.0075, 0.03},
	{"gemini-2.0-flash", 0.01, 0.04},
}

var defaultPricing = pricing{"", 0.10, 0.30}

// longestPrefix is the length of the longest prefix in prices.
const longestPrefix = len("claude-3.5-sonnet")

// estimateCost returns the Rust reference's cost estimate in US dollars
// for a call to model with the given token counts (wire reference §3.11),
// bit for bit: every step is rounded to float32 in Rust's order.
func estimateCost[T string | []byte](model T, promptTokens, completionTokens uint32) float32 {
	p := priceOf(model)
	// Each explicit float32 conversion forces a rounding: without them the
	// compiler may fuse a multiply and an add (FMA), which Rust never does,
	// and the last bit of the result would differ.
	a := float32(float32(float32(promptTokens)/1000) * p.input)
	b := float32(float32(float32(completionTokens)/1000) * p.output)
	return float32(float32(a+b) / 100)
}

// priceOf matches model against the price prefixes after lower-casing it
// the way Rust's str::to_lowercase does. Only an ASCII result can match an
// (ASCII) prefix, and the only non-ASCII characters whose lower case starts
// with ASCII are U+212A KELVIN SIGN ("k") and U+0130 ("i" followed by the
// non-ASCII U+0307); so the lowered text is built up to the first character
// that lowers to non-ASCII, and no prefix can match past it.
func priceOf[T string | []byte](model T) pricing {
	var buf [longestPrefix]byte
	n := 0
	for i := 0; i < len(model) && n < len(buf); {
		c := model[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[n] = c
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(string(model[i:min(i+utf8.UTFMax, len(model))]))
		if r == '\u212a' {
			buf[n] = 'k'
			n++
			i += size
			continue
		}
		if r == '\u0130' {
			buf[n] = 'i'
			n++
		}
		break
	}
	lowered := buf[:n]
	for _, p := range prices {
		if len(lowered) >= len(p.prefix) && string(lowered[:len(p.prefix)]) == p.prefix {
			return p
		}
	}
	return defaultPricing
}
