package delta

import (
	"bytes"
	"errors"
	"hash/crc32"
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
	// Reply deltas' payloads (docs/protocol.md §4.3 "Reply deltas").
	for _, conv := range convs {
		for i := 1; i < len(conv); i += 4 {
			dict := AppendReplyDict(nil, NewBase(conv[i-1].request, conv[i-1].response), conv[i].request)
			p, err := appendEncode(nil, conv[i].response, dict)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(p)
		}
	}
	// Multi-segment frames, as libzstd writes beyond its level's window.
	for _, n := range []int{600, 3000} {
		req, resp, doc := bigTurn(n)
		f.Add(multiSegment(f, doc, NewBase(req, resp), 1<<10))
	}
	f.Add([]byte{0x20, 5, 0x29, 0, 0, 'a', 'b', 'c', 'd', 'e'})
	f.Add([]byte{0x40, 0x00, 0, 0, 0x29, 0, 0, 'a', 'b', 'c', 'd', 'e'})
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
		h, err := readHeader(payload)
		if err != nil || uint64(len(out)-3) != h.size || h.size > 1<<20 || !bytes.HasPrefix(out, []byte("pre")) {
			t.Fatalf("decoded %d bytes, content size %d (%v)", len(out)-3, h.size, err)
		}
	})
}

// FuzzDecodeReply decodes arbitrary frames as reply deltas against the D_r
// of docs/protocol.md §4.3's example (seeds under
// testdata/fuzz/FuzzDecodeReply, and the example's frame, a request delta
// and a plain response). Every input either fails with a typed error,
// leaving dst as it was, or decodes to a response with the frame's CRC-32
// that is JSON within the limit.
func FuzzDecodeReply(f *testing.F) {
	dict := AppendReplyDict(nil, NewBase([]byte(exampleRequest), []byte(exampleResponse)), []byte(exampleDoc))
	fr, isDelta, err := AppendEncodeReply(nil, []byte(exampleReply), dict, frame.Limits{})
	if err != nil || !isDelta {
		f.Fatal(isDelta, err)
	}
	f.Add(fr)
	plain, err := frame.AppendEncode(nil, []byte(exampleReply), frame.Limits{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(plain)
	req, _, err := AppendEncodeFrame(nil, []byte(exampleDoc), frame.Extension{DocID: 2, BaseID: 1}, NewBase([]byte(exampleRequest), []byte(exampleResponse)), frame.Limits{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(req)
	lim := frame.Limits{MaxDecompressed: 1 << 20}
	f.Fuzz(func(t *testing.T, fr []byte) {
		out, err := AppendDecodeReply([]byte("pre"), fr, dict, lim)
		if err != nil {
			if string(out) != "pre" {
				t.Fatalf("error %v with output %q", err, out)
			}
			for _, want := range []error{ErrCorrupt, ErrBaseMismatch, ErrNotDelta, frame.ErrLimit, frame.ErrMalformed, frame.ErrTruncated,
				frame.ErrBadPrefix, frame.ErrEncrypted, frame.ErrInvalidJSON} {
				if errors.Is(err, want) {
					return
				}
			}
			t.Fatalf("untyped error %v", err)
		}
		var h frame.Header
		if err := frame.ReadHeader(fr, &h); err != nil || h.Schema != frame.SchemaResponse || !h.Ext.Delta ||
			crc32.ChecksumIEEE(out[3:]) != h.CRC || len(out)-3 > 1<<20 || !bytes.HasPrefix(out, []byte("pre")) {
			t.Fatalf("decoded %d bytes from a frame with header %+v (%v)", len(out)-3, h, err)
		}
	})
}
