package jsonscan

import (
	"os"
	"testing"
)

var benchFiles = []struct{ name, path string }{
	{"100B", "../../testdata/corpus/req-chat-tiny-10.json"},
	{"1KB", "../../testdata/corpus/req-chat-1k-01.json"},
	{"9KB", "../../testdata/corpus/req-multiturn-16k-02.json"},
	{"9KB-ja", "../../testdata/corpus/req-multiturn-16k-03.json"},
	{"100KB", "../../testdata/corpus/req-long-100k-01.json"},
	{"resp-emb-10KB", "../../testdata/corpus/resp-embeddings-02.json"},
}

func BenchmarkValidate(b *testing.B) {
	for _, f := range benchFiles {
		data, err := os.ReadFile(f.path)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Validate(data, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkScan(b *testing.B) {
	for _, f := range benchFiles {
		data, err := os.ReadFile(f.path)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(f.name, func(b *testing.B) {
			var sum Summary
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := sum.Scan(data, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
