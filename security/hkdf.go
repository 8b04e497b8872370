package security

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
)

// kdfVersion starts every key path (Rust M2M_KDF_VERSION).
const kdfVersion = "m2m/v1"

// MinMasterLen is the shortest org master secret AgentKey accepts. The
// Rust KeyHierarchy accepts any non-empty secret; m2md refuses secrets too
// short to be keys.
const MinMasterLen = 16

// maxDeriveLen is the most output HKDF-SHA256 can give (255 × 32 bytes).
const maxDeriveLen = 255 * sha256.Size

// AgentKey derives an agent's key from its org's master secret (wire
// reference §4.4, the Rust KeyHierarchy's agent key): HKDF-SHA256 with the
// master secret as IKM, no salt, info "m2m/v1/{org}/{agent}", 32 bytes. It
// is the agent_key of the HELLO proof (docs/protocol.md §5.2). master needs
// at least MinMasterLen bytes; org and agent must be valid IDs. The caller
// should Wipe the result.
//
// The Rust reference derives more keys from the same secret (org, purpose,
// shared and session keys, a keyring); the m2md protocol uses none of them,
// so this package does not carry them.
func AgentKey(master []byte, org, agent string) (Key, error) {
	if len(master) < MinMasterLen {
		return Key{}, fmt.Errorf("%w: master secret of %d bytes, need at least %d",
			ErrInvalidKey, len(master), MinMasterLen)
	}
	if err := validateIDs("org", org, "agent", agent); err != nil {
		return Key{}, err
	}
	return derive32(master, kdfVersion+"/"+org+"/"+agent)
}

// DeriveKey derives one 32-byte key from ikm (a shared secret, an org
// master secret) for the purpose named by info: HKDF-SHA256 without salt.
// info must name the purpose and everything the key is bound to, so that
// no two purposes ever derive the same key: the protocol's own paths start
// with "m2m/v1/", so others must not. The caller should Wipe the result.
func DeriveKey(ikm []byte, info string) (Key, error) { return derive32(ikm, info) }

// hkdfSHA256 is RFC 5869 HKDF-SHA256, length 1 to maxDeriveLen bytes.
func hkdfSHA256(ikm, salt []byte, info string, length int) ([]byte, error) {
	if length < 1 || length > maxDeriveLen {
		return nil, fmt.Errorf("%w: hkdf output of %d bytes, must be 1 to %d", ErrDerivation, length, maxDeriveLen)
	}
	out, err := hkdf.Key(sha256.New, ikm, salt, info, length)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDerivation, err)
	}
	return out, nil
}

// derive32 derives one Key without salt and wipes the intermediate slice.
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
