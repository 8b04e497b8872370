package delta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
)

// A payload of a few bytes that claims a document of megabytes is refused
// before the document's room is allocated: the claim is held against what
// its blocks can produce, not against the decompression limit alone.
func TestClaimRefusedBeforeAllocating(t *testing.T) {
	base := NewBase([]byte(`{"a":1}`), []byte(`{"b":2}`))
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		// Single segment, 4-byte content size 16 MiB, one empty compressed
		// last block: 8 bytes.
		{"single segment", append(binary.LittleEndian.AppendUint32([]byte{0xa0}, 16<<20), 0x05, 0x00, 0x00)},
		// The same claim in a multi-segment frame with a 2 MiB window.
		{"multi-segment", append(binary.LittleEndian.AppendUint32([]byte{0x80, 0x58}, 16<<20), 0x05, 0x00, 0x00)},
	} {
		const runs = 20
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			if _, err := AppendDecode(nil, tc.payload, base, frame.Limits{}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s: %v, want ErrCorrupt", tc.name, err)
			}
		}
		runtime.ReadMemStats(&after)
		// An error message costs a few hundred bytes; room for the claimed
		// document would be 16 MiB a call.
		if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 64<<10 {
			t.Errorf("%s: %d bytes allocated per refused %d-byte payload", tc.name, per, len(tc.payload))
		}
	}
}

// A valid delta followed by anything, even a zstd skippable frame that a
// zstd library would pass over, is refused: one frame, nothing after it
// (docs/protocol.md §4.3).
func TestBytesAfterTheFrame(t *testing.T) {
	base, doc, p := corpusTurn(t)
	if out, err := AppendDecode(nil, p, base, frame.Limits{}); err != nil || string(out) != string(doc) {
		t.Fatalf("the delta itself: %v", err)
	}
	skippable := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0x184d2a50), 4)
	skippable = append(skippable, "junk"...)
	another, err := AppendEncode(nil, []byte(`{"x":1}`), base)
	if err != nil {
		t.Fatal(err)
	}
	for name, tail := range map[string][]byte{
		"skippable frame":     skippable,
		"another delta frame": append(magic[:], another...),
	} {
		bad := append(append([]byte(nil), p...), tail...)
		out, err := AppendDecode([]byte("keep"), bad, base, frame.Limits{})
		if !errors.Is(err, ErrCorrupt) || string(out) != "keep" {
			t.Errorf("%s after the delta: %d bytes out, %v; want ErrCorrupt", name, len(out), err)
		}
		// The error says how much follows, for the operator reading it.
		if want := fmt.Sprintf("%d bytes after the zstd frame", len(tail)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s after the delta: %v; want it to say %q", name, err, want)
		}
	}
}

// A block that runs past the payload is refused as that, whether or not it
// is the last: the error does not read as bytes left over.
func TestBlockPastThePayload(t *testing.T) {
	base := NewBase([]byte(`{"a":1}`), nil)
	for name, payload := range map[string][]byte{
		"last block":  {0x20, 5, 0x29, 0, 0, 'a', 'b'},
		"first block": {0x20, 5, 0x28, 0, 0, 'a', 'b'},
	} {
		_, err := AppendDecode(nil, payload, base, frame.Limits{})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "runs past the payload") {
			t.Errorf("%s: %v; want ErrCorrupt, the block running past the payload", name, err)
		}
	}
}

// A frame that ends with an empty last block, as a streaming zstd writer
// emits when its input ends on a flush, is a valid delta.
func TestEmptyLastBlock(t *testing.T) {
	base := NewBase([]byte(`{"a":1}`), nil)
	// Content size 5; a raw block "abcde", not last; an empty raw last block.
	payload := []byte{0x20, 5, 0x28, 0, 0, 'a', 'b', 'c', 'd', 'e', 0x01, 0, 0}
	if out, err := AppendDecode(nil, payload, base, frame.Limits{}); err != nil || string(out) != "abcde" {
		t.Fatalf("%q, %v; want abcde", out, err)
	}
}
