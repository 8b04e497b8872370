package security

import (
	"bytes"
	"errors"
	"testing"

	"github.com/m2md/m2md/frame"
)

// The extension block of docs/protocol.md §4.3 sits in the header: HMAC
// covers it, AEAD authenticates it (readable, not encrypted), and a
// changed block fails verification in both modes.
func TestExtensionBlockProtected(t *testing.T) {
	doc := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`)
	plain, err := frame.AppendEncodeDelta(nil, doc, []byte{1, 2, 3}, frame.Extension{DocID: 301, BaseID: 300}, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	key := bytes.Repeat([]byte{7}, 32)
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		p, err := Protect(nil, plain, mode, key)
		if err != nil {
			t.Fatal(err)
		}
		var h frame.Header
		if err := frame.ReadHeader(p, &h); err != nil {
			t.Fatalf("%s: ReadHeader: %v", mode, err)
		}
		if h.Ext != (frame.Extension{DocID: 301, BaseID: 300, Delta: true}) {
			t.Fatalf("%s: extension %+v", mode, h.Ext)
		}
		back, _, err := Open(nil, p, key)
		if err != nil {
			t.Fatalf("%s: Open: %v", mode, err)
		}
		// Opening restores the security byte to none; the rest is the frame.
		if !bytes.Equal(back[frame.OffSecurity+1:], plain[frame.OffSecurity+1:]) {
			t.Fatalf("%s: opened %x\nwant %x", mode, back, plain)
		}
		// base_id 300 (ac 02) → 301 (ad 02): the tag no longer verifies.
		at := h.PayloadOffset() - 3
		if p[at] != 0xac {
			t.Fatalf("%s: byte %d is %#x, want the base_id's ac", mode, at, p[at])
		}
		p[at] = 0xad
		if _, _, err := Open(nil, p, key); !errors.Is(err, ErrVerificationFailed) && !errors.Is(err, ErrDecryptionFailed) {
			t.Fatalf("%s: changed block opened: %v", mode, err)
		}
	}
}
