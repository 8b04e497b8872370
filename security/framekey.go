package security

import (
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/m2md/m2md/frame"
)

// Key length rules of the wire reference §4.1/§4.2.
const (
	// MinHMACKeyLen is the shortest HMAC key accepted; the whole key is used.
	MinHMACKeyLen = 16
	// AEADKeyLen is the ChaCha20-Poly1305 key size; longer key material is
	// accepted and its first AEADKeyLen bytes are used.
	AEADKeyLen = chacha20poly1305.KeySize
)

// FrameKey protects and opens M2M v1 frames in one security mode with one
// key: one FrameKey per session and direction. It holds the prepared
// primitive (ChaCha20-Poly1305 cipher, or HMAC-SHA256 state) so that per
// frame nothing is allocated and nothing is re-derived.
//
// A FrameKey refuses frames of any other mode (ErrWrongMode): a frame that
// arrives in mode none on an AEAD session is an attack or a bug, never
// something to accept. It is safe for concurrent use; in HMAC mode frames
// take turns on the key's MAC state (a mutex held for the MAC computation
// only), in AEAD mode they run in parallel.
//
// The FrameKey keeps its own copies of the key (inside the cipher and the
// HMAC pads); the caller may wipe its key slice after NewFrameKey returns.
// Those internal copies live in crypto/hmac and x/crypto structures that Go
// code cannot clear; they become garbage with the FrameKey.
type FrameKey struct {
	mode frame.Security

	aead cipher.AEAD // AEAD mode

	mu  sync.Mutex // guards mac and sum (HMAC mode)
	mac hash.Hash
	sum [sha256.Size]byte

	// AEAD nonces are a 4-byte random prefix, drawn when the key is made,
	// then a 64-bit big-endian counter (WireGuard's and TLS 1.3's counter
	// nonces): no two frames under one FrameKey share a nonce, however
	// many it seals, where random 96-bit nonces would only make a repeat
	// unlikely (risk ~n²/2^97 after n frames). The prefix separates two
	// FrameKeys made from the same key. Receivers read the nonce from the
	// frame, so the wire form is unchanged.
	noncePrefix [4]byte
	nonceCount  atomic.Uint64

	// rand, when set, supplies whole nonces instead (tests reproducing the
	// wire reference's fixed-nonce vector); there is deliberately no
	// exported way to choose a nonce.
	rand io.Reader
}

// NewFrameKey prepares key for mode. Mode none takes no key (key is
// ignored); HMAC needs at least MinHMACKeyLen bytes and uses all of them;
// AEAD needs at least AEADKeyLen bytes and uses the first AEADKeyLen.
func NewFrameKey(mode frame.Security, key []byte) (*FrameKey, error) {
	k := &FrameKey{mode: mode}
	switch mode {
	case frame.SecurityNone:
	case frame.SecurityHMAC:
		if len(key) < MinHMACKeyLen {
			return nil, fmt.Errorf("%w: hmac key of %d bytes, need at least %d",
				ErrInvalidKey, len(key), MinHMACKeyLen)
		}
		k.mac = hmac.New(sha256.New, key)
	case frame.SecurityAEAD:
		if len(key) < AEADKeyLen {
			return nil, fmt.Errorf("%w: aead key of %d bytes, need at least %d",
				ErrInvalidKey, len(key), AEADKeyLen)
		}
		a, err := chacha20poly1305.New(key[:AEADKeyLen])
		if err != nil { // only in FIPS-140-only mode, which forbids ChaCha20
			return nil, fmt.Errorf("%w: %v", ErrInvalidKey, err)
		}
		k.aead = a
		rand.Read(k.noncePrefix[:]) // never fails since Go 1.24: it crashes the program instead
	default:
		return nil, fmt.Errorf("%w: security byte %#02x", ErrUnknownMode, byte(mode))
	}
	return k, nil
}

// Mode returns the security mode the key protects and accepts.
func (k *FrameKey) Mode() frame.Security { return k.mode }

// String names the mode only; the key never appears in output.
func (k *FrameKey) String() string {
	return "security.FrameKey(" + k.mode.String() + ", " + redacted + ")"
}

// Format keeps fmt from printing the struct's fields (the cipher holds the
// key) whatever the verb.
func (k *FrameKey) Format(f fmt.State, _ rune) { io.WriteString(f, k.String()) }

