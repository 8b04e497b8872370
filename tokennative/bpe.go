package tokennative

import "math"

// Byte-pair encoding of one piece that is not itself a token, as tiktoken's
// byte_pair_merge: start from single bytes and repeatedly merge the adjacent
// pair whose merged bytes have the lowest rank, leftmost first, until no
// adjacent pair is a token. Short pieces (the usual case) use a linear scan on
// a stack array; long ones a heap, which gives the same merges in O(n log n).

const noRank = math.MaxUint32

// bpeScanMax is the longest piece merged by linear scan (O(n²) but
// allocation-free and fast for the short pieces text is made of).
const bpeScanMax = 64

type bpePart struct {
	start int32
	pair  uint32 // rank of this part merged with the next one, or noRank
	self  uint32 // rank of this part
}

// rankOf returns the rank of the token whose bytes are s, or noRank.
func (v *vocab) rankOf(s string) uint32 {
	if len(s) == 2 {
		return v.pair2[uint16(s[0])<<8|uint16(s[1])] - 1 // 0 (absent) wraps to noRank
	}
	if r, ok := v.ranks.lookup(s); ok {
		return r
	}
	return noRank
}

func (v *vocab) bpe(ids []uint32, piece string, st *encState) []uint32 {
	if len(piece) <= bpeScanMax {
		return v.bpeScan(ids, piece, &st.parts)
	}
	return v.bpeHeap(ids, piece, st)
}

// bpeScan merges piece (2 ≤ len ≤ bpeScanMax) by linear scans, in buf (a
// scratch array, so it is not zeroed on each call).
func (v *vocab) bpeScan(ids []uint32, piece string, buf *[bpeScanMax + 1]bpePart) []uint32 {
	n := len(piece)
	parts := buf[:n+1] // parts[n] marks the end
	for i := 0; i < n; i++ {
		parts[i] = bpePart{start: int32(i), pair: noRank, self: v.byteRank[piece[i]]}
		if i+1 < n {
			parts[i].pair = v.pair2[uint16(piece[i])<<8|uint16(piece[i+1])] - 1
		}
	}
	parts[n] = bpePart{start: int32(n), pair: noRank}
	for {
		best, at := uint32(noRank), -1
		for i := range parts {
			if parts[i].pair < best {
				best, at = parts[i].pair, i
			}
		}
		if at < 0 {
			break
		}
		parts[at].self = best
		parts = append(parts[:at+1], parts[at+2:]...)
		if at+2 < len(parts) {
			parts[at].pair = v.rankOf(piece[parts[at].start:parts[at+2].start])
		} else {
			parts[at].pair = noRank
		}
		if at > 0 {
			parts[at-1].pair = v.rankOf(piece[parts[at-1].start:parts[at+1].start])
		}
	}
	for i := 0; i < len(parts)-1; i++ {
		ids = append(ids, parts[i].self)
	}
	return ids
}

// bpeNode is a part in bpeHeap's linked list, indexed by its start offset.
type bpeNode struct {
	prev, next int32
	pair       uint32 // rank of this part merged with the next one, or noRank
	self       uint32
}

type bpeCandidate struct {
	rank uint32
	pos  int32
}

// bpeHeap merges a long piece with a min-heap of candidate pairs ordered by
// (rank, offset), so the leftmost lowest-ranked pair merges first, exactly as
// in bpeScan. A candidate is stale when its part's pair rank changed since it
// was pushed (merged parts have new, longer spans, hence other ranks).
func (v *vocab) bpeHeap(ids []uint32, piece string, st *encState) []uint32 {
	n := int32(len(piece))
	if cap(st.nodes) < int(n)+1 {
		st.nodes = make([]bpeNode, n+1)
	}
	nodes := st.nodes[:n+1]
	h := st.heap[:0]
	for i := int32(0); i <= n; i++ {
		nodes[i] = bpeNode{prev: i - 1, next: i + 1, pair: noRank}
		if i < n {
			nodes[i].self = v.byteRank[piece[i]]
		}
		if i+1 < n {
			if r := v.pair2[uint16(piece[i])<<8|uint16(piece[i+1])] - 1; r != noRank {
				nodes[i].pair = r
				h = append(h, bpeCandidate{r, i})
			}
		}
	}
	nodes[n].next = -1
	for i := len(h)/2 - 1; i >= 0; i-- {
		heapDown(h, i)
	}
	for len(h) > 0 {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		heapDown(h, 0)

		i := top.pos
		if nodes[i].pair != top.rank {
			continue
		}
		j := nodes[i].next
		k := nodes[j].next
		nodes[i].self = top.rank
		nodes[i].next = k
		nodes[k].prev = i
		nodes[j].pair = noRank
		nodes[i].pair = noRank
		if k < n {
			if r := v.rankOf(piece[i:nodes[k].next]); r != noRank {
				nodes[i].pair = r
				h = heapPush(h, bpeCandidate{r, i})
			}
		}
		if p := nodes[i].prev; p >= 0 {
			nodes[p].pair = v.rankOf(piece[p:k])
			if nodes[p].pair != noRank {
				h = heapPush(h, bpeCandidate{nodes[p].pair, p})
			}
		}
	}
	for i := int32(0); i < n; i = nodes[i].next {
		ids = append(ids, nodes[i].self)
	}
	st.heap = h[:0]
	return ids
}

func candidateLess(a, b bpeCandidate) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

func heapPush(h []bpeCandidate, c bpeCandidate) []bpeCandidate {
	h = append(h, c)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !candidateLess(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapDown(h []bpeCandidate, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && candidateLess(h[r], h[l]) {
			m = r
		}
		if !candidateLess(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
