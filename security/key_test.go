package security

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
)

// No printing path may reveal key bytes: not fmt with any verb, not JSON,
// not slog. The key bytes are distinctive, so their hex (or decimal list)
// showing up anywhere is a leak.
func TestKeysNeverPrinted(t *testing.T) {
	raw := seqBytes(0xa0, 32)
	leaks := []string{hex.EncodeToString(raw[:4]), strings.ToUpper(hex.EncodeToString(raw[:4])), "160 161 162", "160,161,162", string(raw[:4])}

	key := Key(raw)
	fk := mustKey(t, frame.SecurityAEAD, raw)
	hk := mustKey(t, frame.SecurityHMAC, raw)
	kp, _ := NewKeyPair(raw)
	type holder struct {
		K Key
		S Secret
	}
	values := []any{key, &key, Secret(raw), fk, hk, kp, holder{key, raw}}

	var out bytes.Buffer
	for _, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %v"} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
		fmt.Fprintln(&out, v)
		j, _ := json.Marshal(v)
		out.Write(j)
	}
	slog.New(slog.NewJSONHandler(&out, nil)).Info("keys", "key", key, "secret", Secret(raw), "fk", fk, "holder", holder{key, raw})
	slog.New(slog.NewTextHandler(&out, nil)).Info("keys", "key", key, "secret", Secret(raw))
	for _, l := range leaks {
		if i := strings.Index(out.String(), l); i >= 0 {
			t.Fatalf("key bytes %q printed:\n%s", l, out.String()[max(0, i-200):min(out.Len(), i+100)])
		}
	}
	if !strings.Contains(out.String(), redacted) {
		t.Fatal("redaction marker missing: the test printed nothing useful")
	}
	// The public key is not secret and stays printable.
	pub := kp.PublicKey()
	if !strings.Contains(kp.String(), hex.EncodeToString(pub[:])) {
		t.Fatal("KeyPair.String should show the public key")
	}
}
