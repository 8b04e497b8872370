package legacy

import (
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// A 1 KB chat request (system + user message), ASCII so that every form
// can carry it.
const benchFile = "req-chat-1k-01.json"

func benchCodec(b *testing.B, encode, decode func(dst, src []byte) ([]byte, error)) {
	text := testkit.CorpusFile(b, benchFile)
	wire, err := encode(nil, text)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		var dst []byte
		for b.Loop() {
			if dst, err = encode(dst[:0], text); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(wire))/float64(len(text)), "wire/plain")
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		var dst []byte
		for b.Loop() {
			if dst, err = decode(dst[:0], wire); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkT1(b *testing.B) {
	benchCodec(b,
		func(dst, src []byte) ([]byte, error) { return EncodeT1(dst, src, T1Options{}) },
		func(dst, src []byte) ([]byte, error) { return DecodeT1(dst, src, frame.Limits{}) })
}

func BenchmarkZlib(b *testing.B) {
	benchCodec(b,
		func(dst, src []byte) ([]byte, error) { return EncodeZlib(dst, src, frame.Limits{}) },
		func(dst, src []byte) ([]byte, error) { return DecodeZlib(dst, src, frame.Limits{}) })
}

func BenchmarkDictionary(b *testing.B) {
	benchCodec(b,
		func(dst, src []byte) ([]byte, error) { return EncodeDictionary(dst, src, frame.Limits{}) },
		func(dst, src []byte) ([]byte, error) { return DecodeDictionary(dst, src, frame.Limits{}) })
}
