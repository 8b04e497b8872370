package security

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
)

// Labels of the m2md session key schedule (docs/protocol.md §5).
const (
	transcriptLabel = "m2m/1 transcript"
	c2sLabel        = "m2m/1 client to daemon"
	s2cLabel        = "m2m/1 daemon to client"
	helloLabel      = "m2m/1 hello"
)

// HelloNonceLen is the size of the HELLO and ACCEPT nonces.
const HelloNonceLen = 32

// Transcript binds the frame keys to the exact handshake (docs/protocol.md
// §5.1): SHA-256("m2m/1 transcript" ‖ u32 BE len(hello) ‖ hello ‖ u32 BE
// len(accept) ‖ accept), where hello and accept are the JSON envelope bytes
// exactly as sent, after the kind byte. Control messages are capped at
// 65,536 bytes by the transports, far below the 4 GiB the u32 lengths can
// express.
func Transcript(hello, accept []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(transcriptLabel))
	writeLenPrefixed(h, hello)
	writeLenPrefixed(h, accept)
	var t [32]byte
	h.Sum(t[:0])
	return t
}

func writeLenPrefixed(h hash.Hash, b []byte) {
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(len(b)))
	h.Write(l[:])
	h.Write(b)
}

// DeriveFrameKeys computes the two per-direction frame keys of a session
// (docs/protocol.md §5.1):
//
//	ikm = shared ‖ agentKey
//	prk = HKDF-Extract(salt = transcript, ikm)
//	c2s = HKDF-Expand(prk, "m2m/1 client to daemon", 32)
//	s2c = HKDF-Expand(prk, "m2m/1 daemon to client", 32)
//
// shared is the 32-byte X25519 result; agentKey is the 32-byte agent key
// (Hierarchy.AgentKey) or empty when the daemon runs without an org
// secret. Both sides call it with the same arguments and use c2s for
// client-to-daemon frames and s2c for the other direction.
func DeriveFrameKeys(shared, agentKey []byte, transcript [32]byte) (c2s, s2c Key, err error) {
	if len(shared) != X25519KeyLen {
		return c2s, s2c, fmt.Errorf("%w: shared secret of %d bytes, want %d", ErrInvalidKey, len(shared), X25519KeyLen)
	}
	if len(agentKey) != 0 && len(agentKey) != len(Key{}) {
		return c2s, s2c, fmt.Errorf("%w: agent key of %d bytes, want 0 or 32", ErrInvalidKey, len(agentKey))
	}
	var buf [2 * 32]byte
	ikm := append(append(buf[:0], shared...), agentKey...)
	defer clear(buf[:])
	prk, err := hkdf.Extract(sha256.New, ikm, transcript[:])
	if err != nil {
		return c2s, s2c, fmt.Errorf("%w: %v", ErrDerivation, err)
	}
	defer clear(prk)
	if c2s, err = expand32(prk, c2sLabel); err != nil {
		return Key{}, Key{}, err
	}
	if s2c, err = expand32(prk, s2cLabel); err != nil {
		c2s.Wipe()
		return Key{}, Key{}, err
	}
	return c2s, s2c, nil
}

func expand32(prk []byte, info string) (Key, error) {
	var k Key
	out, err := hkdf.Expand(sha256.New, prk, info, len(k))
	if err != nil {
		return k, fmt.Errorf("%w: %v", ErrDerivation, err)
	}
	copy(k[:], out)
	clear(out)
	return k, nil
}

// HelloProof computes the agent authentication proof a client puts in
// HELLO when the daemon requires one (docs/protocol.md §5.2):
//
//	HMAC-SHA256(agentKey, "m2m/1 hello" ‖ u8 len(org) ‖ org ‖ u8 len(agentID) ‖ agentID
//	                      ‖ public key (32) ‖ nonce (32) ‖ u64 BE timestampMs)
//
// agentKey is Hierarchy.AgentKey(agentID) of the org (32 bytes); org and
// agentID must be valid IDs (which also keeps their lengths within a u8);
// pub is the client's ephemeral X25519 public key and nonce its 32-byte
// HELLO nonce; timestampMs is the HELLO envelope's timestamp.
func HelloProof(agentKey []byte, org, agentID string, pub, nonce []byte, timestampMs uint64) ([32]byte, error) {
	var proof [32]byte
	if len(agentKey) != len(Key{}) {
		return proof, fmt.Errorf("%w: agent key of %d bytes, want 32", ErrInvalidKey, len(agentKey))
	}
	if err := validateIDs("org", org, "agent id", agentID); err != nil {
		return proof, err
	}
	if len(pub) != X25519KeyLen {
		return proof, fmt.Errorf("%w: %d bytes, want %d", ErrInvalidPublicKey, len(pub), X25519KeyLen)
	}
	if len(nonce) != HelloNonceLen {
		return proof, fmt.Errorf("%w: hello nonce of %d bytes, want %d", ErrMalformed, len(nonce), HelloNonceLen)
	}
	m := hmac.New(sha256.New, agentKey)
	m.Write([]byte(helloLabel))
	m.Write([]byte{byte(len(org))})
	m.Write([]byte(org))
	m.Write([]byte{byte(len(agentID))})
	m.Write([]byte(agentID))
	m.Write(pub)
	m.Write(nonce)
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], timestampMs)
	m.Write(ts[:])
	m.Sum(proof[:0])
	return proof, nil
}

// VerifyHelloProof recomputes the HELLO proof and compares it with proof
// in constant time. A mismatch (or a proof that is not 32 bytes) fails
// with ErrVerificationFailed; invalid arguments fail as in HelloProof.
// The timestamp window and the replay cache of §5.2 are the caller's: they
// need a clock and state this function does not have.
func VerifyHelloProof(agentKey []byte, org, agentID string, pub, nonce []byte, timestampMs uint64, proof []byte) error {
	want, err := HelloProof(agentKey, org, agentID, pub, nonce, timestampMs)
	if err != nil {
		return err
	}
	if !hmac.Equal(want[:], proof) {
		return fmt.Errorf("%w: hello proof does not match", ErrVerificationFailed)
	}
	return nil
}
