package tokennative

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"unicode/utf8"
)

// Llama 3 vocabulary files. Two layouts hold the same 128,000 ranks:
//
//   - GPT-2 byte-level: encoder.json maps each token, its bytes written in
//     GPT-2's byte-to-unicode alphabet, to its id; vocab.bpe lists the merges.
//     Llama 3 is a tiktoken vocabulary (a token's id is its merge rank, and
//     Meta's tokenizer merges by rank), so the ids are all the encoder needs.
//     A vocab.bpe beside encoder.json is checked against it (every merge joins
//     two tokens into a token, in non-decreasing rank order), which catches a
//     mismatched pair of files or a vocabulary that is not tiktoken-style. The
//     merges themselves are not used: merge-list BPE (Hugging Face's
//     tokenizer.json, ollama) differs from Meta's rank merging on rare pieces.
//   - tiktoken rank file (Meta's tokenizer.model): "<base64 bytes> <rank>" lines.

// maxVocabFile bounds a vocabulary file read (Llama 3's are ~3 MB).
const maxVocabFile = 64 << 20

// loadLlama3 reads and checks the Llama 3 vocabulary at path.
func loadLlama3(path string) (*vocab, error) {
	tokens, merges, mergesPath, err := readLlama3(path)
	if err != nil {
		return nil, err
	}
	v, err := newVocab(Llama3, false, tokens, llama3SpecialTokens)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if merges != nil {
		if err := checkMerges(merges, v); err != nil {
			return nil, fmt.Errorf("%s: %w", mergesPath, err)
		}
	}
	return v, nil
}

// readLlama3 returns the token bytes by rank at path, and the contents and
// path of the vocab.bpe beside an encoder.json, if any.
func readLlama3(path string) (tokens [][]byte, merges []byte, mergesPath string, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%w: %w", ErrVocabulary, err)
	}
	file := path
	if fi.IsDir() {
		switch {
		case fileExists(filepath.Join(path, "encoder.json")):
			file = filepath.Join(path, "encoder.json")
		case fileExists(filepath.Join(path, "tokenizer.model")):
			file = filepath.Join(path, "tokenizer.model")
		default:
			return nil, nil, "", fmt.Errorf("%w: %s holds neither encoder.json nor tokenizer.model", ErrVocabulary, path)
		}
	}
	data, err := readVocabFile(file)
	if err != nil {
		return nil, nil, "", err
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		tokens, err = parseRankFile(data, llama3Ranks)
		if err != nil {
			return nil, nil, "", fmt.Errorf("%s: %w", file, err)
		}
		return tokens, nil, "", nil
	}
	if tokens, err = parseEncoderJSON(data, llama3Ranks); err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", file, err)
	}
	mergesPath = filepath.Join(filepath.Dir(file), "vocab.bpe")
	merges, err = readVocabFile(mergesPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return tokens, nil, "", nil
	case err != nil:
		return nil, nil, "", err
	}
	return tokens, merges, mergesPath, nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func readVocabFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrVocabulary, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxVocabFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrVocabulary, p, err)
	}
	if len(data) > maxVocabFile {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrVocabulary, p, maxVocabFile)
	}
	return data, nil
}

