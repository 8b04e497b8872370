package negotiate

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// The proof and the transcript are rebuilt here byte by byte from the text
// of docs/protocol.md §5, independently of the code's incremental hashing:
// the proof is HMAC(agent key, "m2m/1 hello" ‖ the HELLO with the proof's
// Base64 string, quotes included, replaced by that of 32 zero bytes).
func TestProofLayout(t *testing.T) {
	key := seq(0x10, 32)
	h, err := NewHello(ClientConfig{AgentID: "alice", Org: "acme", AgentKey: key}, time.UnixMilli(1705520400000))
	if err != nil {
		t.Fatal(err)
	}
	hello := string(h.Message()[1:])
	m, err := ParseControl(h.Message())
	if err != nil {
		t.Fatal(err)
	}
	b64 := `"` + base64.StdEncoding.EncodeToString(m.Capabilities.Security.Proof) + `"`
	if strings.Count(hello, b64) != 1 {
		t.Fatalf("proof %s not once in %s", b64, hello)
	}
	blank := `"` + base64.StdEncoding.EncodeToString(make([]byte, 32)) + `"`
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("m2m/1 hello"))
	mac.Write([]byte(strings.Replace(hello, b64, blank, 1)))
	if want := mac.Sum(nil); !bytes.Equal(m.Capabilities.Security.Proof, want) {
		t.Fatalf("proof %x, want %x", m.Capabilities.Security.Proof, want)
	}
}

func TestTranscriptLayout(t *testing.T) {
	h, a := []byte(`{"type":"HELLO"}`), []byte(`{"type":"ACCEPT","x":1}`)
	var buf []byte
	buf = append(buf, "m2m/1 transcript"...)
	buf = append(buf, 0, 0, 0, byte(len(h)))
	buf = append(buf, h...)
	buf = append(buf, 0, 0, 0, byte(len(a)))
	buf = append(buf, a...)
	if got, want := transcriptHash(h, a), sha256.Sum256(buf); got != want {
		t.Fatalf("transcript %x, want %x", got, want)
	}
	// The length prefixes make the split unambiguous.
	if transcriptHash([]byte("ab"), []byte("c")) == transcriptHash([]byte("a"), []byte("bc")) {
		t.Fatal("transcript does not separate HELLO from ACCEPT")
	}
}

func TestFrameKeysDependOnEveryInput(t *testing.T) {
	shared := seq(0x20, 32)
	var tr [32]byte
	c2s, s2c, conf, err := sessionKeys(shared, nil, tr)
	if err != nil {
		t.Fatal(err)
	}
	if c2s == s2c {
		t.Fatal("both directions share a key")
	}
	tr2 := tr
	tr2[31] ^= 1
	c2s2, s2c2, conf2, _ := sessionKeys(shared, nil, tr2)
	c2s3, s2c3, conf3, _ := sessionKeys(shared, seq(0x99, 32), tr)
	shared[0] ^= 1
	c2s4, s2c4, conf4, _ := sessionKeys(shared, nil, tr)
	for name, k := range map[string][3][32]byte{"transcript": {c2s2, s2c2, conf2}, "agent key": {c2s3, s2c3, conf3}, "shared": {c2s4, s2c4, conf4}} {
		if k[0] == c2s || k[1] == s2c || k[2] == conf {
			t.Errorf("changing the %s leaves a key unchanged", name)
		}
	}
}
