package security

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/m2md/m2md/frame"
)

// Sizes of what protection adds to a frame (wire reference §4.1, §4.2).
const (
	hmacTagLen  = 32 // HMAC-SHA256 tag appended after the payload
	nonceLen    = 12 // ChaCha20-Poly1305 nonce, right after the headers
	aeadTagLen  = 16 // Poly1305 tag, after the ciphertext
	aeadExtra   = nonceLen + aeadTagLen
	lengthsLen  = 8 // payload_len (u32 LE) + crc32 (u32 LE)
	minHMACSize = frame.MinFrameLen + hmacTagLen
)

// HMACOverhead and AEADOverhead are the bytes Protect adds to a plain frame
// in each mode: a caller that wants to protect in place reserves this much
// capacity after the frame.
const (
	HMACOverhead = hmacTagLen
	AEADOverhead = aeadExtra
	// MaxOverhead is the most Protect adds in any mode: the spare capacity
	// of a buffer that must take any mode's protection in place.
	MaxOverhead = max(HMACOverhead, AEADOverhead)
)

// Overhead is the number of bytes Protect adds to a frame in mode: 0 in
// mode none (and for an unknown mode, which Protect refuses).
func Overhead(mode frame.Security) int {
	switch mode {
	case frame.SecurityHMAC:
		return HMACOverhead
	case frame.SecurityAEAD:
		return AEADOverhead
	}
	return 0
}

// headerEnd checks the prefix and header_len and returns 7 + header_len,
// the offset where the payload section (plain) or the nonce (AEAD) starts.
// It reads only the fixed header; the variable header is opaque here.
func headerEnd(f []byte) (int, error) {
	if len(f) < frame.MinFrameLen {
		return 0, fmt.Errorf("%w: frame of %d bytes, the prefix and fixed header need %d",
			ErrTooShort, len(f), frame.MinFrameLen)
	}
	if string(f[:frame.PrefixLen]) != frame.Prefix {
		return 0, fmt.Errorf("%w: frame does not start with %q", ErrMalformed, frame.Prefix)
	}
	h := int(binary.LittleEndian.Uint16(f[frame.OffHeaderLen:]))
	if h < frame.FixedHeaderLen {
		return 0, fmt.Errorf("%w: header_len %d is below the fixed header's %d",
			ErrMalformed, h, frame.FixedHeaderLen)
	}
	end := frame.PrefixLen + h
	if end > len(f) {
		return 0, fmt.Errorf("%w: header_len %d needs %d bytes, frame has %d",
			ErrTooShort, h, end, len(f))
	}
	return end, nil
}

// plainLayout checks that f is a complete plain-shaped frame: headers, then
// payload_len and crc32, then exactly payload_len payload bytes. Exactness
// (no trailing bytes) is stricter than the Rust plain decoder; it is what
// the AEAD mode demands anyway (§4.2) and it keeps every frame this
// package emits canonical. The security byte is not looked at.
func plainLayout(f []byte) (end int, err error) {
	end, err = headerEnd(f)
	if err != nil {
		return 0, err
	}
	return end, checkPayloadLen(f, end)
}

// checkPayloadLen checks f[end:] = payload_len ‖ crc32 ‖ payload_len bytes.
func checkPayloadLen(f []byte, end int) error {
	rest := len(f) - end
	if rest < lengthsLen {
		return fmt.Errorf("%w: %d bytes after the headers, payload_len and crc32 need %d",
			ErrTooShort, rest, lengthsLen)
	}
	pl := uint64(binary.LittleEndian.Uint32(f[end:]))
	if pl != uint64(rest-lengthsLen) {
		return fmt.Errorf("%w: payload_len %d but %d payload bytes follow",
			ErrMalformed, pl, rest-lengthsLen)
	}
	return nil
}

// sliceForAppend extends in by n bytes, reusing its capacity when it can,
// and returns the whole slice and the n new bytes (the crypto/cipher idiom).
func sliceForAppend(in []byte, n int) (head, tail []byte) {
	if total := len(in) + n; cap(in) >= total {
		head = in[:total]
	} else {
		head = make([]byte, total)
		copy(head, in)
	}
	tail = head[len(in):]
	return head, tail
}

// sameStart reports whether x and y begin at the same address: the one
// overlap the in-place paths are written for.
func sameStart(x, y []byte) bool {
	return len(x) > 0 && len(y) > 0 && &x[0] == &y[0]
}

// inexactOverlap reports whether x and y share memory without starting at
// the same address. Such a dst would be overwritten while it is still being
// read; crypto/cipher panics on it, this package returns ErrBufferOverlap.
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	x0, x1 := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&x[len(x)-1]))
	y0, y1 := uintptr(unsafe.Pointer(&y[0])), uintptr(unsafe.Pointer(&y[len(y)-1]))
	return x0 <= y1 && y0 <= x1
}

// Mode reads a frame's security byte (offset 10). It checks only what it
// needs to read it: the length and the "#M2M|1|" prefix. A byte other than
// 00, 01 or 02 is returned together with ErrUnknownMode (the Rust decoder
// treats such frames as plain; m2md refuses them).
func Mode(f []byte) (frame.Security, error) {
	if len(f) <= frame.OffSecurity {
		return 0, fmt.Errorf("%w: frame of %d bytes has no security byte", ErrTooShort, len(f))
	}
	if string(f[:frame.PrefixLen]) != frame.Prefix {
		return 0, fmt.Errorf("%w: frame does not start with %q", ErrMalformed, frame.Prefix)
	}
	m := frame.Security(f[frame.OffSecurity])
	switch m {
	case frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD:
		return m, nil
	}
	return m, fmt.Errorf("%w: security byte %#02x", ErrUnknownMode, byte(m))
}
