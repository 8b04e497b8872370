package tokennative

import "math/bits"

// rankTable maps the bytes of every mergeable token to its rank, for lookups
// by substring of the text being encoded without allocating. It is an
// open-addressing table with linear probing whose slots hold the key's first
// eight bytes, so most lookups (tokens are short) touch one slot and never
// the token bytes themselves. Load factor at most 1/2.
type rankTable struct {
	slots []rankSlot
	shift uint8
	arena []byte   // token bytes, shared with the vocabulary
	offs  []uint32 // token r spans arena[offs[r]:offs[r+1]]
}

type rankSlot struct {
	word uint64 // the key's first min(8, len) bytes, little-endian, zero-padded
	rank uint32 // rank + 1; 0 marks an empty slot
	n    uint32 // key length
}

const (
	hashMul1 = 0x9e3779b97f4a7c15
	hashMul2 = 0xbf58476d1ce4e5b9
)

// newRankTable indexes ranks 0..count-1 whose bytes are arena[offs[r]:offs[r+1]];
// a zero-length span marks an unused rank.
func newRankTable(arena []byte, offs []uint32, count int) *rankTable {
	size := 1 << bits.Len(uint(2*count))
	t := &rankTable{
		slots: make([]rankSlot, size),
		shift: uint8(64 - bits.TrailingZeros(uint(size))),
		arena: arena,
		offs:  offs,
	}
	mask := uint64(size - 1)
	for r := 0; r < count; r++ {
		key := bytesToString(arena[offs[r]:offs[r+1]])
		if key == "" {
			continue
		}
		w := loadWord(key)
		for i := hashKey(key, w) >> t.shift; ; i = (i + 1) & mask {
			if t.slots[i].rank == 0 {
				t.slots[i] = rankSlot{word: w, rank: uint32(r) + 1, n: uint32(len(key))}
				break
			}
		}
	}
	return t
}

// lookup returns the rank of key.
func (t *rankTable) lookup(key string) (uint32, bool) {
	n := uint32(len(key))
	if n > 8 {
		return t.lookupLong(key)
	}
	// loadWord and hashKey, written out: the inliner will not take them.
	var w uint64
	switch {
	case n >= 4:
		w = uint64(le32(key)) | uint64(le32(key[n-4:]))<<(8*(n-4))
	case n > 0:
		w = uint64(key[0]) | uint64(key[n>>1])<<(8*(n>>1)) | uint64(key[n-1])<<(8*(n-1))
	}
	h := (w ^ uint64(n)<<58) * hashMul1
	h = (h ^ h>>29) * hashMul1
	mask := uint64(len(t.slots) - 1)
	for i := h >> t.shift; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.word == w && s.n == n {
			return s.rank - 1, true
		}
		if s.rank == 0 {
			return 0, false
		}
	}
}

// lookupLong is lookup for keys longer than eight bytes.
func (t *rankTable) lookupLong(key string) (uint32, bool) {
	n := uint32(len(key))
	w := le64(key)
	h := hashKey(key, w)
	mask := uint64(len(t.slots) - 1)
	for i := h >> t.shift; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.word == w && s.n == n {
			start := t.offs[s.rank-1]
			if string(t.arena[start+8:start+n]) == key[8:] {
				return s.rank - 1, true
			}
		}
		if s.rank == 0 {
			return 0, false
		}
	}
}

// hashKey must agree with lookup.
func hashKey(key string, w uint64) uint64 {
	h := (w ^ uint64(len(key))<<58) * hashMul1
	if len(key) > 8 {
		h = hashTail(key, h)
	}
	return (h ^ h>>29) * hashMul1
}

// hashTail mixes the bytes after the first eight into h.
func hashTail(key string, h uint64) uint64 {
	for j := 8; j < len(key); j += 8 {
		h = (h ^ h>>31 ^ le64(key[min(j, len(key)-8):])) * hashMul2
	}
	return h
}

// loadWord returns s's first min(8, len(s)) bytes as a little-endian word,
// zero-padded, using at most two overlapping loads.
func loadWord(s string) uint64 {
	switch n := len(s); {
	case n >= 8:
		return le64(s)
	case n >= 4:
		return uint64(le32(s)) | uint64(le32(s[n-4:]))<<(8*(n-4))
	case n > 0:
		return uint64(s[0]) | uint64(s[n>>1])<<(8*(n>>1)) | uint64(s[n-1])<<(8*(n-1))
	}
	return 0
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}
