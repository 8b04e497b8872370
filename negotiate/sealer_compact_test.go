package negotiate

import (
	"errors"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/security"
)

// With feature compact a Sealer writes a frame with an extension block in
// the compact form (docs/protocol.md §4.5), in place, and its peer's Open
// rebuilds and opens it; a frame without a block stays an M2M v1 frame, and
// a Sealer without the feature refuses a compact frame as bad_frame without
// taking its number.
func TestSealerCompact(t *testing.T) {
	doc := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`)
	withBlock, err := frame.AppendEncodeExt(nil, doc, frame.Extension{DocID: 7}, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		t.Run(mode.String(), func(t *testing.T) {
			send, recv := sealerPair(t, mode, 0)
			send.EnableCompact()
			recv.EnableCompact()
			const ch = 8
			for i, want := range []struct {
				fr    []byte
				first byte
			}{{withBlock, frame.CompactMarker}, {frameA(t), '#'}, {withBlock, frame.CompactMarker}} {
				fr := append(make([]byte, 0, len(want.fr)+security.MaxOverhead), want.fr...)
				out, err := send.Seal(ch, fr)
				if err != nil {
					t.Fatal(err)
				}
				if out[0] != want.first || &out[0] != &fr[0] {
					t.Fatalf("frame %d: first byte %q, in place %v", i, out[0], &out[0] == &fr[0])
				}
				plain, err := recv.Open(ch, out)
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if seq, fch, err := frame.Sequence(plain); err != nil || seq != uint64(i+1) || fch != ch {
					t.Fatalf("frame %d: sequence %d on channel %d, %v", i, seq, fch, err)
				}
				back, err := frame.AppendDecode(nil, plain, frame.Limits{})
				if err != nil || (want.first == frame.CompactMarker && string(back) != string(doc)) {
					t.Fatalf("frame %d: decoded %q, %v", i, back, err)
				}
			}

			// Without the feature: refused, no number taken.
			send2, recv2 := sealerPair(t, mode, 0)
			send2.EnableCompact()
			out, err := send2.Seal(ch, append(make([]byte, 0, len(withBlock)+security.MaxOverhead), withBlock...))
			if err != nil || out[0] != frame.CompactMarker {
				t.Fatalf("seal: %v", err)
			}
			if _, err := recv2.Open(ch, out); !errors.Is(err, ErrUnknownFrame) || RefusalCode(err) != CodeBadFrame {
				t.Fatalf("compact frame without the feature: %v (%s)", err, RefusalCode(err))
			}
			if recv2.Expected(ch) != 1 {
				t.Fatalf("a refused compact frame took a number: next %d", recv2.Expected(ch))
			}
			// A compact frame that does not rebuild: bad_frame, no number.
			recv2.EnableCompact()
			if _, err := recv2.Open(ch, []byte{frame.CompactMarker, 0xf0}); !errors.Is(err, ErrCompactFrame) || RefusalCode(err) != CodeBadFrame {
				t.Fatalf("malformed compact frame: %v (%s)", err, RefusalCode(err))
			}
			if recv2.Expected(ch) != 1 {
				t.Fatalf("a malformed compact frame took a number: next %d", recv2.Expected(ch))
			}
		})
	}
}
