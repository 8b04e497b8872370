package negotiate

import (
	"errors"
	"strings"
	"testing"
)

// Every first byte names exactly one form or is refused with a message that
// names the valid ones (docs/protocol.md §4).
func TestReadFrameForm(t *testing.T) {
	for b := range 256 {
		want := FrameForm(0)
		switch {
		case b == 0x23:
			want = FormM2M
		case b <= 0x02:
			want = FormTokenNative
		case b == 0x54:
			want = FormSealedTN
		case b == 0x43:
			want = FormCompact
		}
		form, err := ReadFrameForm([]byte{byte(b), 0x81, 0x01})
		if form != want || (err == nil) != (want != 0) {
			t.Fatalf("byte %#02x: form %d, %v; want form %d", b, form, err, want)
		}
		if err != nil && (!errors.Is(err, ErrUnknownFrame) || RefusalCode(err) != CodeBadFrame || !strings.Contains(err.Error(), "02 Llama 3") || !strings.Contains(err.Error(), "43 'C'")) {
			t.Fatalf("byte %#02x: error %v (code %s)", b, err, RefusalCode(err))
		}
	}
	if _, err := ReadFrameForm(nil); !errors.Is(err, ErrUnknownFrame) {
		t.Fatalf("empty frame: %v", err)
	}
}
