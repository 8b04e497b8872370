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
	// A.3 has no salt and no info: exactly what Derive does.
	out, err := Derive(repeat(0x0b, 22), "", 42)
	if err != nil || !strings.HasPrefix(hex.EncodeToString(out), "8da4e775") {
		t.Errorf("Derive(A.3): %x, %v", []byte(out), err)
	}
}

func TestDeriveLengthLimit(t *testing.T) {
	if out, err := Derive(repeat(1, 32), "x", MaxDeriveLen); err != nil || len(out) != 8160 {
		t.Fatalf("8160 bytes: %d, %v", len(out), err)
	}
	for _, n := range []int{MaxDeriveLen + 1, 0, -1} {
		if _, err := Derive(repeat(1, 32), "x", n); !errors.Is(err, ErrDerivation) {
			t.Errorf("%d bytes: %v, want ErrDerivation", n, err)
		}
	}
	if _, err := Derive(nil, "x", 32); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("empty ikm: %v, want ErrInvalidKey", err)
	}
}

// Wire reference §4.4, master 00..1f, org "test-org".
func TestHierarchyVectors(t *testing.T) {
	h, err := NewHierarchy(seqBytes(0, 32), "test-org")
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := h.AgentContext("agent-001")
	if err != nil {
		t.Fatal(err)
	}
	alice, err := h.AgentContext("alice")
	if err != nil {
		t.Fatal(err)
	}
	var kr Keyring
	if err := kr.Add("master", seqBytes(0, 32)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    func() (Key, error)
		want string
	}{
		{"agent agent-001", func() (Key, error) { return h.AgentKey("agent-001") },
			"c87f687fae1cf5991cd0cc64e113ec09750b0d1c41338a41cd8ad90bdd60dba1"},
		{"org key", h.OrgKey,
			"2c57ed50feb743f2c695b7dd9e35e2151b75f2d5b43d812fe3c22814dd78c1ea"},
		{"master session alice/bob", func() (Key, error) { return h.MasterSessionKey("alice", "bob", "sess-001") },
			"566465b44cf9b0045ca4dbd60f2330462d332893aeb5ad89a0baf1ab52859375"},
		{"master session bob/alice", func() (Key, error) { return h.MasterSessionKey("bob", "alice", "sess-001") },
			"566465b44cf9b0045ca4dbd60f2330462d332893aeb5ad89a0baf1ab52859375"},
		{"org-key session alice/bob", func() (Key, error) { return alice.OrgSessionKey("bob", "sess-001") },
			"aebfa29c12287cea40515c0dd13f4238627126487f238826cdcc151149c7abf1"},
		{"shared", h.SharedKey,
			"3d5923e5674e21bf372b4c96ba88a89a6116ade50739d0f478016a22b0faa7e2"},
		{"purpose identity", func() (Key, error) { return h.AgentPurposeKey("agent-001", PurposeIdentity) },
			"e7a3791fec7a5f5aa698e14e9a96c80932f036e9e26c76359c900a77f344da29"},
		{"purpose encryption", func() (Key, error) { return h.AgentPurposeKey("agent-001", PurposeEncryption) },
			"a15e8160cd4d469ad635bfc0d5cfd9bdd605ca2db11e5a33ea46425fff554ddd"},
		{"purpose authentication", func() (Key, error) { return h.AgentPurposeKey("agent-001", PurposeAuthentication) },
			"093688ccbe87bb07391b53f0e9ed06fb3983b8081b41c87bda11fac1da21f778"},
		{"purpose session", func() (Key, error) { return h.AgentPurposeKey("agent-001", PurposeSession) },
			"678998ee8aadb34959bb5d37c3e717009a1bd681c0f6349a2793d8631977fdde"},
		{"agent context encryption", func() (Key, error) { return ctx.PurposeKey(PurposeEncryption) },
			"baf434d4a2b2326b7c687151fc783ee501ed826ebe8a711053be6d2545b03549"},
		{"keyring ctx/sess-001", func() (Key, error) { return kr.SessionKey("ctx", "sess-001") },
			"eb0da2be9457fbef60084c7963a59e1d8941750c56e121061a4bb1bb068d64a3"},
	} {
		k, err := tc.f()
		if got := hex.EncodeToString(k[:]); err != nil || got != tc.want {
			t.Errorf("%s: %s, %v\nwant %s", tc.name, got, err, tc.want)
		}
	}
}

// Both members of a pair derive the same org-key session key, which is
// not the master-IKM session key of the same path.
func TestSessionKeyVariants(t *testing.T) {
	h, _ := NewHierarchy(repeat(0x42, 32), "acme")
	a, _ := h.AgentContext("alice")
	b, _ := h.AgentContext("bob")
	ka, err1 := a.OrgSessionKey("bob", "s1")
	kb, err2 := b.OrgSessionKey("alice", "s1")
	km, err3 := h.MasterSessionKey("alice", "bob", "s1")
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	if ka != kb {
		t.Fatal("alice and bob derived different org-key session keys")
	}
	if ka == km {
		t.Fatal("org-key and master session keys coincide; the IKMs must differ")
	}
	if other, _ := a.OrgSessionKey("bob", "s2"); other == ka {
		t.Fatal("a different session id gave the same key")
	}
	// AgentContext.PurposeKey (agent-key IKM) ≠ Hierarchy.AgentPurposeKey (master IKM).
	p1, _ := a.PurposeKey(PurposeEncryption)
	p2, _ := h.AgentPurposeKey("alice", PurposeEncryption)
	if p1 == p2 {
		t.Fatal("purpose keys from different IKMs coincide")
	}
	// A context rebuilt from handed-out keys derives the same.
	ok, _ := h.OrgKey()
	ak, _ := h.AgentKey("alice")
	c, err := NewAgentContext("acme", "alice", ok, ak)
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := c.OrgSessionKey("bob", "s1"); k != ka {
		t.Fatal("NewAgentContext derives differently from Hierarchy.AgentContext")
	}
	if _, err := NewAgentContext("acme", "alice", Key{}, ak); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("zero org key: %v", err)
	}
}

