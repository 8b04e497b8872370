package tokennative

import (
	"fmt"
	"strings"
	"unsafe"
)

// vocab is one tokenizer's immutable data, shared by every Codec in the
// process: token bytes by id (for decoding), ranks by bytes (for encoding)
// and the special tokens.
type vocab struct {
	enc   Encoding
	o200k bool // o200k's pre-tokenization pattern, else cl100k's

	// arena holds every token's bytes; token id spans arena[offs[id]:offs[id+1]]
	// (empty for an unused id). decodePad zero bytes follow the last token so
	// the decoder can copy short tokens with one fixed-size move.
	arena []byte
	offs  []uint32

	mergeable int // ids below are BPE ranks
	ranks     *rankTable
	byteRank  [256]uint32
	pair2     []uint32 // rank+1 of the 2-byte token b0<<8|b1, or 0

	special       map[string]uint32
	maxSpecialLen int
}

const decodePad = 16

type specialToken struct {
	id   uint32
	text string
}

// newVocab builds a vocabulary from the bytes of each mergeable rank
// (tokens[r], nil for an unused rank) and the special tokens, which must look
// like "<|name|>".
func newVocab(enc Encoding, o200k bool, tokens [][]byte, specials []specialToken) (*vocab, error) {
	initClassTable()
	numIDs := len(tokens)
	size := 0
	for _, t := range tokens {
		size += len(t)
	}
	for _, s := range specials {
		if s.id < uint32(len(tokens)) {
			return nil, fmt.Errorf("%w: special token %q has id %d, below the %d ranks", ErrVocabulary, s.text, s.id, len(tokens))
		}
		if len(s.text) < 5 || !strings.HasPrefix(s.text, "<|") || !strings.HasSuffix(s.text, "|>") || strings.Contains(s.text[2:len(s.text)-2], "|>") {
			return nil, fmt.Errorf("%w: special token %q is not of the form <|name|>", ErrVocabulary, s.text)
		}
		numIDs = max(numIDs, int(s.id)+1)
		size += len(s.text)
	}
	v := &vocab{
		enc:       enc,
		o200k:     o200k,
		arena:     make([]byte, 0, size+decodePad),
		offs:      make([]uint32, numIDs+1),
		mergeable: len(tokens),
		pair2:     make([]uint32, 1<<16),
		special:   make(map[string]uint32, len(specials)),
	}
	texts := make([]string, numIDs)
	for _, s := range specials {
		if texts[s.id] != "" {
			return nil, fmt.Errorf("%w: two special tokens have id %d", ErrVocabulary, s.id)
		}
		texts[s.id] = s.text
		v.special[s.text] = s.id
		v.maxSpecialLen = max(v.maxSpecialLen, len(s.text))
	}
	for id := 0; id < numIDs; id++ {
		v.offs[id] = uint32(len(v.arena))
		if id < len(tokens) {
			v.arena = append(v.arena, tokens[id]...)
		} else {
			v.arena = append(v.arena, texts[id]...)
		}
	}
	v.offs[numIDs] = uint32(len(v.arena))
	v.arena = v.arena[:len(v.arena)+decodePad] // zeroed by make

	v.ranks = newRankTable(v.arena, v.offs, len(tokens))
	var haveByte [256]bool
	for r, t := range tokens {
		if len(t) == 0 {
			continue
		}
		if got, _ := v.ranks.lookup(bytesToString(t)); got != uint32(r) {
			return nil, fmt.Errorf("%w: ranks %d and %d have the same bytes %q", ErrVocabulary, got, r, t)
		}
		switch len(t) {
		case 1:
			v.byteRank[t[0]] = uint32(r)
			haveByte[t[0]] = true
		case 2:
			v.pair2[uint16(t[0])<<8|uint16(t[1])] = uint32(r) + 1
		}
	}
	for b, ok := range haveByte {
		if !ok {
			return nil, fmt.Errorf("%w: byte 0x%02x has no token", ErrVocabulary, b)
		}
	}
	return v, nil
}

// numIDs returns one more than the largest token id.
func (v *vocab) numIDs() int { return len(v.offs) - 1 }

// token returns the bytes of token id, or nil if id is unused.
func (v *vocab) token(id uint32) []byte {
	if id >= uint32(len(v.offs)-1) {
		return nil
	}
	return v.arena[v.offs[id]:v.offs[id+1]]
}

// bytesToString views b as a string without copying; b must not change while
// the string is in use.
func bytesToString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
