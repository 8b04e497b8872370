package negotiate

import (
	"crypto/rand"
	"fmt"
	"io"

	"github.com/m2md/m2md/security"
)

// The handshake cryptography of docs/protocol.md §5: ephemeral X25519 keys
// here, the derivations in the security package.

// ephemeralKey returns a fresh X25519 key pair. With r == nil it uses the
// system's secure source; a non-nil r (tests and the documented example)
// supplies the 32 scalar bytes.
func ephemeralKey(r io.Reader) (*security.KeyPair, error) {
	if r == nil {
		return security.GenerateKeyPair()
	}
	var seed [security.X25519KeyLen]byte
	defer clear(seed[:])
	if _, err := io.ReadFull(r, seed[:]); err != nil {
		return nil, err
	}
	return security.NewKeyPair(seed[:])
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

// deriveAgentKey is security.AgentKey as a slice the caller clears.
func deriveAgentKey(master []byte, org, agent string) ([]byte, error) {
	k, err := security.AgentKey(master, org, agent)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), k[:]...)
	k.Wipe()
	return out, nil
}

// transcriptHash and sessionKeys are docs/protocol.md §5 as the security
// package implements it; the wrappers keep this package's call sites and
// types.
func transcriptHash(hello, accept0 []byte) [32]byte { return security.Transcript(hello, accept0) }

// sessionKeys derives the frame keys and the ACCEPT's key confirmation.
func sessionKeys(shared, agentKey []byte, transcript [32]byte) (c2s, s2c security.Key, confirm [confirmSize]byte, err error) {
	c2s, s2c, ck, err := security.DeriveFrameKeys(shared, agentKey, transcript)
	if err != nil {
		return c2s, s2c, confirm, fmt.Errorf("negotiate: frame keys: %w", err)
	}
	confirm = security.AcceptConfirmation(ck, transcript)
	ck.Wipe()
	return c2s, s2c, confirm, nil
}
