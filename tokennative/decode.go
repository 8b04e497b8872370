package tokennative

import (
	"fmt"
	"slices"
	"unicode/utf8"
	"unsafe"
)

// appendDecoded appends the text of the token varints in data to dst. The
// text may not exceed limit bytes, checked before each token is copied (a few
// bytes of varints can name long tokens). On error dst is returned unchanged.
//
// The work is done by copyTokens, a small loop that calls nothing so that the
// compiler keeps its state in registers; whatever it does not handle (a long
// or bad varint, an unknown id, the limit, a full buffer) is handled here,
// between its runs.
func (v *vocab) appendDecoded(dst, data []byte, limit int) ([]byte, error) {
	start := len(dst)
	end := start + limit
	offs, arena := v.offs, v.arena
	out := slices.Grow(dst, min(4*len(data), limit)+decodePad)
	out = out[:cap(out)]
	l := start
	for i := 0; i < len(data); {
		var n int
		l, n = copyTokens(out, l, end, data[i:], offs, arena)
		if i += n; i == len(data) {
			break
		}
		// copyTokens stopped before this varint: see why.
		id, n, err := readVarint(data[i:])
		if err != nil {
			return dst, fmt.Errorf("%w at data offset %d", err, i)
		}
		if int(id) >= len(offs)-1 || offs[id] == offs[id+1] {
			return dst, v.unknownToken(id, i)
		}
		size := int(offs[id+1] - offs[id])
		if l+size > end {
			return dst, fmt.Errorf("%w: decoded text exceeds %d bytes", ErrLimit, limit)
		}
		if l+size+decodePad > len(out) {
			// Room for this token and, at the rate so far, the rest.
			more := size + decodePad + min(4*(len(data)-i), end-l)
			out = slices.Grow(out[:l], more)
			out = out[:cap(out)]
		}
		l += copy(out[l:], arena[offs[id]:offs[id+1]])
		i += n
	}
	out = out[:l]
	if !utf8.Valid(out[start:]) {
		return dst, fmt.Errorf("%w: decoded text (%s)", ErrNotUTF8, v.enc)
	}
	return out, nil
}

// copyTokens copies the tokens named by the varints at the start of data
// into out from offset l, in 16-byte moves rather than with memmove (tokens
// are short; the arena has room for the overhang, and out must too). It stops
// at the end of data or before a varint it does not take: longer than three
// bytes (no real token id needs more), truncated, an unknown id, a token that
// would pass end or leave less than 16 bytes of room in out. It returns the
// new offset and the bytes of data consumed.
func copyTokens(out []byte, l, end int, data []byte, offs []uint32, arena []byte) (int, int) {
	numIDs := uint32(len(offs) - 1)
	outBase, arenaBase := unsafe.Pointer(unsafe.SliceData(out)), unsafe.Pointer(unsafe.SliceData(arena))
	i := 0
	for i < len(data) {
		var id uint32
		var n int
		switch b := data[i]; {
		case b < 0x80:
			id, n = uint32(b), 1
		case i+1 < len(data) && data[i+1] < 0x80:
			id, n = uint32(b&0x7f)|uint32(data[i+1])<<7, 2
		case i+2 < len(data) && data[i+1] >= 0x80 && data[i+2] < 0x80:
			id, n = uint32(b&0x7f)|uint32(data[i+1]&0x7f)<<7|uint32(data[i+2])<<14, 3
		default:
			return l, i
		}
		if id >= numIDs {
			return l, i
		}
		o, e := int(offs[id]), int(offs[id+1])
		size := e - o
		if size == 0 || size > decodePad || l+size > end || l+decodePad > len(out) {
			return l, i
		}
		// In bounds: l+16 <= len(out) was just checked, and every token is
		// followed by at least 16 arena bytes (decodePad).
		*(*[decodePad]byte)(unsafe.Add(outBase, l)) = *(*[decodePad]byte)(unsafe.Add(arenaBase, o))
		l += size
		i += n
	}
	return l, i
}

func (v *vocab) unknownToken(id uint32, at int) error {
	return fmt.Errorf("%w: %d at data offset %d (%s has %d ids)", ErrUnknownToken, id, at, v.enc, len(v.offs)-1)
}

// appendDecodedIDs is appendDecoded for ids already read.
func (v *vocab) appendDecodedIDs(dst []byte, ids []uint32, limit int) ([]byte, error) {
	start := len(dst)
	out := dst
	numIDs := uint32(len(v.offs) - 1)
	for i, id := range ids {
		if id >= numIDs || v.offs[id] == v.offs[id+1] {
			return dst, fmt.Errorf("%w: %d at index %d (%s)", ErrUnknownToken, id, i, v.enc)
		}
		t := v.arena[v.offs[id]:v.offs[id+1]]
		if len(out)-start+len(t) > limit {
			return dst, fmt.Errorf("%w: decoded text exceeds %d bytes", ErrLimit, limit)
		}
		out = append(out, t...)
	}
	if !utf8.Valid(out[start:]) {
		return dst, fmt.Errorf("%w: decoded text (%s)", ErrNotUTF8, v.enc)
	}
	return out, nil
}

// readVarint reads one token varint from b, which starts with a byte ≥ 0x80
// or is otherwise any varint. Token ids are u32: at most 5 bytes, value at
// most 0xFFFFFFFF (wire reference §2.1). Non-minimal encodings are accepted,
// as the Rust reference accepts them.
func readVarint(b []byte) (uint32, int, error) {
	var v uint64
	for i := 0; i < len(b); i++ {
		c := b[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if v > 0xffffffff {
				return 0, 0, fmt.Errorf("%w: value %d exceeds 32 bits", ErrVarintOverflow, v)
			}
			return uint32(v), i + 1, nil
		}
		if i == 4 {
			return 0, 0, fmt.Errorf("%w: more than 5 bytes", ErrVarintOverflow)
		}
	}
	return 0, 0, ErrTruncatedVarint
}