// parseEncoderJSON reads encoder.json, a flat JSON object from tokens (in
// GPT-2's alphabet) to ids, into token bytes by id, requiring ids 0..want-1
// each exactly once. A purpose-built parser: encoding/json into a map costs
// several times more for this 2.7 MB file, and the map would be thrown away.
func parseEncoderJSON(data []byte, want int) ([][]byte, error) {
	tokens := make([][]byte, want)
	arena := make([]byte, 0, len(data)) // token bytes never outnumber JSON bytes: no reallocation
	p := skipJSONSpace(data, 0)
	if p >= len(data) || data[p] != '{' {
		return nil, fmt.Errorf("%w: encoder.json is not a JSON object", ErrVocabulary)
	}
	p = skipJSONSpace(data, p+1)
	count := 0
	for p < len(data) && data[p] != '}' {
		if count > 0 {
			if data[p] != ',' {
				return nil, fmt.Errorf("%w: encoder.json offset %d: want ',' or '}'", ErrVocabulary, p)
			}
			p = skipJSONSpace(data, p+1)
		}
		start := len(arena)
		var err error
		if arena, p, err = appendGPT2String(arena, data, p); err != nil {
			return nil, err
		}
		p = skipJSONSpace(data, p)
		if p >= len(data) || data[p] != ':' {
			return nil, fmt.Errorf("%w: encoder.json offset %d: want ':'", ErrVocabulary, p)
		}
		p = skipJSONSpace(data, p+1)
		id, end := 0, p
		for end < len(data) && data[end] >= '0' && data[end] <= '9' && end-p < 10 {
			id = id*10 + int(data[end]-'0')
			end++
		}
		if end == p || end < len(data) && (data[end] >= '0' && data[end] <= '9' || data[end] == '.' || data[end] == 'e' || data[end] == 'E') {
			return nil, fmt.Errorf("%w: encoder.json offset %d: want a token id", ErrVocabulary, p)
		}
		tok := arena[start:]
		if id >= want {
			return nil, fmt.Errorf("%w: token %q has id %d, outside 0..%d (not a Llama 3 vocabulary?)", ErrVocabulary, tok, id, want-1)
		}
		if tokens[id] != nil {
			return nil, fmt.Errorf("%w: id %d appears twice", ErrVocabulary, id)
		}
		tokens[id] = tok
		count++
		p = skipJSONSpace(data, end)
	}
	if p >= len(data) || skipJSONSpace(data, p+1) != len(data) {
		return nil, fmt.Errorf("%w: encoder.json is not one JSON object", ErrVocabulary)
	}
	if count != want {
		return nil, fmt.Errorf("%w: %d tokens, want %d (not a Llama 3 vocabulary)", ErrVocabulary, count, want)
	}
	return tokens, nil
}

func skipJSONSpace(data []byte, p int) int {
	for p < len(data) && (data[p] == ' ' || data[p] == '\t' || data[p] == '\n' || data[p] == '\r') {
		p++
	}
	return p
}

// appendGPT2String decodes the JSON string at data[p] and maps its
// characters through GPT-2's byte alphabet, appending the bytes to dst. It
// returns the offset after the closing quote.
func appendGPT2String(dst, data []byte, p int) ([]byte, int, error) {
	if p >= len(data) || data[p] != '"' {
		return dst, p, fmt.Errorf("%w: encoder.json offset %d: want a string", ErrVocabulary, p)
	}
	start := len(dst)
	for p++; ; {
		if p >= len(data) {
			return dst, p, fmt.Errorf("%w: encoder.json: unterminated string", ErrVocabulary)
		}
		c := data[p]
		var r rune
		switch {
		case c == '"':
			if len(dst) == start {
				return dst, p, fmt.Errorf("%w: encoder.json offset %d: empty token", ErrVocabulary, p)
			}
			return dst, p + 1, nil
		case c == '\\':
			if p+1 >= len(data) {
				return dst, p, fmt.Errorf("%w: encoder.json: unterminated string", ErrVocabulary)
			}
			switch data[p+1] {
			case '"', '\\', '/':
				r = rune(data[p+1])
			case 'b':
				r = '\b'
			case 'f':
				r = '\f'
			case 'n':
				r = '\n'
			case 'r':
				r = '\r'
			case 't':
				r = '\t'
			case 'u':
				if p+6 > len(data) {
					return dst, p, fmt.Errorf("%w: encoder.json offset %d: bad \\u escape", ErrVocabulary, p)
				}
				v, err := strconv.ParseUint(string(data[p+2:p+6]), 16, 16)
				if err != nil {
					return dst, p, fmt.Errorf("%w: encoder.json offset %d: bad \\u escape", ErrVocabulary, p)
				}
				r = rune(v)
				p += 4
			default:
				return dst, p, fmt.Errorf("%w: encoder.json offset %d: bad escape", ErrVocabulary, p)
			}
			p += 2
		case c < 0x20:
			return dst, p, fmt.Errorf("%w: encoder.json offset %d: control character in string", ErrVocabulary, p)
		case c < utf8.RuneSelf:
			r = rune(c)
			p++
		default:
			var n int
			r, n = utf8.DecodeRune(data[p:])
			p += n
		}
		if r == utf8.RuneError || r >= rune(len(gpt2Alphabet)) || gpt2Alphabet[r] < 0 {
			return dst, p, fmt.Errorf("%w: encoder.json offset %d: %U is outside the GPT-2 byte alphabet", ErrVocabulary, p, r)
		}
		dst = append(dst, byte(gpt2Alphabet[r]))
	}
}

