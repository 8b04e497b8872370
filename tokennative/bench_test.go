package tokennative

import (
	"fmt"
	"testing"

	"github.com/m2md/m2md/internal/testkit"
)

// Benchmark inputs: corpus files of the four size classes.
var benchSizes = []struct{ name, file string }{
	{"100B", "req-chat-tiny-10.json"},
	{"1KB", "req-chat-1k-04.json"},
	{"10KB", "req-multiturn-16k-03.json"},
	{"100KB", "req-long-100k-01.json"},
}

func benchCodec(b *testing.B, e Encoding) *Codec {
	if e == Llama3 {
		return llama3Codec(b)
	}
	return New(Config{})
}

// BenchmarkEncode compares Tokenizer.Encode with tiktoken-go's Encode on the
// same inputs (their ids are equal: TestCorpusMatchesTiktokenGo).
func BenchmarkEncode(b *testing.B) {
	for _, e := range []Encoding{Cl100k, O200k, Llama3} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%v/%s/m2md", e, size.name), func(b *testing.B) {
				tok := mustTokenizer(b, benchCodec(b, e), e)
				data := testkit.CorpusFile(b, size.file)
				ids, _ := tok.Encode(nil, data)
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					ids, _ = tok.Encode(ids[:0], data)
				}
			})
			if e == Llama3 {
				continue
			}
			b.Run(fmt.Sprintf("%v/%s/tiktoken-go", e, size.name), func(b *testing.B) {
				ref := refCodecs()[e]
				text := string(testkit.CorpusFile(b, size.file))
				b.SetBytes(int64(len(text)))
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := ref.Encode(text); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkAppendText measures a whole text-form message: tokenize, varints, Base64.
func BenchmarkAppendText(b *testing.B) {
	for _, e := range []Encoding{Cl100k, O200k} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%v/%s", e, size.name), func(b *testing.B) {
				c := New(Config{})
				data := testkit.CorpusFile(b, size.file)
				msg, _ := c.AppendText(nil, e, data)
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					msg, _ = c.AppendText(msg[:0], e, data)
				}
			})
		}
	}
}

// BenchmarkDecode measures decoding to text; bytes are those of the text.
func BenchmarkDecode(b *testing.B) {
	for _, e := range []Encoding{Cl100k, O200k, Llama3} {
		for _, size := range benchSizes {
			for _, form := range []string{"binary", "text"} {
				b.Run(fmt.Sprintf("%v/%s/%s", e, size.name, form), func(b *testing.B) {
					c := benchCodec(b, e)
					data := testkit.CorpusFile(b, size.file)
					encode, decode := c.AppendBinary, c.DecodeBinary
					if form == "text" {
						encode, decode = c.AppendText, c.DecodeText
					}
					msg, err := encode(nil, e, data)
					if err != nil {
						b.Fatal(err)
					}
					out, _, _ := decode(nil, msg)
					b.SetBytes(int64(len(data)))
					b.ReportAllocs()
					for b.Loop() {
						out, _, err = decode(out[:0], msg)
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkLoad measures the first-use cost of each vocabulary (beyond
// tiktoken-go's own, which happens once per process and is not repeated here).
func BenchmarkLoad(b *testing.B) {
	b.Run("cl100k_base", func(b *testing.B) {
		ref := refCodecs()[Cl100k]
		b.ReportAllocs()
		for b.Loop() {
			if _, err := vocabFromTiktokenGo(Cl100k, ref, cl100kRanks, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("o200k_base", func(b *testing.B) {
		ref := refCodecs()[O200k]
		b.ReportAllocs()
		for b.Loop() {
			if _, err := vocabFromTiktokenGo(O200k, ref, o200kRanks, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("llama3", func(b *testing.B) {
		dir := llama3Path(b)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := loadLlama3(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
}
