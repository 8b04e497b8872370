package security

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestRFC5869(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ikm, salt, info []byte
		length          int
		okm             string
	}{
		{"A.1", repeat(0x0b, 22), seqBytes(0x00, 13), seqBytes(0xf0, 10), 42,
			"3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"},
		{"A.2", seqBytes(0x00, 80), seqBytes(0x60, 80), seqBytes(0xb0, 80), 82,
			"b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87"},
		{"A.3", repeat(0x0b, 22), nil, nil, 42,
			"8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"},
	} {
		out, err := hkdfSHA256(tc.ikm, tc.salt, string(tc.info), tc.length)
		if err != nil || hex.EncodeToString(out) != tc.okm {
			t.Errorf("%s: %x, %v\nwant %s", tc.name, out, err, tc.okm)
		}
	}
}

func TestDeriveLengthLimit(t *testing.T) {
	if out, err := hkdfSHA256(repeat(1, 32), nil, "x", maxDeriveLen); err != nil || len(out) != 8160 {
		t.Fatalf("8160 bytes: %d, %v", len(out), err)
	}
	if out, err := hkdfSHA256(repeat(1, 32), nil, "x", 1); err != nil || len(out) != 1 {
		t.Fatalf("1 byte: %d, %v", len(out), err)
	}
	for _, n := range []int{maxDeriveLen + 1, 0, -1} {
		if _, err := hkdfSHA256(repeat(1, 32), nil, "x", n); !errors.Is(err, ErrDerivation) {
			t.Errorf("%d bytes: %v, want ErrDerivation", n, err)
		}
	}
	if _, err := derive32(nil, "x"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("empty ikm: %v, want ErrInvalidKey", err)
	}
}

// Wire reference §4.4, master 00..1f, org "test-org".
func TestAgentKeyVector(t *testing.T) {
	k, err := AgentKey(seqBytes(0, 32), "test-org", "agent-001")
	if got, want := hex.EncodeToString(k[:]), "c87f687fae1cf5991cd0cc64e113ec09750b0d1c41338a41cd8ad90bdd60dba1"; err != nil || got != want {
		t.Fatalf("agent key %s, %v; want %s", got, err, want)
	}
}

func TestValidateID(t *testing.T) {
	for _, id := range []string{"agent-001", "my_agent_123", "acme-corp", "a", strings.Repeat("a", 128), "sess_AbC123", "A-Z_09"} {
		if err := ValidateID(id); err != nil {
			t.Errorf("%q refused: %v", id, err)
		}
	}
	for _, tc := range []struct {
		id   string
		want error
	}{
		{"", ErrIDEmpty},
		{"agent 001", ErrIDInvalidChar},
		{"agent@001", ErrIDInvalidChar},
		{"agent/001", ErrIDInvalidChar},
		{"a:b", ErrIDInvalidChar},
		{"a|b", ErrIDInvalidChar},
		{"agent.1", ErrIDInvalidChar},
		{"agent\x00", ErrIDInvalidChar},
		{"agént", ErrIDInvalidChar},
		{strings.Repeat("a", 129), ErrIDTooLong},
	} {
		err := ValidateID(tc.id)
		if !errors.Is(err, ErrInvalidID) || !errors.Is(err, tc.want) {
			t.Errorf("%q: %v, want ErrInvalidID and %v", tc.id, err, tc.want)
		}
	}
}

// AgentKey validates the ids that become parts of its path, and the
// master secret's length.
func TestAgentKeyValidates(t *testing.T) {
	for name, err := range map[string]error{
		"org":   second(AgentKey(repeat(1, 32), "bad/org", "a")),
		"agent": second(AgentKey(repeat(1, 32), "org", "a/b")),
		"empty": second(AgentKey(repeat(1, 32), "org", "")),
	} {
		if !errors.Is(err, ErrInvalidID) {
			t.Errorf("%s: %v, want ErrInvalidID", name, err)
		}
	}
	if _, err := AgentKey(repeat(1, 15), "org", "a"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("15-byte master: %v", err)
	}
	if _, err := AgentKey(repeat(1, MinMasterLen), "org", "a"); err != nil {
		t.Errorf("%d-byte master: %v", MinMasterLen, err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestWipe(t *testing.T) {
	k := Key(repeat(9, 32))
	k.Wipe()
	if !k.IsZero() {
		t.Error("Key.Wipe left bytes")
	}
	s := Secret(repeat(9, 40))
	s.Wipe()
	if string(s) != string(make([]byte, 40)) {
		t.Error("Secret.Wipe left bytes")
	}
}
