package security

import (
	"encoding/hex"
	"errors"
	"testing"
)

// Session key schedule vector (docs/protocol.md §5). The expected values
// were computed independently of this package with Python's hashlib and
// hmac (HKDF written out from RFC 5869):
//
//	tr  = sha256(b"m2m/1 transcript" + pack(">I", len(H)) + H + pack(">I", len(A)) + A)
//	prk = hmac(tr, shared + agent_key, sha256)
//	c2s = hmac(prk, b"m2m/1 client to daemon" + b"\x01", sha256)
//	s2c = hmac(prk, b"m2m/1 daemon to client" + b"\x01", sha256)
//	ck  = hmac(prk, b"m2m/1 accept confirm" + b"\x01", sha256)
//	confirm = hmac(ck, b"m2m/1 accept" + tr, sha256)
//	proof = hmac(agent_key, b"m2m/1 hello" + vecHello0, sha256)
//
// shared and pk_A are the X25519 vector of wire reference §4.6; agent_key is
// the §4.4 agent-001 key (c87f…dba1).
const (
	vecHello  = `{"type":"HELLO","timestamp":1705520400000,"payload":{"agent_id":"agent-001"}}`
	vecAccept = `{"type":"ACCEPT","session_id":"sess_abcdefghij0123456789","timestamp":1705520400123,"payload":{}}`

	vecTranscript = "b641150605663f51dfdf65d93add736c9f9428c3167ac7d0d29ddc6d7e415a7b"
	vecShared     = "5266019be756db8c25a94f398234f82d8fc04c95ca6375587edaf39ce04cc631"
	vecAgentKey   = "c87f687fae1cf5991cd0cc64e113ec09750b0d1c41338a41cd8ad90bdd60dba1"
	vecPubA       = "07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c"
	vecHello0     = `{"type":"HELLO","payload":{"agent_id":"agent-001","security":{"mode":"aead","org":"test-org","proof":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}},"timestamp":1705520400000}`
	vecProof      = "71d620c5a5a55d9360efb424a17b97cf3feccc5f04bfcf9063e6a3c348efdcd5"
	vecTimestamp  = 1705520400000
)

func TestTranscriptVector(t *testing.T) {
	tr := Transcript([]byte(vecHello), []byte(vecAccept))
	if got := hex.EncodeToString(tr[:]); got != vecTranscript {
		t.Fatalf("transcript %s, want %s", got, vecTranscript)
	}
	// The length prefixes make the split unambiguous.
	moved := Transcript([]byte(vecHello+"x"), []byte(vecAccept[:len(vecAccept)]))
	shifted := Transcript([]byte(vecHello), []byte("x"+vecAccept))
	if moved == tr || shifted == tr || moved == shifted {
		t.Fatal("transcript does not separate HELLO from ACCEPT")
	}
}

func TestDeriveFrameKeysVector(t *testing.T) {
	tr := Transcript([]byte(vecHello), []byte(vecAccept))
	shared, agentKey := unhex(t, vecShared), unhex(t, vecAgentKey)
	for _, tc := range []struct {
		name              string
		agentKey          []byte
		c2s, s2c, confirm string
	}{
		{"with agent key", agentKey,
			"1bf20816866d07fc9c6dcd4fb001455f7bc128ceb914af0e3e96937819845815",
			"a91fea9790fd86888b45ab8b3cf7c175948111320b6e7903366bd89d80e6b870",
			"cfb3549585340fce76bb491bcac9de7eacbaf942dfb04f94aad74f63941ee0a5"},
		{"without org secret", nil,
			"47dce290d31efe42369c65024e20f6408a626e8d7929dafff96f9a4226fcdc14",
			"97f39f76ee7704c08e91818a6c286693f381474e59a07e34e711ecf621d02ed5",
			"a45b4c617fbc6f33d71634bdf1d82bdb68df5870d0f5d8a5dffa0438d223ece5"},
	} {
		c2s, s2c, ck, err := DeriveFrameKeys(shared, tc.agentKey, tr)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := AcceptConfirmation(ck, tr); hex.EncodeToString(got[:]) != tc.confirm {
			t.Errorf("%s: confirmation %x, want %s", tc.name, got, tc.confirm)
		}
		if got := hex.EncodeToString(c2s[:]); got != tc.c2s {
			t.Errorf("%s: c2s %s, want %s", tc.name, got, tc.c2s)
		}
		if got := hex.EncodeToString(s2c[:]); got != tc.s2c {
			t.Errorf("%s: s2c %s, want %s", tc.name, got, tc.s2c)
		}
	}
	for _, tc := range []struct {
		name             string
		shared, agentKey []byte
	}{
		{"31-byte shared", shared[:31], agentKey},
		{"16-byte agent key", shared, agentKey[:16]},
		{"no shared", nil, nil},
	} {
		if _, _, _, err := DeriveFrameKeys(tc.shared, tc.agentKey, tr); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%s: %v, want ErrInvalidKey", tc.name, err)
		}
	}
}

// A full handshake between two fresh key pairs: both ends agree.
func TestHandshakeAgrees(t *testing.T) {
	client, _ := GenerateKeyPair()
	daemon, _ := GenerateKeyPair()
	cp, dp := client.PublicKey(), daemon.PublicKey()
	tr := Transcript([]byte(vecHello), []byte(vecAccept))
	cs, _ := client.SharedSecret(dp[:])
	ds, _ := daemon.SharedSecret(cp[:])
	c1, s1, _, err1 := DeriveFrameKeys(cs[:], unhex(t, vecAgentKey), tr)
	c2, s2, _, err2 := DeriveFrameKeys(ds[:], unhex(t, vecAgentKey), tr)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if c1 != c2 || s1 != s2 || c1 == s1 {
		t.Fatal("client and daemon frame keys disagree, or the directions share a key")
	}
	// A different agent key (someone without the org secret) gets other keys.
	c3, _, _, _ := DeriveFrameKeys(ds[:], repeat(0x42, 32), tr)
	if c3 == c1 {
		t.Fatal("agent key does not enter the frame keys")
	}
}

func TestHelloProofVector(t *testing.T) {
	agentKey, hello0 := unhex(t, vecAgentKey), []byte(vecHello0)
	proof, err := HelloProof(agentKey, hello0)
	if got := hex.EncodeToString(proof[:]); err != nil || got != vecProof {
		t.Fatalf("proof %s, %v\nwant %s", got, err, vecProof)
	}
	// Every byte of the HELLO and the key are bound by the proof.
	other := func(b []byte, i int) []byte { c := append([]byte(nil), b...); c[i] ^= 1; return c }
	for _, tc := range []struct {
		name   string
		key, h []byte
	}{
		{"key", other(agentKey, 0), hello0},
		{"first HELLO byte", agentKey, other(hello0, 0)},
		{"last HELLO byte", agentKey, other(hello0, len(hello0)-1)},
		{"HELLO truncated", agentKey, hello0[:len(hello0)-1]},
	} {
		if p, err := HelloProof(tc.key, tc.h); err != nil || p == proof {
			t.Errorf("changed %s: proof unchanged (%v)", tc.name, err)
		}
	}
	if _, err := HelloProof(agentKey[:16], hello0); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("short key: %v, want ErrInvalidKey", err)
	}
}
