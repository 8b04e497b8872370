package tokennative

import (
	"fmt"
	"sync"

	"github.com/tiktoken-go/tokenizer/codec"
)

// The cl100k_base and o200k_base ranks come from github.com/tiktoken-go/tokenizer,
// read through its public API: every rank is decoded once, on first use, to
// learn its bytes. That costs tiktoken-go's own vocabulary load (its map
// stays alive for the life of the process) plus one Decode per rank; see the
// package documentation for measured figures.

var (
	cl100kVocab = sync.OnceValues(func() (*vocab, error) {
		return vocabFromTiktokenGo(Cl100k, codec.NewCl100kBase(), cl100kRanks, []specialToken{
			{100257, "<|endoftext|>"},
			{100258, "<|fim_prefix|>"},
			{100259, "<|fim_middle|>"},
			{100260, "<|fim_suffix|>"},
			{100276, "<|endofprompt|>"},
		})
	})
	o200kVocab = sync.OnceValues(func() (*vocab, error) {
		return vocabFromTiktokenGo(O200k, codec.NewO200kBase(), o200kRanks, []specialToken{
			{199999, "<|endoftext|>"},
			{200018, "<|endofprompt|>"},
		})
	})
)

// Mergeable ranks are dense: 0..n-1.
const (
	cl100kRanks = 100256
	o200kRanks  = 199998
)

func vocabFromTiktokenGo(enc Encoding, c *codec.Codec, ranks int, specials []specialToken) (*vocab, error) {
	tokens := make([][]byte, ranks)
	size := 0
	id := []uint{0}
	texts := make([]string, ranks)
	for r := range ranks {
		id[0] = uint(r)
		s, err := c.Decode(id)
		if err != nil || s == "" {
			return nil, fmt.Errorf("%w: %s rank %d: %v", ErrVocabulary, enc, r, err)
		}
		texts[r] = s
		size += len(s)
	}
	id[0] = uint(ranks)
	if _, err := c.Decode(id); err == nil {
		return nil, fmt.Errorf("%w: %s has more than %d ranks", ErrVocabulary, enc, ranks)
	}
	// One backing array for all token bytes; newVocab copies them once more
	// into its arena, and this is garbage after.
	all := make([]byte, 0, size)
	for r, s := range texts {
		all = append(all, s...)
		tokens[r] = all[len(all)-len(s):]
	}
	return newVocab(enc, enc == O200k, tokens, specials)
}
