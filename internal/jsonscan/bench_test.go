package jsonscan

import (
	"testing"

	"github.com/m2md/m2md/internal/testkit"
)

var benchFiles = []struct{ name, file string }{
	{"100B", "req-chat-tiny-10.json"},
	{"1KB", "req-chat-1k-01.json"},
	{"9KB", "req-multiturn-16k-02.json"},
	{"9KB-ja", "req-multiturn-16k-03.json"},
	{"100KB", "req-long-100k-01.json"},
	{"resp-emb-10KB", "resp-embeddings-02.json"},
}

func BenchmarkValidate(b *testing.B) {
	for _, f := range benchFiles {
		data := testkit.CorpusFile(b, f.file)
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
		data := testkit.CorpusFile(b, f.file)
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
