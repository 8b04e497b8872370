package tokennative

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/m2md/m2md/internal/testkit"
)

// Every corpus file round-trips byte for byte in every encoding and both
// forms, and both forms carry the same varints.
func TestCorpusRoundTrip(t *testing.T) {
	for _, e := range []Encoding{Cl100k, O200k, Llama3} {
		t.Run(e.String(), func(t *testing.T) {
			c := New(Config{})
			if e == Llama3 {
				c = llama3Codec(t)
			}
			corpusRoundTrip(t, c, e)
		})
	}
}

func corpusRoundTrip(t *testing.T, c *Codec, e Encoding) {
	var text, bin, out []byte
	for _, f := range testkit.Corpus(t) {
		var err error
		if text, err = c.AppendText(text[:0], e, f.Data); err != nil {
			t.Fatalf("%s: AppendText: %v", f.Name, err)
		}
		if bin, err = c.AppendBinary(bin[:0], e, f.Data); err != nil {
			t.Fatalf("%s: AppendBinary: %v", f.Name, err)
		}
		if bin[0] != byte(e) || string(text[:6]) != "#TK|"+string(e.Char())+"|" {
			t.Fatalf("%s: headers %q / %02x", f.Name, text[:6], bin[0])
		}
		if base64.StdEncoding.EncodeToString(bin[1:]) != string(text[6:]) {
			t.Fatalf("%s: text and binary forms carry different varints", f.Name)
		}
		for name, decode := range map[string]func(dst, msg []byte) ([]byte, Encoding, error){"text": c.DecodeText, "binary": c.DecodeBinary} {
			msg := text
			if name == "binary" {
				msg = bin
			}
			got, enc, err := decode(out[:0], msg)
			if err != nil || enc != e || !bytes.Equal(got, f.Data) {
				t.Fatalf("%s: %s form decodes to %d bytes (%v, %v), want the %d input bytes", f.Name, name, len(got), enc, err, len(f.Data))
			}
			out = got
		}
	}
}

// Side by side with tiktoken-go: the same ids for every corpus file that has
// no special-token text (tiktoken-go has no special tokens), and for the
// pre-tokenization cases.
func TestCorpusMatchesTiktokenGo(t *testing.T) {
	c := New(Config{})
	for _, e := range []Encoding{Cl100k, O200k} {
		v := mustTokenizer(t, c, e).v
		special := 0
		for _, f := range testkit.Corpus(t) {
			s := string(f.Data)
			if hasSpecialText(v, s) {
				special++
				continue
			}
			if !compareWithTiktokenGo(t, v, s) {
				t.Errorf("%v %s: tiktoken-go splits this corpus file wrongly", e, f.Name)
			}
		}
		if special > 1 {
			t.Errorf("%v: %d corpus files hold special-token text, expected only req-chat-tiny-11", e, special)
		}
		for _, s := range pretokenizeCases {
			if !hasSpecialText(v, s) {
				compareWithTiktokenGo(t, v, s)
			}
		}
	}
}

// The corpus file with "<|endoftext|>" in a user message: the special token
// becomes its id, the text around it is tokenized as by tiktoken-go.
func TestCorpusSpecialToken(t *testing.T) {
	data := string(testkit.CorpusFile(t, "req-chat-tiny-11.json"))
	c := New(Config{})
	for e, id := range map[Encoding]uint32{Cl100k: 100257, O200k: 199999} {
		before, after, ok := bytes.Cut([]byte(data), []byte("<|endoftext|>"))
		if !ok || bytes.Contains(after, []byte("<|endoftext|>")) {
			t.Fatal("req-chat-tiny-11.json should hold <|endoftext|> once")
		}
		want := append(referenceIDs(t, e, string(before)), id)
		want = append(want, referenceIDs(t, e, string(after))...)
		got, err := mustTokenizer(t, c, e).Encode(nil, []byte(data))
		if err != nil || !equalIDs(got, want) {
			t.Errorf("%v: ids differ from tiktoken-go around the special token", e)
		}
	}
}
