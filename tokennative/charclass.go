package tokennative

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// Character classes of the pre-tokenization patterns. The reference
// implementations (tiktoken's fancy-regex, tiktoken-go's regexp2) classify
// with the Unicode general categories and White_Space; m2md uses Go's unicode
// tables (Unicode 15.0 with go1.26), as regexp2 does, so only characters
// assigned after Unicode 15.0 can split differently from tiktoken-rs.
const (
	clLetter  uint8 = 1 << iota // \p{L}
	clNumber                    // \p{N}
	clSpace                     // \s: White_Space (= unicode.IsSpace)
	clNewline                   // \r or \n
	clUpper                     // o200k [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	clLower                     // o200k [\p{Ll}\p{Lm}\p{Lo}\p{M}]

	// clMultibyte marks, in byteClass only, a byte that is part of a
	// multi-byte rune: classify the rune with classAtMultibyte.
	clMultibyte uint8 = 1 << 7
)

// classTableSize covers the Basic and Supplementary Multilingual Planes
// (scripts, symbols, emoji); rarer runes are classified on each use.
const classTableSize = 0x20000

var (
	// byteClass classifies ASCII bytes; the hot loops index it with a byte
	// (no bounds check) and fall back to classAtMultibyte on clMultibyte.
	byteClass      [256]uint8
	runeClassTable *[classTableSize]uint8
	classTableOnce sync.Once
)

func init() {
	for c := range 256 {
		if c < utf8.RuneSelf {
			byteClass[c] = slowRuneClass(rune(c))
		} else {
			byteClass[c] = clMultibyte
		}
	}
}

// initClassTable builds the rune class table from the Unicode range tables,
// which takes well under a millisecond; it runs with the first vocabulary load.
func initClassTable() {
	classTableOnce.Do(func() {
		t := new([classTableSize]uint8)
		mark := func(rt *unicode.RangeTable, bits uint8) {
			for _, r := range rt.R16 {
				for c := uint32(r.Lo); c <= uint32(r.Hi); c += uint32(r.Stride) {
					t[c] |= bits
				}
			}
			for _, r := range rt.R32 {
				for c := r.Lo; c <= r.Hi && c < classTableSize; c += r.Stride {
					t[c] |= bits
				}
			}
		}
		mark(unicode.L, clLetter)
		mark(unicode.N, clNumber)
		mark(unicode.White_Space, clSpace)
		mark(unicode.Lu, clUpper)
		mark(unicode.Lt, clUpper)
		mark(unicode.Lm, clUpper|clLower)
		mark(unicode.Lo, clUpper|clLower)
		mark(unicode.M, clUpper|clLower)
		mark(unicode.Ll, clLower)
		t['\r'] |= clNewline
		t['\n'] |= clNewline
		runeClassTable = t
	})
}

// slowRuneClass classifies r straight from the Unicode tables.
func slowRuneClass(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= clLetter
	}
	if unicode.IsNumber(r) {
		c |= clNumber
	}
	if unicode.IsSpace(r) {
		c |= clSpace
	}
	if r == '\r' || r == '\n' {
		c |= clNewline
	}
	if unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
		c |= clUpper
	}
	if unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
		c |= clLower
	}
	return c
}

// classAt returns the class of the rune that starts at s[i] and its length.
// s must be valid UTF-8 and initClassTable must have run.
// Hot loops write this out (c, n := byteClass[s[i]], 1; if c == clMultibyte
// {…}) because the inliner will not take it with its call.
func classAt(s string, i int) (uint8, int) {
	if c := byteClass[s[i]]; c != clMultibyte {
		return c, 1
	}
	return classAtMultibyte(s, i)
}

func classAtMultibyte(s string, i int) (uint8, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < classTableSize {
		return runeClassTable[r], n
	}
	return slowRuneClass(r), n
}
