package delta

import (
	"bytes"
	"errors"
	"testing"

	"github.com/m2md/m2md/frame"
)

// FuzzDecode decodes arbitrary delta payloads against a corpus base
// (seeds under testdata/fuzz/FuzzDecode: real deltas and the malformed
// headers of TestCorruptDeltas). Every input either fails with a typed
// error, leaving dst as it was, or decodes to exactly the content size its
// frame states, within the limit.
func FuzzDecode(f *testing.F) {
	convs := conversations(f)
	base := NewBase(convs[0][2].request, convs[0][2].response)
	for _, conv := range convs {
		for i := 1; i < len(conv); i += 4 {
			p, err := AppendEncode(nil, conv[i].request, NewBase(conv[i-1].request, conv[i-1].response))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(p)
		}
	}
	f.Add([]byte{0x20, 5, 0x29, 0, 0, 'a', 'b', 'c', 'd', 'e'})
	f.Add([]byte{0x20, 5, 0x2b, 0, 0, 'a'})
	f.Add([]byte{0xa0, 1, 0, 0, 1})
	lim := frame.Limits{MaxDecompressed: 1 << 20}
	f.Fuzz(func(t *testing.T, payload []byte) {
		out, err := AppendDecode([]byte("pre"), payload, base, lim)
		if err != nil {
			if string(out) != "pre" {
				t.Fatalf("error %v with output %q", err, out)
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, frame.ErrLimit) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		size, err := contentSize(payload)
		if err != nil || uint64(len(out)-3) != size || size > 1<<20 || !bytes.HasPrefix(out, []byte("pre")) {
			t.Fatalf("decoded %d bytes, content size %d (%v)", len(out)-3, size, err)
		}
	})
}
