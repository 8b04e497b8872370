package security

import (
	"crypto/hmac"
	"fmt"

	"github.com/m2md/m2md/frame"
)

// Envelopes protect bytes that are not an M2M v1 frame (a TokenNative
// frame, docs/protocol.md §4.2) with a session's frame key: a clear head
// (written by the caller, e.g. marker, mode, sequence, channel), then the
// body, bound to associated data the receiver already has (the DATA
// header):
//
//	hmac: head ‖ body ‖ HMAC-SHA256(key, aad ‖ head ‖ body)
//	aead: head ‖ nonce (12) ‖ ChaCha20-Poly1305(key, nonce, body, aad ‖ head) (ciphertext ‖ tag 16)
//
// The nonce is the key's next counter nonce, as for frames.

// maxEnvelopeAAD bounds aad ‖ head, so that the AEAD's associated data is
// assembled on the stack.
const maxEnvelopeAAD = 256

// SealEnvelope appends head and the protected body to dst. dst must not
// overlap head or body. Mode none is an error: there is nothing to seal
// with.
func (k *FrameKey) SealEnvelope(dst, aad, head, body []byte) ([]byte, error) {
	switch k.mode {
	case frame.SecurityHMAC:
		start := len(dst)
		dst = append(dst, head...)
		dst = append(dst, body...)
		k.mu.Lock()
		k.mac.Reset()
		k.mac.Write(aad)
		k.mac.Write(dst[start:])
		dst = k.mac.Sum(dst)
		k.mu.Unlock()
		return dst, nil
	case frame.SecurityAEAD:
		var buf [maxEnvelopeAAD]byte
		if len(aad)+len(head) > len(buf) {
			return nil, fmt.Errorf("%w: %d bytes of associated data, at most %d", ErrMalformed, len(aad)+len(head), len(buf))
		}
		ad := append(append(buf[:0], aad...), head...)
		dst = append(dst, head...)
		var nonce [nonceLen]byte
		if err := k.readNonce(nonce[:]); err != nil {
			return nil, err
		}
		dst = append(dst, nonce[:]...)
		return k.aead.Seal(dst, nonce[:], body, ad), nil
	}
	return nil, fmt.Errorf("%w: no key to seal an envelope in mode %s", ErrWrongMode, k.mode)
}

// OpenEnvelope verifies (hmac) or decrypts (aead) env, whose first headLen
// bytes are the clear head, with aad, and returns the body. For hmac the
// body aliases env; for aead it is decrypted in place. A failure is
// ErrVerificationFailed (or ErrTooShort).
func (k *FrameKey) OpenEnvelope(aad, env []byte, headLen int) ([]byte, error) {
	switch k.mode {
	case frame.SecurityHMAC:
		if len(env) < headLen+hmacTagLen {
			return nil, fmt.Errorf("%w: hmac envelope of %d bytes", ErrTooShort, len(env))
		}
		m := len(env) - hmacTagLen
		k.mu.Lock()
		k.mac.Reset()
		k.mac.Write(aad)
		k.mac.Write(env[:m])
		ok := hmac.Equal(k.mac.Sum(k.sum[:0]), env[m:])
		k.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("%w: envelope hmac tag does not match", ErrVerificationFailed)
		}
		return env[headLen:m], nil
	case frame.SecurityAEAD:
		if len(env) < headLen+aeadExtra {
			return nil, fmt.Errorf("%w: aead envelope of %d bytes", ErrTooShort, len(env))
		}
		var buf [maxEnvelopeAAD]byte
		if len(aad)+headLen > len(buf) {
			return nil, fmt.Errorf("%w: %d bytes of associated data, at most %d", ErrMalformed, len(aad)+headLen, len(buf))
		}
		ad := append(append(buf[:0], aad...), env[:headLen]...)
		nonce := env[headLen : headLen+nonceLen]
		ct := env[headLen+nonceLen:]
		pt, err := k.aead.Open(ct[:0], nonce, ct, ad)
		if err != nil {
			return nil, fmt.Errorf("%w: envelope does not decrypt", ErrVerificationFailed)
		}
		return pt, nil
	}
	return nil, fmt.Errorf("%w: no key to open an envelope in mode %s", ErrWrongMode, k.mode)
}
