package security

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
)

// MaxDeriveLen is the most output HKDF-SHA256 can give (255 × 32 bytes).
const MaxDeriveLen = 255 * sha256.Size

// Derive is the primitive under every key of the hierarchy: HKDF-SHA256
// (RFC 5869) with no salt (RFC 5869 then uses 32 zero bytes; an empty salt
// is the same), IKM ikm, info as given, length bytes of output (1 to
// MaxDeriveLen). The caller owns the result and should Wipe it.
func Derive(ikm []byte, info string, length int) (Secret, error) {
	if len(ikm) == 0 {
		return nil, fmt.Errorf("%w: empty input key material", ErrInvalidKey)
	}
	out, err := hkdfSHA256(ikm, nil, info, length)
	return Secret(out), err
}

// hkdfSHA256 is Derive with a salt, for the RFC 5869 test vectors.
func hkdfSHA256(ikm, salt []byte, info string, length int) ([]byte, error) {
	if length < 1 || length > MaxDeriveLen {
		return nil, fmt.Errorf("%w: hkdf output of %d bytes, must be 1 to %d", ErrDerivation, length, MaxDeriveLen)
	}
	out, err := hkdf.Key(sha256.New, ikm, salt, info, length)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDerivation, err)
	}
	return out, nil
}

// derive32 derives one Key and wipes the intermediate slice.
func derive32(ikm []byte, info string) (Key, error) {
	var k Key
	if len(ikm) == 0 {
		return k, fmt.Errorf("%w: empty input key material", ErrInvalidKey)
	}
	out, err := hkdfSHA256(ikm, nil, info, len(k))
	if err != nil {
		return k, err
	}
	copy(k[:], out)
	clear(out)
	return k, nil
}

// ExchangeSessionKey derives a session key from a raw X25519 shared secret
// with info = context (the Rust KeyExchange::derive_session_key; contexts
// used there: "m2m-session-v1", "cross-org-session-v1").
func ExchangeSessionKey(shared []byte, context string) (Key, error) {
	if len(shared) != 32 {
		return Key{}, fmt.Errorf("%w: shared secret of %d bytes, want 32", ErrInvalidKey, len(shared))
	}
	if context == "" {
		return Key{}, fmt.Errorf("%w: empty derivation context", ErrMalformed)
	}
	return derive32(shared, context)
}
