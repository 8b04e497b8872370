package tokennative

// Pre-tokenization: splitting text into the pieces that byte-pair encoding
// works on, by hand-written matchers equivalent to the tokenizers' regular
// expressions. A regex engine costs most of tiktoken-go's time; these walk
// the text once, with an ASCII fast path.
//
// Both patterns are alternations tried in order at the current position with
// backtracking (leftmost-first) semantics, and some alternative matches at
// every position, so the pieces tile the text. The comments on each branch
// give the alternative it implements and why backtracking reduces to the
// few cases written out.

// splitCLGeneral returns the end of the piece starting at s[i] (i < len(s))
// under the cl100k_base pattern, which Llama 3 shares:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitCLGeneral(s string, i int) int {
	c, n := byteClass[s[i]], 1
	if c == clMultibyte {
		c, n = classAtMultibyte(s, i)
	}
	if s[i] == '\'' {
		if k := contraction(s, i); k > 0 {
			return i + k
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+ : if the optional prefix is skipped, \p{L}+
	// must match at i, impossible when s[i] is a prefix character (not a
	// letter); so: a letter run at i, or one prefix character and a letter run.
	if c&clLetter != 0 {
		return scanClass(s, i+n, clLetter)
	}
	if c&(clNumber|clNewline) == 0 && i+n < len(s) {
		if c2, n2 := classAt(s, i+n); c2&clLetter != 0 {
			return scanClass(s, i+n+n2, clLetter)
		}
	}
	if c&clNumber != 0 {
		return scanNumbers(s, i+n)
	}
	if end := punctuation(s, i, c, n); end > 0 {
		return scanNewlines(s, end, false)
	}
	return splitSpace(s, i)
}

// splitO200kGeneral returns the end of the piece starting at s[i]
// (i < len(s)) under the o200k_base pattern:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Call the two letter classes U (upper) and W (lower); they overlap in Lm, Lo
// and M, and M is also a prefix character (it is neither L nor N).
func splitO200kGeneral(s string, i int) int {
	c, n := byteClass[s[i]], 1
	if c == clMultibyte {
		c, n = classAtMultibyte(s, i)
	}
	prefix := c&(clLetter|clNumber|clNewline) == 0 && i+n < len(s)
	var withPrefix, without caseRun
	if prefix {
		withPrefix = scanCaseRun(s, i+n)
	}
	if c&(clUpper|clLower) != 0 {
		without = scanCaseRun(s, i)
	}
	// First alternative, prefix taken, then prefix skipped; then the second.
	if prefix && withPrefix.lowerEnd > 0 {
		return optionalContraction(s, withPrefix.lowerEnd)
	}
	if without.lowerEnd > 0 {
		return optionalContraction(s, without.lowerEnd)
	}
	if prefix && withPrefix.upperEnd > i+n {
		return optionalContraction(s, scanClass(s, withPrefix.upperEnd, clLower))
	}
	if without.upperEnd > i {
		return optionalContraction(s, scanClass(s, without.upperEnd, clLower))
	}
	if c&clNumber != 0 {
		return scanNumbers(s, i+n)
	}
	if end := punctuation(s, i, c, n); end > 0 {
		return scanNewlines(s, end, true)
	}
	return splitSpace(s, i)
}

// caseRun describes the o200k letter alternatives at one start position q.
type caseRun struct {
	// upperEnd ends the longest run of U characters from q (q if none).
	upperEnd int
	// lowerEnd ends the match of U*W+ from q, or is 0 if U*W+ cannot match.
	lowerEnd int
}

// scanCaseRun matches U* greedily from q, then W+. If W+ matches after the
// whole U run (the next character is Ll), it takes the W run from there.
// Otherwise backtracking gives U* back one character at a time until one of
// them is also W (Lm, Lo, M); W+ then takes just that character, since the
// characters after it are U-only or end the run. So U*W+ ends after the last
// W character of the U run, or fails if there is none.
func scanCaseRun(s string, q int) caseRun {
	j, lastW := q, 0
	for j < len(s) {
		c, n := byteClass[s[j]], 1
		if c == clMultibyte {
			c, n = classAtMultibyte(s, j)
		}
		if c&clUpper == 0 {
			if c&clLower != 0 {
				return caseRun{upperEnd: j, lowerEnd: scanClass(s, j+n, clLower)}
			}
			break
		}
		j += n
		if c&clLower != 0 {
			lastW = j
		}
	}
	return caseRun{upperEnd: j, lowerEnd: lastW}
}

// punctuation matches " ?[^\s\p{L}\p{N}]+" at i (class c, length n) and
// returns its end, or 0. The optional space is never given back: without it
// the class would have to match the space.
func punctuation(s string, i int, c uint8, n int) int {
	const other = clLetter | clNumber | clSpace
	if s[i] == ' ' && i+1 < len(s) {
		if c2, n2 := classAt(s, i+1); c2&other == 0 {
			return scanNotClass(s, i+1+n2, other)
		}
	}
	if c&other == 0 {
		return scanNotClass(s, i+n, other)
	}
	return 0
}

// splitSpace matches the whitespace alternatives at i, where s[i] is white
// space that no earlier alternative took:
//
//   - \s*[\r\n]+ : \s* backs off to the last \r or \n of the run, so the
//     piece ends after the run's last newline, if it has one;
//   - \s+(?!\S) : the whole run at the end of the text, else the run minus its
//     last character (which then precedes the next piece), if that leaves any;
//   - \s+ : the single whitespace character.
func splitSpace(s string, i int) int {
	j, lastNL, lastStart := i, 0, i
	for j < len(s) {
		c, n := byteClass[s[j]], 1
		if c == clMultibyte {
			c, n = classAtMultibyte(s, j)
		}
		if c&clSpace == 0 {
			break
		}
		lastStart = j
		j += n
		if c&clNewline != 0 {
			lastNL = j
		}
	}
	switch {
	case lastNL > 0:
		return lastNL
	case j == len(s) || lastStart == i:
		return j
	default:
		return lastStart
	}
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[i] == '\” and returns
// its length, or 0. Case-insensitive 's' also matches U+017F (long s), in
// Unicode simple case folding as in both reference regex engines.
func contraction(s string, i int) int {
	if i+1 >= len(s) {
		return 0
	}
	switch s[i+1] {
	case 's', 'S', 't', 'T', 'm', 'M', 'd', 'D':
		return 2
	case 'r', 'R', 'v', 'V':
		if i+2 < len(s) && s[i+2]|0x20 == 'e' {
			return 3
		}
	case 'l', 'L':
		if i+2 < len(s) && s[i+2]|0x20 == 'l' {
			return 3
		}
	case 0xc5: // U+017F is c5 bf
		if i+2 < len(s) && s[i+2] == 0xbf {
			return 3
		}
	}
	return 0
}

func optionalContraction(s string, end int) int {
	if end < len(s) && s[end] == '\'' {
		return end + contraction(s, end)
	}
	return end
}

// scanClass returns the end of the run of characters with any bit of mask, from j.
func scanClass(s string, j int, mask uint8) int {
	for j < len(s) {
		c, n := byteClass[s[j]], 1
		if c == clMultibyte {
			c, n = classAtMultibyte(s, j)
		}
		if c&mask == 0 {
			return j
		}
		j += n
	}
	return j
}

// scanNotClass returns the end of the run of characters with no bit of mask, from j.
func scanNotClass(s string, j int, mask uint8) int {
	for j < len(s) {
		c, n := byteClass[s[j]], 1
		if c == clMultibyte {
			c, n = classAtMultibyte(s, j)
		}
		if c&mask != 0 {
			return j
		}
		j += n
	}
	return j
}

// scanNumbers ends \p{N}{1,3} whose first character ends at j.
func scanNumbers(s string, j int) int {
	for k := 1; k < 3 && j < len(s); k++ {
		c, n := byteClass[s[j]], 1
		if c == clMultibyte {
			c, n = classAtMultibyte(s, j)
		}
		if c&clNumber == 0 {
			break
		}
		j += n
	}
	return j
}

// scanNewlines matches [\r\n]* (cl100k) or [\r\n/]* (o200k) from j.
func scanNewlines(s string, j int, slash bool) int {
	for j < len(s) && (s[j] == '\r' || s[j] == '\n' || slash && s[j] == '/') {
		j++
	}
	return j
}

// ASCII fast paths. Most text the codec sees is JSON and English; for the
// common pieces (a word, a word after one space or punctuation character, up
// to three digits, a punctuation run) these decide from ASCII bytes alone,
// without calls. Whenever the answer depends on a non-ASCII character, or the
// piece is of a rarer kind (contractions, newlines, other white space), they
// leave it to the general matcher, which decides from scratch.

// splitCL returns the end of the piece starting at s[i] (i < len(s)) under
// the cl100k_base pattern (see splitCLGeneral).
func splitCL(s string, i int) int {
	b := s[i]
	c := byteClass[b]
	switch {
	case c&clLetter != 0:
		return asciiRunEnd(s, i+1, clLetter, splitCLGeneral, i)
	case c&clNumber != 0:
		return asciiDigitsEnd(s, i, splitCLGeneral)
	case c&(clMultibyte|clNewline) != 0 || b == '\'' || i+1 >= len(s):
		return splitCLGeneral(s, i)
	}
	// b is ASCII punctuation, a control character or non-newline white space.
	c2 := byteClass[s[i+1]]
	switch {
	case c2&clMultibyte != 0:
		return splitCLGeneral(s, i)
	case c2&clLetter != 0: // [^\r\n\p{L}\p{N}]\p{L}+
		return asciiRunEnd(s, i+2, clLetter, splitCLGeneral, i)
	case c2&clNumber != 0 && c&clSpace != 0: // whitespace before a number
		return splitCLGeneral(s, i)
	}
	start := i
	if b == ' ' && c2&(clNumber|clSpace) == 0 {
		start = i + 1 // " ?" then punctuation
	} else if c&clSpace != 0 {
		return splitCLGeneral(s, i)
	}
	j := start + 1
	for j < len(s) && byteClass[s[j]]&(clLetter|clNumber|clSpace|clMultibyte) == 0 {
		j++
	}
	if j < len(s) && s[j] >= 0x80 {
		return splitCLGeneral(s, i)
	}
	return scanNewlines(s, j, false)
}

// splitO200k returns the end of the piece starting at s[i] (i < len(s)) under
// the o200k_base pattern (see splitO200kGeneral).
func splitO200k(s string, i int) int {
	b := s[i]
	c := byteClass[b]
	switch {
	case c&clLetter != 0:
		return asciiCaseRunEnd(s, i, i)
	case c&clNumber != 0:
		return asciiDigitsEnd(s, i, splitO200kGeneral)
	case c&(clMultibyte|clNewline) != 0 || b == '\'' || i+1 >= len(s):
		return splitO200kGeneral(s, i)
	}
	c2 := byteClass[s[i+1]]
	switch {
	case c2&clMultibyte != 0:
		return splitO200kGeneral(s, i)
	case c2&clLetter != 0:
		return asciiCaseRunEnd(s, i+1, i)
	case c2&clNumber != 0 && c&clSpace != 0:
		return splitO200kGeneral(s, i)
	}
	start := i
	if b == ' ' && c2&(clNumber|clSpace) == 0 {
		start = i + 1
	} else if c&clSpace != 0 {
		return splitO200kGeneral(s, i)
	}
	j := start + 1
	for j < len(s) && byteClass[s[j]]&(clLetter|clNumber|clSpace|clMultibyte) == 0 {
		j++
	}
	if j < len(s) && s[j] >= 0x80 {
		return splitO200kGeneral(s, i)
	}
	return scanNewlines(s, j, true)
}

// asciiRunEnd ends the run of ASCII characters of class mask from j; if a
// non-ASCII character follows, the general matcher decides the piece at i.
func asciiRunEnd(s string, j int, mask uint8, general func(string, int) int, i int) int {
	for j < len(s) && byteClass[s[j]]&mask != 0 {
		j++
	}
	if j < len(s) && s[j] >= 0x80 {
		return general(s, i)
	}
	return j
}

// asciiDigitsEnd ends \p{N}{1,3} at an ASCII digit s[i].
func asciiDigitsEnd(s string, i int, general func(string, int) int) int {
	j := i + 1
	for ; j < len(s) && j < i+3; j++ {
		if c := byteClass[s[j]]; c&clNumber == 0 {
			if c == clMultibyte {
				return general(s, i)
			}
			break
		}
	}
	return j
}

// asciiCaseRunEnd ends the o200k letter piece whose letters start at q
// (the piece starts at i: q == i, or q == i+1 after a prefix character), for
// ASCII letters: [A-Z]*[a-z]+ or else [A-Z]+, then an optional contraction.
// ASCII has no character that is both upper and lower (Lm, Lo, M), so no
// backtracking is needed.
func asciiCaseRunEnd(s string, q, i int) int {
	j := q
	for j < len(s) && s[j]-'A' < 26 {
		j++
	}
	for j < len(s) && s[j]-'a' < 26 {
		j++
	}
	if j < len(s) && s[j] >= 0x80 {
		return splitO200kGeneral(s, i)
	}
	return optionalContraction(s, j)
}
