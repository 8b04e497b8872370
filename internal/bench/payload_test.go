package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/m2md/m2md/internal/testkit"
)

const corpusDir = "../../testdata/corpus"

func TestBuiltinPayloads(t *testing.T) {
	for _, tc := range []struct {
		size   string
		bytes  int
		source string
	}{
		{Size256B, 256, "req-chat-tiny-02.json"},
		{"1kb", 1024, "req-chat-1k-01.json"},
		{Size16KB, 16384, "req-multiturn-16k-01.json"},
	} {
		p, err := BuiltinPayload(tc.size)
		if err != nil {
			t.Fatalf("%s: %v", tc.size, err)
		}
		if len(p.JSON) != tc.bytes || !json.Valid(p.JSON) {
			t.Errorf("%s: %d bytes (valid %v), want %d", tc.size, len(p.JSON), json.Valid(p.JSON), tc.bytes)
		}
		// Everything up to the last message's content is the corpus
		// document's own bytes.
		orig := testkit.CorpusFile(t, tc.source)
		cut := bytes.LastIndex(orig, []byte(`"content":"`))
		if !bytes.Equal(p.JSON[:cut], orig[:cut]) {
			t.Errorf("%s: sample does not start like %s", tc.size, tc.source)
		}
		var doc struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(p.JSON, &doc); err != nil || doc.Model == "" || len(doc.Messages) == 0 {
			t.Errorf("%s: not a chat request: %v", tc.size, err)
		}
	}
	if _, err := BuiltinPayload("3KB"); !errors.Is(err, ErrPayload) {
		t.Errorf("unknown size: %v", err)
	}
}

func TestLoadCorpus(t *testing.T) {
	ps, err := LoadCorpus(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 113 { // 77 documents and 36 conversation turns (corpus README)
		t.Errorf("%d documents, want 113", len(ps))
	}
	for i := 1; i < len(ps); i++ {
		if ps[i-1].Name >= ps[i].Name {
			t.Fatalf("not sorted: %s before %s", ps[i-1].Name, ps[i].Name)
		}
	}
	dir := t.TempDir()
	if _, err := LoadCorpus(dir); !errors.Is(err, ErrPayload) {
		t.Errorf("empty folder: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"model":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCorpus(dir); !errors.Is(err, ErrPayload) {
		t.Errorf("invalid JSON: %v", err)
	}
	if _, err := LoadCorpus(filepath.Join(dir, "missing")); !errors.Is(err, ErrPayload) {
		t.Errorf("missing folder: %v", err)
	}
}

func TestResizeEscapes(t *testing.T) {
	doc := []byte(`{"messages":[{"role":"user","content":"a\"b\\c\nd — ü 日本"}],"model":"m"}`)
	for size := len(doc) - 20; size <= len(doc)+40; size++ {
		out, err := resizeLastContent(doc, size)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if len(out) != size || !json.Valid(out) {
			t.Fatalf("size %d: got %d bytes, valid %v: %s", size, len(out), json.Valid(out), out)
		}
	}
	if _, err := resizeLastContent(doc, 10); err == nil {
		t.Error("a size below the document's frame must fail")
	}
}

func TestReplaceModel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"model":"gpt-4o","messages":[]}`, `{"model":"m2md-bench-x","messages":[]}`},
		{`{"messages":[{"model":"inner"}],"n":1,"model" : "o1"}`, `{"messages":[{"model":"inner"}],"n":1,"model" : "m2md-bench-x"}`},
		{`{"tools":{"model":"x"},"stream":true,"model":"a\"b"}`, `{"tools":{"model":"x"},"stream":true,"model":"m2md-bench-x"}`},
	} {
		got, ok := replaceModel([]byte(tc.in), "m2md-bench-x")
		if !ok || string(got) != tc.want {
			t.Errorf("replaceModel(%s) = %s, %v; want %s", tc.in, got, ok, tc.want)
		}
	}
	for _, in := range []string{`{"messages":[{"model":"inner"}]}`, `{"model":3}`, `[1,2]`, `{"a":"model"}`} {
		if got, ok := replaceModel([]byte(in), "m"); ok {
			t.Errorf("replaceModel(%s) = %s, want no model", in, got)
		}
	}
}
