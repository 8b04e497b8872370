package negotiate

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
)

// The handshake cryptography of docs/protocol.md §5, with the standard
// library only. The security package implements the same derivations for
// general use; these copies keep negotiate free of a dependency on it while
// both are written, and the test vectors pin them to the same results.

// Labels, exactly as they enter the hashes (ASCII, no terminator).
const (
	labelTranscript = "m2m/1 transcript"
	labelC2S        = "m2m/1 client to daemon"
	labelS2C        = "m2m/1 daemon to client"
	labelHello      = "m2m/1 hello"
)

// ephemeralKey returns a fresh X25519 key. With r == nil it uses the
// system's secure source; a non-nil r (tests and the documented example)
// supplies the 32 scalar bytes.
func ephemeralKey(r io.Reader) (*ecdh.PrivateKey, error) {
	if r == nil {
		return ecdh.X25519().GenerateKey(rand.Reader)
	}
	var seed [32]byte
	defer clear(seed[:])
	if _, err := io.ReadFull(r, seed[:]); err != nil {
		return nil, err
	}
	return ecdh.X25519().NewPrivateKey(seed[:])
}

func randomBytes(r io.Reader, n int) ([]byte, error) {
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// sharedSecret computes X25519(priv, peer). It fails on a public key that
// yields the all-zero shared secret (a low-order point).
func sharedSecret(priv *ecdh.PrivateKey, peerPublic []byte) ([]byte, error) {
	pub, err := ecdh.X25519().NewPublicKey(peerPublic)
	if err != nil {
		return nil, err
	}
	return priv.ECDH(pub)
}

// deriveAgentKey is HKDF-SHA256(ikm = master, salt = none, info =
// "m2m/v1/{org}/{agent}", L = 32) (wire reference §4.4).
func deriveAgentKey(master []byte, org, agent string) ([]byte, error) {
	return hkdf.Key(sha256.New, master, nil, "m2m/v1/"+org+"/"+agent, 32)
}

// helloProof is HMAC-SHA256(agent_key, "m2m/1 hello" ‖ u8 len(org) ‖ org ‖
// u8 len(agent) ‖ agent ‖ public key ‖ nonce ‖ u64 BE timestamp). org and
// agent are at most 128 bytes (validated by the callers).
func helloProof(agentKey []byte, org, agent string, publicKey, nonce []byte, timestamp uint64) [ProofSize]byte {
	m := hmac.New(sha256.New, agentKey)
	m.Write([]byte(labelHello))
	m.Write([]byte{byte(len(org))})
	m.Write([]byte(org))
	m.Write([]byte{byte(len(agent))})
	m.Write([]byte(agent))
	m.Write(publicKey)
	m.Write(nonce)
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], timestamp)
	m.Write(ts[:])
	var out [ProofSize]byte
	m.Sum(out[:0])
	return out
}

// transcriptHash is SHA-256("m2m/1 transcript" ‖ u32 BE len(H) ‖ H ‖ u32 BE
// len(A) ‖ A) over the HELLO and ACCEPT envelopes as sent (kind byte excluded).
func transcriptHash(hello, accept []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(labelTranscript))
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(hello)))
	h.Write(n[:])
	h.Write(hello)
	binary.BigEndian.PutUint32(n[:], uint32(len(accept)))
	h.Write(n[:])
	h.Write(accept)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// frameKeys derives the two directional frame keys: prk = HKDF-Extract(salt
// = transcript, ikm = shared ‖ agentKey), then HKDF-Expand with the two
// direction labels. agentKey is empty when the session is not authenticated.
func frameKeys(shared, agentKey []byte, transcript [32]byte) (c2s, s2c [FrameKeySize]byte, err error) {
	ikm := make([]byte, 0, len(shared)+len(agentKey))
	ikm = append(append(ikm, shared...), agentKey...)
	defer clear(ikm)
	prk, err := hkdf.Extract(sha256.New, ikm, transcript[:])
	if err != nil {
		return c2s, s2c, err
	}
	defer clear(prk)
	for _, d := range []struct {
		label string
		dst   *[FrameKeySize]byte
	}{{labelC2S, &c2s}, {labelS2C, &s2c}} {
		k, err := hkdf.Expand(sha256.New, prk, d.label, FrameKeySize)
		if err != nil {
			return c2s, s2c, fmt.Errorf("negotiate: frame key: %w", err)
		}
		copy(d.dst[:], k)
		clear(k)
	}
	return c2s, s2c, nil
}
