package tokennative

import (
	"strings"
	"sync"
)

// encState is the scratch of one encode call, pooled so that encoding does
// not allocate in steady state.
type encState struct {
	ids   []uint32
	buf   []byte
	parts [bpeScanMax + 1]bpePart
	nodes []bpeNode
	heap  []bpeCandidate
}

var encStates = sync.Pool{New: func() any { return new(encState) }}

// Scratch larger than this is dropped rather than pooled, so one huge message
// does not pin its buffers for the life of the process.
const (
	maxPooledIDs   = 1 << 18
	maxPooledBytes = 1 << 20
)

func getEncState() *encState { return encStates.Get().(*encState) }

func putEncState(st *encState) {
	if cap(st.ids) > maxPooledIDs {
		st.ids = nil
	}
	if cap(st.buf) > maxPooledBytes {
		st.buf = nil
	}
	if cap(st.nodes) > maxPooledIDs {
		st.nodes, st.heap = nil, nil
	}
	encStates.Put(st)
}

// appendTokens appends the token ids of s, recognising special tokens
// anywhere in it as tiktoken-rs's encode_with_special_tokens does: the text
// between special tokens is pre-tokenized on its own. s must be valid UTF-8.
func (v *vocab) appendTokens(ids []uint32, s string, st *encState) []uint32 {
	for {
		at, id, n := v.findSpecial(s)
		if at < 0 {
			return v.appendOrdinary(ids, s, st)
		}
		ids = v.appendOrdinary(ids, s[:at], st)
		ids = append(ids, id)
		s = s[at+n:]
	}
}

// findSpecial returns the offset, id and length of the first special token
// in s, or -1. Every special token is "<|name|>" with no "|>" inside, so a
// candidate ends at the first "|>" after its "<|".
func (v *vocab) findSpecial(s string) (int, uint32, int) {
	for off := 0; ; {
		k := strings.Index(s[off:], "<|")
		if k < 0 {
			return -1, 0, 0
		}
		k += off
		if e := strings.Index(s[k+2:min(len(s), k+v.maxSpecialLen)], "|>"); e >= 0 {
			if id, ok := v.special[s[k:k+e+4]]; ok {
				return k, id, e + 4
			}
		}
		off = k + 1
	}
}

// appendOrdinary appends the token ids of s, in which special tokens are
// plain text.
func (v *vocab) appendOrdinary(ids []uint32, s string, st *encState) []uint32 {
	for i := 0; i < len(s); {
		var j int
		if v.o200k {
			j = splitO200k(s, i)
		} else {
			j = splitCL(s, i)
		}
		piece := s[i:j]
		if len(piece) == 1 {
			ids = append(ids, v.byteRank[piece[0]])
		} else if r, ok := v.ranks.lookup(piece); ok {
			ids = append(ids, r)
		} else {
			ids = v.bpe(ids, piece, st)
		}
		i = j
	}
	return ids
}

// appendVarint appends v as an unsigned LEB128 varint (wire reference §2.1).
func appendVarint(dst []byte, v uint32) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}