// Protect appends the protected form of plain to dst and returns the
// extended slice. plain must be a complete plain frame (what the frame
// encoder produces: security byte 00, payload_len matching the payload
// exactly). In mode none the result is a copy of plain.
//
// To work in place pass dst = plain[:0] with HMACOverhead or AEADOverhead
// bytes of spare capacity: nothing is then copied or allocated (AEAD moves
// the payload section 12 bytes to make room for the nonce). Any other dst
// must not overlap plain. plain's contents are only changed when dst
// aliases it. On error the returned slice is nil and dst's spare capacity
// holds undefined bytes.
func (k *FrameKey) Protect(dst, plain []byte) ([]byte, error) {
	end, err := plainLayout(plain)
	if err != nil {
		return nil, err
	}
	if m := frame.Security(plain[frame.OffSecurity]); m != frame.SecurityNone {
		return nil, fmt.Errorf("%w: frame already has security byte %#02x, only a plain frame (00) can be protected",
			ErrWrongMode, byte(m))
	}
	switch k.mode {
	case frame.SecurityHMAC:
		return k.protectHMAC(dst, plain)
	case frame.SecurityAEAD:
		return k.protectAEAD(dst, plain, end)
	}
	return copyFrame(dst, plain)
}

// Open verifies or decrypts a frame protected in k's mode and appends the
// plain frame (security byte 00, tag removed, payload_len ‖ crc32 ‖ payload
// restored) to dst, ready for the frame decoder. A frame of another mode,
// including an unknown security byte, fails with ErrWrongMode.
//
// dst = protected[:0] works in place without copying or allocating. Any
// other dst must not overlap protected. On error the returned slice is
// nil; if dst aliased protected, protected's bytes are then undefined
// (AEAD clears the ciphertext on failure).
func (k *FrameKey) Open(dst, protected []byte) ([]byte, error) {
	m, err := Mode(protected)
	if errors.Is(err, ErrUnknownMode) {
		return nil, fmt.Errorf("%w for key mode %s: %w", ErrWrongMode, k.mode, err)
	}
	if err != nil {
		return nil, err
	}
	if m != k.mode {
		return nil, fmt.Errorf("%w: frame in mode %s, key for mode %s", ErrWrongMode, m, k.mode)
	}
	switch m {
	case frame.SecurityHMAC:
		return k.openHMAC(dst, protected)
	case frame.SecurityAEAD:
		return k.openAEAD(dst, protected)
	}
	if _, err := plainLayout(protected); err != nil {
		return nil, err
	}
	return copyFrame(dst, protected)
}

// copyFrame appends f to dst, skipping the copy when dst = f[:0].
func copyFrame(dst, f []byte) ([]byte, error) {
	ret, out := sliceForAppend(dst, len(f))
	if inexactOverlap(out, f) {
		return nil, ErrBufferOverlap
	}
	if !sameStart(out, f) {
		copy(out, f)
	}
	return ret, nil
}

// protectHMAC: security byte 01, tag = HMAC(key, frame[7:]) appended (§4.1).
func (k *FrameKey) protectHMAC(dst, plain []byte) ([]byte, error) {
	n := len(plain)
	ret, out := sliceForAppend(dst, n+hmacTagLen)
	if inexactOverlap(out, plain) {
		return nil, ErrBufferOverlap
	}
	if !sameStart(out, plain) {
		copy(out, plain)
	}
	out[frame.OffSecurity] = byte(frame.SecurityHMAC)
	k.mu.Lock()
	k.mac.Reset()
	k.mac.Write(out[frame.PrefixLen:n])
	k.mac.Sum(out[n:n]) // writes the tag into out's last 32 bytes
	k.mu.Unlock()
	return ret, nil
}

