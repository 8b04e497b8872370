package frame

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/m2md/m2md/internal/jsonscan"
	"github.com/m2md/m2md/internal/testkit"
)

// compressThreshold is the reference's JSON length from which a frame's
// payload is Brotli-compressed (FlagCompressed), whether or not that makes
// it smaller: Limits.CompressFrom's default.
const compressThreshold = jsonscan.DefaultCompressFrom

// Limits.Quality: zero and values out of range are the reference's quality
// 5; 1–11 are kept.
func TestQualityEffective(t *testing.T) {
	for _, tc := range []struct{ set, want int }{
		{0, 5}, {-1, 5}, {12, 5}, {1, 1}, {5, 5}, {11, 11},
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

// Limits.CompressFrom: documents shorter than it go stored, COMPRESSED
// clear, the frame otherwise the reference's (headers and CRC) and
// decoding to the document; longer ones compressed; zero is the
// reference's 100 bytes, negative never.
func TestCompressFrom(t *testing.T) {
	for _, tc := range []struct{ set, want int }{{0, 100}, {4096, 4096}, {-1, -1}, {-9, -1}} {
		if got := (Limits{CompressFrom: tc.set}).Effective().CompressFrom; got != tc.want {
			t.Errorf("CompressFrom %d: effective %d, want %d", tc.set, got, tc.want)
		}
	}
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
		var rh Header
		if err := ReadHeader(ref, &rh); err != nil {
			t.Fatal(err)
		}
		for _, from := range []int{-1, len(f.Data), len(f.Data) + 1} {
			fr, err := AppendEncode(nil, f.Data, Limits{CompressFrom: from})
			if err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
			var h Header
			if err := ReadHeader(fr, &h); err != nil {
				t.Fatal(err)
			}
			if from == len(f.Data) {
				if !bytes.Equal(fr, ref) {
					t.Fatalf("%s, CompressFrom its length: not the reference's frame", f.Name)
				}
				continue
			}
			if h.Flags.Compressed() || h.Flags != rh.Flags&^FlagCompressed || h.CRC != rh.CRC {
				t.Fatalf("%s, CompressFrom %d: flags %#x crc %08x, want %#x and %08x", f.Name, from, uint32(h.Flags), h.CRC, uint32(rh.Flags&^FlagCompressed), rh.CRC)
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
		for _, tc := range []struct {
			name string
			lim  Limits
		}{{"stored", Limits{CompressFrom: -1}}, {"q1", Limits{Quality: 1}}, {"q5", Limits{Quality: 5}}} {
			b.Run(fmt.Sprintf("%s/%s", name, tc.name), func(b *testing.B) {
				var fr []byte
				var err error
				for b.Loop() {
					if fr, err = AppendEncode(fr[:0], doc, tc.lim); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(100*float64(len(fr))/float64(len(doc)), "%-of-JSON")
			})
		}
	}
}
