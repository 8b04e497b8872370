package delta

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/m2md/m2md/frame"
)

// The reference zstd (libzstd, through its CLI) reads our deltas with D as
// a raw dictionary once the magic number is put back, and our decoder
// reads what it writes with the same dictionary once the magic is
// removed: what a Node or Python implementation with a libzstd binding
// does (docs/protocol.md §4.3).
func TestInteropZstdCLI(t *testing.T) {
	zstdCLI, err := exec.LookPath("zstd")
	if err != nil {
		t.Skip("the zstd CLI is not installed: nothing to interoperate with")
	}
	dir := t.TempDir()
	conv := conversations(t)[2]
	for i := 1; i < len(conv); i += 3 {
		base := NewBase(conv[i-1].request, conv[i-1].response)
		doc := conv[i].request
		dict := filepath.Join(dir, "D")
		if err := os.WriteFile(dict, base.d, 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := AppendEncode(nil, doc, base)
		if err != nil {
			t.Fatal(err)
		}
		zst := filepath.Join(dir, "delta.zst")
		if err := os.WriteFile(zst, append(magic[:], p...), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(zstdCLI, "-q", "-d", "-c", "-D", dict, zst).Output()
		if err != nil || !bytes.Equal(out, doc) {
			t.Fatalf("%s: zstd -d: %d bytes, %v", conv[i].name, len(out), err)
		}

		src := filepath.Join(dir, "doc.json")
		if err := os.WriteFile(src, doc, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, lvl := range []string{"-1", "-3", "-19"} {
			enc, err := exec.Command(zstdCLI, "-q", lvl, "--no-check", "-c", "-D", dict, src).Output()
			if err != nil || !bytes.Equal(enc[:4], magic[:]) {
				t.Fatalf("%s: zstd %s: %v", conv[i].name, lvl, err)
			}
			back, err := AppendDecode(nil, enc[4:], base, frame.Limits{})
			if err != nil || !bytes.Equal(back, doc) {
				t.Fatalf("%s: decoding zstd %s's frame (descriptor %08b): %v", conv[i].name, lvl, enc[4], err)
			}
			t.Logf("%s: zstd %s %d bytes, ours %d", conv[i].name, lvl, len(enc)-4, len(p))
		}
	}
}
