package frame

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/m2md/m2md/internal/testkit"
)

// Limits.Quality: zero and values above 11 are the reference's quality 5;
// 1–11 are kept; any negative value is NoCompression.
func TestQualityEffective(t *testing.T) {
	for _, tc := range []struct{ set, want int }{
		{0, 5}, {-1, NoCompression}, {-7, NoCompression}, {12, 5}, {1, 1}, {5, 5}, {11, 11},
	} {
		if got := (Limits{Quality: tc.set}).Effective().Quality; got != tc.want {
			t.Errorf("Quality %d: effective %d, want %d", tc.set, got, tc.want)
		}
	}
}

// Every quality's frames decode to the document byte for byte, and the
// quality a sender picks is the one its payload is compressed with: quality
// 1's payload differs from the reference's quality 5 and is larger.
func TestQualityRoundTrip(t *testing.T) {
	var smaller, larger int
	for _, f := range testkit.Corpus(t) {
		if len(f.Data) < compressThreshold || len(f.Data) > 4096 {
			continue // uncompressed, or slow under the race detector
		}
		ref, err := AppendEncode(nil, f.Data, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		for q := 1; q <= 11; q++ {
			fr, err := AppendEncode(nil, f.Data, Limits{Quality: q})
			if err != nil {
				t.Fatalf("%s, quality %d: %v", f.Name, q, err)
			}
			got, err := AppendDecode(nil, fr, Limits{})
			if err != nil || !bytes.Equal(got, f.Data) {
				t.Fatalf("%s, quality %d: decoded %d bytes, %v", f.Name, q, len(got), err)
			}
			if q == 1 {
				switch {
				case len(fr) > len(ref):
					larger++
				case len(fr) < len(ref):
					smaller++
				}
			}
		}
	}
	if larger == 0 || larger < 4*smaller {
		t.Errorf("quality 1 frames: %d larger than quality 5's, %d smaller; want most larger", larger, smaller)
	}
}

// NoCompression stores every payload as it is, COMPRESSED clear, whatever
// its length; the frame is otherwise the reference's (header and CRC), and
// decodes to the document.
func TestNoCompression(t *testing.T) {
	n := 0
	for _, f := range testkit.Corpus(t) {
		if len(f.Data) < compressThreshold {
			continue
		}
		n++
		ref, err := AppendEncode(nil, f.Data, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		fr, err := AppendEncode(nil, f.Data, Limits{Quality: NoCompression})
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		var h, rh Header
		if err := ReadHeader(fr, &h); err != nil {
			t.Fatal(err)
		}
		if err := ReadHeader(ref, &rh); err != nil {
			t.Fatal(err)
		}
		if h.Flags.Compressed() || h.Flags != rh.Flags&^FlagCompressed || h.CRC != rh.CRC {
			t.Fatalf("%s: flags %#x crc %08x, want %#x and %08x", f.Name, uint32(h.Flags), h.CRC, uint32(rh.Flags&^FlagCompressed), rh.CRC)
		}
		// Headers alike but for the flags word; the payload the document.
		at := PrefixLen + h.HeaderLen
		if h.HeaderLen != rh.HeaderLen || !bytes.Equal(fr[:OffFlags], ref[:OffFlags]) || !bytes.Equal(fr[OffFlags+4:at], ref[OffFlags+4:at]) {
			t.Fatalf("%s: header differs from the reference's beyond its flags", f.Name)
		}
		if !bytes.Equal(fr[at+8:], f.Data) {
			t.Fatalf("%s: the payload is not the document as it is", f.Name)
		}
		got, err := AppendDecode(nil, fr, Limits{})
		if err != nil || !bytes.Equal(got, f.Data) {
			t.Fatalf("%s: decoded %d bytes, %v", f.Name, len(got), err)
		}
	}
	if n == 0 {
		t.Fatal("no corpus document of 100 bytes or more")
	}
}

// BenchmarkQuality: what each Brotli quality costs a frame's encoder, and
// the frame's size as a share of the document (docs/benchmarks.md, "The
// OpenAI edges").
func BenchmarkQuality(b *testing.B) {
	for _, name := range []string{"req-chat-1k-01.json", "req-tools-4k-01.json", "req-multiturn-16k-01.json", "req-long-100k-01.json"} {
		doc := testkit.CorpusFile(b, name)
		for _, q := range []int{NoCompression, 1, 5} {
			b.Run(fmt.Sprintf("%s/q%d", name, q), func(b *testing.B) {
				var fr []byte
				var err error
				for b.Loop() {
					if fr, err = AppendEncode(fr[:0], doc, Limits{Quality: q}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(100*float64(len(fr))/float64(len(doc)), "%-of-JSON")
			})
		}
	}
}