// openHMAC verifies the tag in constant time before anything is written,
// then strips it and resets the security byte.
func (k *FrameKey) openHMAC(dst, p []byte) ([]byte, error) {
	n := len(p)
	if n < minHMACSize {
		return nil, fmt.Errorf("%w: hmac frame of %d bytes, need at least %d", ErrTooShort, n, minHMACSize)
	}
	m := n - hmacTagLen
	k.mu.Lock()
	k.mac.Reset()
	k.mac.Write(p[frame.PrefixLen:m])
	ok := hmac.Equal(k.mac.Sum(k.sum[:0]), p[m:])
	k.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: hmac tag does not match", ErrVerificationFailed)
	}
	if _, err := plainLayout(p[:m]); err != nil {
		return nil, err
	}
	ret, out := sliceForAppend(dst, m)
	if inexactOverlap(out, p) {
		return nil, ErrBufferOverlap
	}
	if !sameStart(out, p) {
		copy(out, p[:m])
	}
	out[frame.OffSecurity] = byte(frame.SecurityNone)
	return ret, nil
}

// protectAEAD: security byte 02, AAD = frame[7:end], plaintext =
// payload_len ‖ crc32 ‖ payload, frame = prefix ‖ headers ‖ nonce ‖ ct ‖ tag
// (§4.2).
func (k *FrameKey) protectAEAD(dst, plain []byte, end int) ([]byte, error) {
	n := len(plain)
	ret, out := sliceForAppend(dst, n+aeadExtra)
	if inexactOverlap(out, plain) {
		return nil, ErrBufferOverlap
	}
	body := n - end // payload_len ‖ crc32 ‖ payload
	sealAt := end + nonceLen
	var pt []byte
	if sameStart(out, plain) {
		copy(out[sealAt:sealAt+body], out[end:n]) // make room for the nonce
		pt = out[sealAt : sealAt+body]
	} else {
		copy(out[:end], plain[:end])
		pt = plain[end:]
	}
	out[frame.OffSecurity] = byte(frame.SecurityAEAD) // before sealing: it is AAD
	nonce := out[end:sealAt]
	if err := k.readNonce(nonce); err != nil {
		return nil, err
	}
	k.aead.Seal(out[sealAt:sealAt], nonce, pt, out[frame.PrefixLen:end])
	return ret, nil
}

func (k *FrameKey) readNonce(nonce []byte) error {
	if k.rand == nil {
		n := k.nonceCount.Add(1)
		if n == 0 { // 2^64 frames: unreachable, but never wrap into reuse
			return ErrNonceExhausted
		}
		copy(nonce, k.noncePrefix[:])
		binary.BigEndian.PutUint64(nonce[4:], n)
		return nil
	}
	if _, err := io.ReadFull(k.rand, nonce); err != nil {
		return fmt.Errorf("%w: %v", ErrRandom, err)
	}
	return nil
}

// openAEAD decrypts and rebuilds the plain frame. In place it decrypts the
// ciphertext where it lies (the only overlap ChaCha20-Poly1305 allows) and
// then moves the plaintext 12 bytes down over the nonce.
func (k *FrameKey) openAEAD(dst, p []byte) ([]byte, error) {
	end, err := headerEnd(p)
	if err != nil {
		return nil, err
	}
	n := len(p)
	if n-end < aeadExtra+lengthsLen {
		return nil, fmt.Errorf("%w: %d bytes after the headers, an aead frame needs at least %d",
			ErrTooShort, n-end, aeadExtra+lengthsLen)
	}
	ret, out := sliceForAppend(dst, n-aeadExtra)
	if inexactOverlap(out, p) {
		return nil, ErrBufferOverlap
	}
	nonce := p[end : end+nonceLen]
	ct := p[end+nonceLen:]
	aad := p[frame.PrefixLen:end]
	if sameStart(out, p) {
		pt, err := k.aead.Open(ct[:0], nonce, ct, aad)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrDecryptionFailed, err)
		}
		copy(out[end:], pt)
	} else {
		copy(out[:end], p[:end])
		if _, err := k.aead.Open(out[end:end], nonce, ct, aad); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrDecryptionFailed, err)
		}
	}
	out[frame.OffSecurity] = byte(frame.SecurityNone)
	if pl := binary.LittleEndian.Uint32(out[end:]); uint64(pl) != uint64(len(out)-end-lengthsLen) {
		// Authentic but inconsistent: the sender's bug. Do not leave the
		// decrypted bytes behind in a buffer the caller will discard.
		clear(out[end:])
		return nil, fmt.Errorf("%w: decrypted payload_len %d but %d payload bytes follow",
			ErrMalformed, pl, len(out)-end-lengthsLen)
	}
	return ret, nil
}
