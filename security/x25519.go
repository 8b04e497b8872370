package security

import (
	"crypto/ecdh"
	"crypto/rand"
	"fmt"
	"io"
)

// X25519KeyLen is the size of X25519 private keys, public keys and shared
// secrets.
const X25519KeyLen = 32

// KeyPair is an X25519 key pair (RFC 7748; wire reference §4.6), built on
// crypto/ecdh, which is about twice as fast per handshake as x/crypto's
// curve25519 because it does not re-derive the public key on every call.
// m2md generates one per session (docs/protocol.md §5.1).
//
// The private scalar lives inside crypto/ecdh, which offers no way to
// clear it; drop the KeyPair as soon as the shared secret is computed.
type KeyPair struct {
	priv *ecdh.PrivateKey
	pub  [X25519KeyLen]byte
}

// GenerateKeyPair makes a fresh key pair from crypto/rand.
func GenerateKeyPair() (*KeyPair, error) {
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("%w: generating x25519 key: %v", ErrRandom, err)
	}
	return newKeyPair(priv), nil
}

// NewKeyPair uses private (32 bytes, clamped as RFC 7748 says) as the
// private key: for static keys and test vectors. The slice is copied; the
// caller may wipe it.
func NewKeyPair(private []byte) (*KeyPair, error) {
	if len(private) != X25519KeyLen {
		return nil, fmt.Errorf("%w: x25519 private key of %d bytes, want %d",
			ErrInvalidKey, len(private), X25519KeyLen)
	}
	priv, err := ecdh.X25519().NewPrivateKey(private)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	return newKeyPair(priv), nil
}

func newKeyPair(priv *ecdh.PrivateKey) *KeyPair {
	kp := &KeyPair{priv: priv}
	copy(kp.pub[:], priv.PublicKey().Bytes())
	return kp
}

// PublicKey returns the public key, to send to the peer.
func (kp *KeyPair) PublicKey() [X25519KeyLen]byte { return kp.pub }

// SharedSecret computes X25519(private, peerPublic). A peer key of the
// wrong length, or one that makes the result all zeros (a low-order
// point, which would make the "secret" public), fails with
// ErrInvalidPublicKey. The Rust reference accepts the all-zero result;
// refusing it only ever rejects a broken or malicious peer.
func (kp *KeyPair) SharedSecret(peerPublic []byte) (Key, error) {
	var k Key
	if len(peerPublic) != X25519KeyLen {
		return k, fmt.Errorf("%w: %d bytes, want %d", ErrInvalidPublicKey, len(peerPublic), X25519KeyLen)
	}
	pub, err := ecdh.X25519().NewPublicKey(peerPublic)
	if err != nil {
		return k, fmt.Errorf("%w: %v", ErrInvalidPublicKey, err)
	}
	s, err := kp.priv.ECDH(pub)
	if err != nil { // crypto/ecdh refuses the all-zero output
		return k, fmt.Errorf("%w: low-order point (all-zero shared secret)", ErrInvalidPublicKey)
	}
	copy(k[:], s)
	clear(s)
	return k, nil
}

func (kp *KeyPair) String() string {
	return fmt.Sprintf("security.KeyPair(public %x, private %s)", kp.pub, redacted)
}
func (kp *KeyPair) Format(f fmt.State, _ rune) { io.WriteString(f, kp.String()) }
