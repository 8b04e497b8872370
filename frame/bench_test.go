package frame

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/andybalholm/brotli"

	"github.com/m2md/m2md/internal/testkit"
)

// The benchmark documents, by size class (testdata/corpus/README.md).
var benchDocs = []struct{ name, file string }{
	{"100B", "req-chat-tiny-10.json"},
	{"1KB", "req-chat-1k-01.json"},
	{"9KB", "req-multiturn-16k-02.json"},
	{"100KB", "req-long-100k-01.json"},
}

func forEachDoc(b *testing.B, run func(b *testing.B, json []byte)) {
	for _, d := range benchDocs {
		json := testkit.CorpusFile(b, d.file)
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(json)))
			b.ReportAllocs()
			run(b, json)
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		dst := make([]byte, 0, 2*len(json)+1024)
		for b.Loop() {
			if _, err := AppendEncode(dst, json, Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEncodeText(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		dst := make([]byte, 0, 2*len(json)+1024)
		for b.Loop() {
			if _, err := AppendEncodeText(dst, json, Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBrotliQ5 is the baseline for BenchmarkEncode: the Brotli
// compression the frame needs, alone, with a reused writer and buffer.
func BenchmarkBrotliQ5(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		var buf bytes.Buffer
		buf.Grow(2 * len(json))
		w := brotli.NewWriterOptions(&buf, brotli.WriterOptions{Quality: frameQuality, LGWin: brotliWindowLog})
		for b.Loop() {
			buf.Reset()
			w.Reset(&buf)
			if _, err := w.Write(json); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		frame := mustEncode(b, string(json))
		dst := make([]byte, 0, len(json))
		for b.Loop() {
			if _, err := AppendDecode(dst, frame, Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkBrotliDecompress(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		frame := mustEncode(b, string(json))
		h := mustReadHeader(b, frame)
		payload := frame[h.PayloadOffset()+8:]
		var src bytes.Reader
		r := brotli.NewReader(&src)
		out := make([]byte, len(json)+1)
		for b.Loop() {
			src.Reset(payload)
			_ = r.Reset(&src)
			n, err := io.ReadFull(r, out)
			if err != io.ErrUnexpectedEOF || n != len(json) {
				b.Fatalf("read %d bytes: %v", n, err)
			}
		}
	})
}

func BenchmarkReadHeader(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		frame := mustEncode(b, string(json))
		var h Header
		for b.Loop() {
			if err := ReadHeader(frame, &h); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkReadTextHeader(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		text := mustEncodeText(b, string(json))
		var h Header
		for b.Loop() {
			if err := ReadTextHeader(text, &h); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBrotliText encodes the Brotli text form (quality 11).
func BenchmarkBrotliText(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		dst := make([]byte, 0, 2*len(json)+1024)
		for b.Loop() {
			if _, err := AppendEncodeBrotliText(dst, json, Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The paired benchmarks below run an M2M operation and its baseline
// alternately in the same loop and report the ratio of their times, so
// that load from other processes on a shared machine affects both alike.
// ns/op is the cost of the pair.

func BenchmarkRatioEncodeToBrotliQ5(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		dst := make([]byte, 0, 2*len(json)+1024)
		var buf bytes.Buffer
		buf.Grow(2 * len(json))
		w := brotli.NewWriterOptions(&buf, brotli.WriterOptions{Quality: frameQuality, LGWin: brotliWindowLog})
		var m2m, base time.Duration
		for b.Loop() {
			t0 := time.Now()
			if _, err := AppendEncode(dst, json, Limits{}); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			buf.Reset()
			w.Reset(&buf)
			if _, err := w.Write(json); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			m2m += t1.Sub(t0)
			base += t2.Sub(t1)
		}
		b.ReportMetric(float64(m2m)/float64(base), "m2m/brotli")
	})
}

func BenchmarkRatioDecodeToBrotliDecompress(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		frame := mustEncode(b, string(json))
		h := mustReadHeader(b, frame)
		payload := frame[h.PayloadOffset()+8:]
		dst := make([]byte, 0, len(json))
		var src bytes.Reader
		r := brotli.NewReader(&src)
		out := make([]byte, len(json)+1)
		var m2m, base time.Duration
		for b.Loop() {
			t0 := time.Now()
			if _, err := AppendDecode(dst, frame, Limits{}); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			src.Reset(payload)
			_ = r.Reset(&src)
			if n, err := io.ReadFull(r, out); err != io.ErrUnexpectedEOF || n != len(json) {
				b.Fatalf("read %d bytes: %v", n, err)
			}
			t2 := time.Now()
			m2m += t1.Sub(t0)
			base += t2.Sub(t1)
		}
		b.ReportMetric(float64(m2m)/float64(base), "m2m/brotli")
	})
}

func BenchmarkRatioDecodeToReadHeader(b *testing.B) {
	forEachDoc(b, func(b *testing.B, json []byte) {
		frame := mustEncode(b, string(json))
		text := mustEncodeText(b, string(json))
		dst := make([]byte, 0, len(json))
		var h Header
		var decode, header, decText, textHeader time.Duration
		for b.Loop() {
			t0 := time.Now()
			if _, err := AppendDecode(dst, frame, Limits{}); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			for range 100 {
				if err := ReadHeader(frame, &h); err != nil {
					b.Fatal(err)
				}
			}
			t2 := time.Now()
			if _, err := decodeText(dst, text, Limits{}); err != nil {
				b.Fatal(err)
			}
			t3 := time.Now()
			for range 100 {
				if err := ReadTextHeader(text, &h); err != nil {
					b.Fatal(err)
				}
			}
			t4 := time.Now()
			decode += t1.Sub(t0)
			header += t2.Sub(t1)
			decText += t3.Sub(t2)
			textHeader += t4.Sub(t3)
		}
		b.ReportMetric(100*float64(decode)/float64(header), "decode/header")
		b.ReportMetric(100*float64(decText)/float64(textHeader), "decodeText/textHeader")
	})
}

// benchDeltaFrame is a request delta frame of about 200 bytes (the size of
// a conversation turn's delta on the corpus, docs/protocol.md §4.5),
// numbered on channel 4.
func benchDeltaFrame(b *testing.B) []byte {
	delta := bytes.Repeat([]byte{0x20, 0xa5, 0x3d, 0x01, 0x74}, 30)
	fr, err := AppendEncodeDelta(nil, []byte(frameAJSON), delta, Extension{DocID: 2, BaseID: 1}, Limits{})
	if err != nil {
		b.Fatal(err)
	}
	if err := SetSequence(fr, 1000, 4); err != nil {
		b.Fatal(err)
	}
	return fr
}

// BenchmarkCompact: in place, as the sessions write it (each round first
// restores the frame: a 200-byte copy), and into another buffer.
func BenchmarkCompact(b *testing.B) {
	fr := benchDeltaFrame(b)
	b.Run("in-place", func(b *testing.B) {
		buf := make([]byte, len(fr))
		b.SetBytes(int64(len(fr)))
		b.ReportAllocs()
		for b.Loop() {
			copy(buf, fr)
			if _, ok := AppendCompact(buf[:0], buf, 4); !ok {
				b.Fatal("not compactable")
			}
		}
	})
	b.Run("reused-dst", func(b *testing.B) {
		dst := make([]byte, 0, len(fr))
		b.SetBytes(int64(len(fr)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := AppendCompact(dst, fr, 4); !ok {
				b.Fatal("not compactable")
			}
		}
	})
}

func BenchmarkExpand(b *testing.B) {
	fr := benchDeltaFrame(b)
	c, ok := AppendCompact(nil, fr, 4)
	if !ok {
		b.Fatal("not compactable")
	}
	dst := make([]byte, 0, len(fr))
	b.SetBytes(int64(len(fr)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendExpand(dst, c, 4); err != nil {
			b.Fatal(err)
		}
	}
}
