package tokennative

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Llama 3 has 128,000 BPE ranks (tiktoken-style: a token's rank is its id)
// and 256 special tokens from id 128000. Pre-tokenization uses the cl100k
// pattern (Meta's tokenizer.py: pat_str is cl100k's).
const (
	llama3Ranks    = 128000
	llama3Specials = 256
)

// llama3SpecialTokens is the special token table of Llama 3.1, 3.2 and 3.3 as
// their tokenizer.json files ship it (Llama 3.0 had reserved tokens where 3.1
// put finetune_right_pad_id, eom_id and python_tag; the ids of begin/end of
// text, the header tokens and eot_id are the same in both).
var llama3SpecialTokens = func() []specialToken {
	named := []string{
		"<|begin_of_text|>",            // 128000
		"<|end_of_text|>",              // 128001
		"<|reserved_special_token_0|>", // 128002
		"<|reserved_special_token_1|>", // 128003
		"<|finetune_right_pad_id|>",    // 128004
		"<|reserved_special_token_2|>", // 128005
		"<|start_header_id|>",          // 128006
		"<|end_header_id|>",            // 128007
		"<|eom_id|>",                   // 128008
		"<|eot_id|>",                   // 128009
		"<|python_tag|>",               // 128010
	}
	out := make([]specialToken, 0, llama3Specials)
	for i, s := range named {
		out = append(out, specialToken{uint32(llama3Ranks + i), s})
	}
	for i := len(named); i < llama3Specials; i++ {
		// 128011 is reserved_special_token_3, …, 128255 is _247.
		out = append(out, specialToken{uint32(llama3Ranks + i), fmt.Sprintf("<|reserved_special_token_%d|>", i-len(named)+3)})
	}
	return out
}()

// llama3Cache holds the Llama 3 vocabularies loaded in this process, by
// absolute path, so that every Codec configured with the same path shares one.
// A failed load is retried, but not more often than llama3RetryInterval: a
// misconfigured daemon must not re-read a bad file for every message.
var llama3Cache sync.Map // string -> *lazyVocab

var llama3RetryInterval = 10 * time.Second

type lazyVocab struct {
	v        atomic.Pointer[vocab]
	mu       sync.Mutex
	err      error
	failedAt time.Time
}

func llama3Vocab(path string) (*vocab, error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	e, _ := llama3Cache.LoadOrStore(path, new(lazyVocab))
	lv := e.(*lazyVocab)
	if v := lv.v.Load(); v != nil {
		return v, nil
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if v := lv.v.Load(); v != nil {
		return v, nil
	}
	if lv.err != nil && time.Since(lv.failedAt) < llama3RetryInterval {
		return nil, lv.err
	}
	v, err := loadLlama3(path)
	if err != nil {
		lv.err, lv.failedAt = err, time.Now()
		return nil, err
	}
	lv.v.Store(v)
	lv.err = nil
	return v, nil
}