// checkMerges verifies that vocab.bpe's merges agree with v's ranks.
func checkMerges(data []byte, v *vocab) error {
	prev := uint32(0)
	var buf []byte
	for line := 1; len(data) > 0; line++ {
		var l []byte
		l, data, _ = bytes.Cut(data, []byte{'\n'})
		l = bytes.TrimSuffix(l, []byte{'\r'})
		if len(l) == 0 || line == 1 && bytes.HasPrefix(l, []byte("#version")) {
			continue
		}
		a, b, ok := bytes.Cut(l, []byte{' '})
		if !ok || len(a) == 0 || len(b) == 0 || bytes.IndexByte(b, ' ') >= 0 {
			return fmt.Errorf("%w: line %d is not a merge: %q", ErrVocabulary, line, l)
		}
		var err error
		if buf, err = gpt2Append(buf[:0], a); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		na := len(buf)
		if buf, err = gpt2Append(buf, b); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		_, okA := v.ranks.lookup(bytesToString(buf[:na]))
		_, okB := v.ranks.lookup(bytesToString(buf[na:]))
		r, okAB := v.ranks.lookup(bytesToString(buf))
		if !okA || !okB || !okAB {
			return fmt.Errorf("%w: line %d merges %q, which encoder.json lacks", ErrVocabulary, line, l)
		}
		if r < prev {
			return fmt.Errorf("%w: line %d merges to rank %d after rank %d: merge order is not rank order", ErrVocabulary, line, r, prev)
		}
		prev = r
	}
	return nil
}

// parseRankFile reads tiktoken's "<base64 token> <rank>" lines, requiring
// ranks 0..want-1 each exactly once.
func parseRankFile(data []byte, want int) ([][]byte, error) {
	tokens := make([][]byte, want)
	seen := 0
	line := 0
	for len(data) > 0 {
		var l []byte
		l, data, _ = bytes.Cut(data, []byte{'\n'})
		line++
		l = bytes.TrimSuffix(l, []byte{'\r'})
		if len(l) == 0 {
			continue
		}
		tok, rank, ok := bytes.Cut(l, []byte{' '})
		if !ok {
			return nil, fmt.Errorf("%w: line %d is not \"<base64> <rank>\"", ErrVocabulary, line)
		}
		r, err := strconv.Atoi(string(rank))
		if err != nil || r < 0 || r >= want {
			return nil, fmt.Errorf("%w: line %d: rank %q outside 0..%d (not a Llama 3 vocabulary?)", ErrVocabulary, line, rank, want-1)
		}
		b, err := strictBase64.AppendDecode(nil, tok)
		if err != nil || len(b) == 0 {
			return nil, fmt.Errorf("%w: line %d: bad base64 token %q", ErrVocabulary, line, tok)
		}
		if tokens[r] != nil {
			return nil, fmt.Errorf("%w: line %d: rank %d appears twice", ErrVocabulary, line, r)
		}
		tokens[r] = b
		seen++
	}
	if seen != want {
		return nil, fmt.Errorf("%w: %d ranks, want %d (not a Llama 3 vocabulary)", ErrVocabulary, seen, want)
	}
	return tokens, nil
}

// gpt2Alphabet maps each rune of GPT-2's byte-level alphabet back to its
// byte (-1: not in the alphabet). Printable Latin-1 bytes stand for
// themselves; the other 68 bytes are written as U+0100 onwards, in order.
var gpt2Alphabet = func() (m [256 + 68]int16) {
	for i := range m {
		m[i] = -1
	}
	next := 256
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae {
			m[b] = int16(b)
		} else {
			m[next] = int16(b)
			next++
		}
	}
	return m
}()

// gpt2Append appends the bytes that s, written in GPT-2's alphabet, stands for.
func gpt2Append(dst, s []byte) ([]byte, error) {
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError || r >= rune(len(gpt2Alphabet)) || gpt2Alphabet[r] < 0 {
			return dst, fmt.Errorf("%w: %q has %U, outside the GPT-2 byte alphabet", ErrVocabulary, s, r)
		}
		dst = append(dst, byte(gpt2Alphabet[r]))
		s = s[n:]
	}
	return dst, nil
}
