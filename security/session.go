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
	confirmLabel    = "m2m/1 accept confirm"
	acceptLabel     = "m2m/1 accept"
)

// Transcript binds the frame keys to the exact handshake (docs/protocol.md
// §5.1): SHA-256("m2m/1 transcript" ‖ u32 BE len(hello) ‖ hello ‖ u32 BE
// len(accept) ‖ accept), where hello and accept are the JSON envelope bytes
// exactly as sent, after the kind byte, except that the ACCEPT's key
// confirmation is blanked (BlankProof): it is computed from the transcript. Control messages are capped at
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
// and the key of the ACCEPT's confirmation (docs/protocol.md §5.1):
//
//	ikm     = shared ‖ agentKey
//	prk     = HKDF-Extract(salt = transcript, ikm)
//	c2s     = HKDF-Expand(prk, "m2m/1 client to daemon", 32)
//	s2c     = HKDF-Expand(prk, "m2m/1 daemon to client", 32)
//	confirm = HKDF-Expand(prk, "m2m/1 accept confirm", 32)
//
// shared is the 32-byte X25519 result; agentKey is the 32-byte agent key
// (AgentKey) or empty when the daemon runs without an org
// secret. Both sides call it with the same arguments and use c2s for
// client-to-daemon frames and s2c for the other direction; confirm only
// keys AcceptConfirmation.
func DeriveFrameKeys(shared, agentKey []byte, transcript [32]byte) (c2s, s2c, confirm Key, err error) {
	if len(shared) != X25519KeyLen {
		return c2s, s2c, confirm, fmt.Errorf("%w: shared secret of %d bytes, want %d", ErrInvalidKey, len(shared), X25519KeyLen)
	}
	if len(agentKey) != 0 && len(agentKey) != len(Key{}) {
		return c2s, s2c, confirm, fmt.Errorf("%w: agent key of %d bytes, want 0 or 32", ErrInvalidKey, len(agentKey))
	}
	var buf [2 * 32]byte
	ikm := append(append(buf[:0], shared...), agentKey...)
	defer clear(buf[:])
	prk, err := hkdf.Extract(sha256.New, ikm, transcript[:])
	if err != nil {
		return c2s, s2c, confirm, fmt.Errorf("%w: %v", ErrDerivation, err)
	}
	defer clear(prk)
	for _, k := range []struct {
		dst   *Key
		label string
	}{{&c2s, c2sLabel}, {&s2c, s2cLabel}, {&confirm, confirmLabel}} {
		if *k.dst, err = expand32(prk, k.label); err != nil {
			c2s.Wipe()
			s2c.Wipe()
			return Key{}, Key{}, Key{}, err
		}
	}
	return c2s, s2c, confirm, nil
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
//	HMAC-SHA256(agentKey, "m2m/1 hello" ‖ hello0)
//
// agentKey is AgentKey of the org and agent (32 bytes). hello0 is
// the HELLO envelope exactly as sent (the JSON after the kind byte) with the
// proof's value blanked: the Base64 string, quotes included, replaced by
// BlankProof. The proof thus covers every byte of the HELLO (mode, org,
// agent id, public key, nonce, timestamp, models) except itself.
func HelloProof(agentKey, hello0 []byte) ([32]byte, error) {
	var proof [32]byte
	if len(agentKey) != len(Key{}) {
		return proof, fmt.Errorf("%w: agent key of %d bytes, want 32", ErrInvalidKey, len(agentKey))
	}
	m := hmac.New(sha256.New, agentKey)
	m.Write([]byte(helloLabel))
	m.Write(hello0)
	m.Sum(proof[:0])
	return proof, nil
}

// BlankProof is what a 32-byte proof or key confirmation is replaced with
// in the bytes it is computed over: the JSON string of the Base64 of 32
// zero bytes, quotes included. It has the length of every real value, so
// a sender can write the message with it, compute the value, and patch it
// in place.
const BlankProof = `"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="`

// AcceptConfirmation is the key confirmation the daemon puts in ACCEPT
// (docs/protocol.md §5.1), TLS's Finished for m2md:
//
//	HMAC-SHA256(confirmKey, "m2m/1 accept" ‖ transcript)
//
// confirmKey is the third key of DeriveFrameKeys and transcript the hash
// of the HELLO and of the ACCEPT with its confirmation blanked. Only a
// party holding the session's key material (the X25519 secret and, when
// the daemon authenticates agents, the agent key) can compute it, so a
// client that verifies it knows the ACCEPT, and every decision in it,
// comes from the daemon that saw its HELLO as sent.
func AcceptConfirmation(confirmKey Key, transcript [32]byte) [32]byte {
	var out [32]byte
	m := hmac.New(sha256.New, confirmKey[:])
	m.Write([]byte(acceptLabel))
	m.Write(transcript[:])
	m.Sum(out[:0])
	return out
}
