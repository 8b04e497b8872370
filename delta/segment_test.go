package delta

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

func bigTurn(n int) (req, resp, doc []byte) { return testkit.LargeTurn(n, 1) }

// multiSegment encodes doc against base as a zstd library does by default
// once the document outgrows its window: a Window_Descriptor of window
// bytes instead of Single_Segment_Flag (libzstd's level 3 window is 2 MiB),
// with the magic number removed as on the wire.
func multiSegment(t testing.TB, doc []byte, base *Base, window int) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(window), zstd.WithEncoderCRC(false),
		zstd.WithSingleSegment(false), zstd.WithEncoderDictRaw(0, base.d), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	p := enc.EncodeAll(doc, nil)[len(magic):]
	if p[0]&fhdSingleSegment != 0 {
		t.Fatalf("encoder wrote a single-segment frame (descriptor %#02x)", p[0])
	}
	return p
}

// A delta whose zstd frame has a Window_Descriptor (Single_Segment_Flag 0)
// and states its content size decodes, whatever its window against its
// content: smaller (libzstd beyond its level's window), or larger (a
// library whose window is fixed). Within the frame, Block_Maximum_Size is
// the smaller of that window and 128 KiB.
func TestMultiSegmentDeltas(t *testing.T) {
	for _, tc := range []struct {
		doc, window int
	}{
		{600, 1 << 20},     // window over the content
		{3 << 10, 1 << 10}, // the smallest window, blocks of at most 1 KiB
		{4 << 20, 2 << 20}, // libzstd level 3 on a 4 MiB turn (16 MiB: integration's TestLargeDeltaTurns)
	} {
		req, resp, doc := bigTurn(tc.doc)
		base := NewBase(req, resp)
		p := multiSegment(t, doc, base, tc.window)
		out, err := AppendDecode([]byte("pre"), p, base, frame.Limits{})
		if err != nil || !bytes.Equal(out[3:], doc) || string(out[:3]) != "pre" {
			t.Fatalf("%d bytes in a %d-byte window (descriptor %#02x %#02x): %d bytes out, %v", tc.doc, tc.window, p[0], p[1], len(out), err)
		}
		// The same frame as a request delta.
		fr, err := frame.AppendEncodeDelta(nil, doc, p, frame.Extension{DocID: 2, BaseID: 1}, frame.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := AppendDecodeFrame(nil, fr, base, frame.Limits{}); err != nil || !bytes.Equal(out, doc) {
			t.Fatalf("%d-byte frame: %v", tc.doc, err)
		}
	}

	base := NewBase([]byte(`{"a":1}`), nil)
	raw := func(n int) []byte { // a last raw block of n bytes
		return append([]byte{byte(n<<3 | 1), byte(n >> 5), byte(n >> 13)}, bytes.Repeat([]byte{' '}, n)...)
	}
	for _, tc := range []struct {
		name    string
		payload []byte
		want    error
	}{
		// 1 KiB window (descriptor 00), content size 1025 - 256: 2-byte field.
		{"block over a 1 KiB window", append([]byte{0x40, 0x00, 0x01, 0x03}, raw(1025)...), ErrCorrupt},
		{"no content size", append([]byte{0x00, 0x00}, raw(5)...), ErrCorrupt},
		{"window descriptor truncated", []byte{0x40}, ErrCorrupt},
		{"content size truncated", []byte{0x40, 0x00, 0x01}, ErrCorrupt},
		{"16 MiB + 1 claimed", binary32(0x80, 0x58, 16<<20+1), frame.ErrLimit},
		{"more than the blocks hold", append(binary32(0x80, 0x58, 1<<20), raw(10)...), ErrCorrupt},
		// Window descriptor 07: 1 KiB plus 7 eighths of it, 1920 bytes.
		{"block over a 1920-byte window", append([]byte{0x40, 0x07, 0x81, 0x06}, raw(1921)...), ErrCorrupt},
	} {
		out, err := AppendDecode([]byte("keep"), tc.payload, base, frame.Limits{})
		if !errors.Is(err, tc.want) || string(out) != "keep" {
			t.Errorf("%s: %q, %v; want %v", tc.name, out, err, tc.want)
		}
	}
	// The largest block a 1 KiB window allows is a valid frame.
	if out, err := AppendDecode(nil, append([]byte{0x40, 0x00, 0x00, 0x03}, raw(1024)...), base, frame.Limits{}); err != nil || len(out) != 1024 {
		t.Errorf("1 KiB block in a 1 KiB window: %d bytes, %v", len(out), err)
	}
	// The window's mantissa counts: 1920 bytes fit the window 07 states.
	if out, err := AppendDecode(nil, append([]byte{0x40, 0x07, 0x80, 0x06}, raw(1920)...), base, frame.Limits{}); err != nil || len(out) != 1920 {
		t.Errorf("1920-byte block in a 1920-byte window: %d bytes, %v", len(out), err)
	}
}

// binary32 is a multi-segment frame header: descriptor fhd, window
// descriptor wd, a 4-byte content size.
func binary32(fhd, wd byte, size uint32) []byte {
	return []byte{fhd, wd, byte(size), byte(size >> 8), byte(size >> 16), byte(size >> 24)}
}

// libzstd itself (its CLI) writes a multi-segment frame for a 4 MiB turn at
// its default level, and our reader takes it.
func TestInteropZstdCLILarge(t *testing.T) {
	zstdCLI, err := exec.LookPath("zstd")
	if err != nil {
		t.Skip("the zstd CLI is not installed: nothing to interoperate with")
	}
	dir := t.TempDir()
	req, resp, doc := bigTurn(4 << 20)
	base := NewBase(req, resp)
	dict, src := filepath.Join(dir, "D"), filepath.Join(dir, "doc.json")
	if err := os.WriteFile(dict, base.d, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	enc, err := exec.Command(zstdCLI, "-q", "-3", "--no-check", "-c", "-D", dict, src).Output()
	if err != nil || !bytes.Equal(enc[:4], magic[:]) {
		t.Fatalf("zstd -3: %v", err)
	}
	if enc[4]&fhdSingleSegment != 0 {
		t.Fatalf("zstd -3 wrote a single-segment frame (descriptor %#02x) for %d bytes", enc[4], len(doc))
	}
	out, err := AppendDecode(nil, enc[4:], base, frame.Limits{})
	if err != nil || !bytes.Equal(out, doc) {
		t.Fatalf("decoding zstd -3's frame (descriptor %#02x): %d bytes, %v", enc[4], len(out), err)
	}
}
