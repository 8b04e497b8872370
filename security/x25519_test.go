package security

import (
	"encoding/hex"
	"errors"
	"testing"
)

// Wire reference §4.6.
func TestX25519Vector(t *testing.T) {
	a, err := NewKeyPair(seqBytes(0x01, 32))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewKeyPair(seqBytes(0x80, 32))
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := a.PublicKey(), b.PublicKey()
	for _, c := range []struct{ name, got, want string }{
		{"pk_A", hex.EncodeToString(pa[:]), "07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c"},
		{"pk_B", hex.EncodeToString(pb[:]), "493e82fc74464a59268817623d2053c5eb8e2cc4a988b4fee179ec6b010d531d"},
	} {
		if c.got != c.want {
			t.Fatalf("%s %s, want %s", c.name, c.got, c.want)
		}
	}
	sa, err1 := a.SharedSecret(pb[:])
	sb, err2 := b.SharedSecret(pa[:])
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	const shared = "5266019be756db8c25a94f398234f82d8fc04c95ca6375587edaf39ce04cc631"
	if hex.EncodeToString(sa[:]) != shared || sa != sb {
		t.Fatalf("shared %x / %x, want %s", sa[:], sb[:], shared)
	}
}

func TestX25519Generated(t *testing.T) {
	a, err1 := GenerateKeyPair()
	b, err2 := GenerateKeyPair()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if a.PublicKey() == b.PublicKey() {
		t.Fatal("two generated key pairs share a public key")
	}
	pa, pb := a.PublicKey(), b.PublicKey()
	sa, _ := a.SharedSecret(pb[:])
	sb, _ := b.SharedSecret(pa[:])
	if sa != sb || sa.IsZero() {
		t.Fatal("generated pairs disagree on the shared secret")
	}
}

// Low-order points make every private key produce the all-zero "secret",
// which an attacker would then know. RFC 7748 §6.1 / the curve's small
// subgroup: 0, 1, and the order-8 points below.
func TestX25519RejectsLowOrder(t *testing.T) {
	a, _ := GenerateKeyPair()
	for _, p := range []string{
		"0000000000000000000000000000000000000000000000000000000000000000",
		"0100000000000000000000000000000000000000000000000000000000000000",
		"e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
		"5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
	} {
		if _, err := a.SharedSecret(unhex(t, p)); !errors.Is(err, ErrInvalidPublicKey) {
			t.Errorf("low-order point %s: %v, want ErrInvalidPublicKey", p[:8], err)
		}
	}
	for _, n := range []int{0, 31, 33} {
		if _, err := a.SharedSecret(make([]byte, n)); !errors.Is(err, ErrInvalidPublicKey) {
			t.Errorf("%d-byte public key: %v", n, err)
		}
	}
	if _, err := NewKeyPair(make([]byte, 31)); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("31-byte private key: %v", err)
	}
}