func TestValidateID(t *testing.T) {
	for _, id := range []string{"agent-001", "my_agent_123", "acme-corp", "a", strings.Repeat("a", 128), "sess_AbC123"} {
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

// Every derivation validates the ids that become parts of its path.
func TestDerivationsValidate(t *testing.T) {
	if _, err := NewHierarchy(repeat(1, 32), "bad/org"); !errors.Is(err, ErrInvalidID) {
		t.Errorf("org: %v", err)
	}
	if _, err := NewHierarchy(repeat(1, 15), "org"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("15-byte master: %v", err)
	}
	h, _ := NewHierarchy(repeat(1, 32), "org")
	c, _ := h.AgentContext("a")
	for name, err := range map[string]error{
		"agent":         second(h.AgentKey("a/b")),
		"purpose agent": second(h.AgentPurposeKey("", PurposeIdentity)),
		"session a":     second(h.MasterSessionKey("a:b", "c", "s")),
		"session sid":   second(h.MasterSessionKey("a", "c", "s/1")),
		"ctx peer":      second(c.OrgSessionKey("x y", "s")),
		"ctx sid":       second(c.OrgSessionKey("b", "")),
		"context agent": second(h.AgentContext("")),
	} {
		if !errors.Is(err, ErrInvalidID) {
			t.Errorf("%s: %v, want ErrInvalidID", name, err)
		}
	}
	for _, p := range []Purpose{0, 5, 255} {
		if _, err := h.AgentPurposeKey("a", p); !errors.Is(err, ErrInvalidPurpose) {
			t.Errorf("purpose %d: %v", p, err)
		}
		if _, err := c.PurposeKey(p); !errors.Is(err, ErrInvalidPurpose) {
			t.Errorf("context purpose %d: %v", p, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestWipeStopsDerivation(t *testing.T) {
	h, _ := NewHierarchy(repeat(1, 32), "org")
	c, _ := h.AgentContext("a")
	h.Wipe()
	if _, err := h.OrgKey(); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("wiped hierarchy: %v", err)
	}
	c.Wipe()
	if _, err := c.OrgSessionKey("b", "s"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("wiped context session: %v", err)
	}
	if _, err := c.PurposeKey(PurposeSession); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("wiped context purpose: %v", err)
	}
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

func TestKeyring(t *testing.T) {
	var r Keyring
	if _, err := r.SessionKey("ctx", "s"); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("empty ring: %v", err)
	}
	if err := r.Add("k1", nil); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
	if err := r.Add("bad id", repeat(1, 32)); !errors.Is(err, ErrInvalidID) {
		t.Fatalf("bad id: %v", err)
	}
	src := repeat(1, 32)
	_ = r.Add("k1", src)
	clear(src) // the ring keeps its own copy
	_ = r.Add("k2", repeat(2, 32))
	if id, ok := r.Default(); !ok || id != "k1" {
		t.Fatalf("default %q %v, want the first key k1", id, ok)
	}
	k1, _ := r.SessionKey("ctx", "s")
	if err := r.SetDefault("nope"); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("SetDefault(nope): %v", err)
	}
	if err := r.SetDefault("k2"); err != nil {
		t.Fatal(err)
	}
	k2, _ := r.SessionKey("ctx", "s")
	if k1 == k2 {
		t.Fatal("changing the default did not change the derived key")
	}
	if g, ok := r.Get("k1"); !ok || string(g) != string(repeat(1, 32)) {
		t.Fatal("Get(k1) lost the key or shares the caller's slice")
	}
	if !r.Remove("k2") || r.Remove("k2") {
		t.Fatal("Remove reports wrongly")
	}
	if _, ok := r.Default(); ok {
		t.Fatal("removing the default key left a default")
	}
	if _, err := r.SessionKey("c|x", "s"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("context with '|': %v", err)
	}
	r.Wipe()
	if r.Len() != 0 {
		t.Fatal("Wipe left keys")
	}
}

func TestParseHexKey(t *testing.T) {
	for _, s := range []string{"0123456789abcdef", "0123456789ABCDEF"} {
		k, err := ParseHexKey(s)
		if err != nil || hex.EncodeToString(k) != "0123456789abcdef" {
			t.Errorf("%q: %x %v", s, []byte(k), err)
		}
	}
	for _, s := range []string{"", "abc", "zz", "0x12"} {
		_, err := ParseHexKey(s)
		if !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%q: %v, want ErrInvalidKey", s, err)
		}
		if err != nil && s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("%q: error %q repeats the key text", s, err)
		}
	}
}
