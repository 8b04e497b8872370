package negotiate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestBatchRoundTrip(t *testing.T) {
	for _, chunks := range [][]string{
		{`{"a":1}`},
		{`{"id":"c","choices":[{"delta":{"content":"a,b]}\"["}}]}`, `{"x":[1,[2,{"y":"}"}]]}`, `"s"`, `7`},
		{` {"padded":true} `, "\n[]\t"},
	} {
		var in [][]byte
		for _, c := range chunks {
			in = append(in, []byte(c))
		}
		b := AppendBatch([]byte("x"), in)[1:]
		if !json.Valid(b) {
			t.Fatalf("%s: not JSON", b)
		}
		out, err := SplitBatch(nil, b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if len(out) != len(in) {
			t.Fatalf("%s: %d chunks, want %d", b, len(out), len(in))
		}
		for i := range in {
			if !bytes.Equal(out[i], in[i]) {
				t.Fatalf("chunk %d: %q, want %q", i, out[i], in[i])
			}
		}
	}
	// The exact bytes of docs/protocol.md §4.4's example.
	if got := AppendBatch(nil, [][]byte{[]byte(`{"a":1}`), []byte(`{"b":2}`)}); string(got) != `[{"a":1},{"b":2}]` {
		t.Fatalf("got %s", got)
	}
}

func TestSplitBatchRefuses(t *testing.T) {
	for _, b := range []string{
		``, `[]`, `[ ]`, `{"a":1}`, ` [1]`, `[1] `, `[1,]`, `[,1]`, `[1,,2]`, `[1]]`, `[[1]`, `[{]}`,
		`["a]`, `["a\"]`, `[}]`, `[1],[2]`, "[" + strings.Repeat("[", 129) + strings.Repeat("]", 129) + "]",
	} {
		if out, err := SplitBatch(nil, []byte(b)); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%q: %q, %v; want ErrBadBatch", b, out, err)
		}
	}
	// The deepest accepted nesting.
	deep := "[" + strings.Repeat("[", 127) + strings.Repeat("]", 127) + "]"
	if _, err := SplitBatch(nil, []byte(deep)); err != nil {
		t.Fatal(err)
	}
}

func FuzzSplitBatch(f *testing.F) {
	for _, s := range []string{`[{"a":1},{"b":2}]`, `["]",1]`, `[[],{}]`, `[1,]`, `[{]}`, `[ 1 , 2 ]`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := SplitBatch(nil, b)
		if err != nil {
			if !errors.Is(err, ErrBadBatch) || len(out) != 0 {
				t.Fatalf("%v with %d chunks", err, len(out))
			}
			return
		}
		// The chunks joined again are the input, byte for byte.
		if again := AppendBatch(nil, out); !bytes.Equal(again, b) {
			t.Fatalf("rejoined %q from %q", again, b)
		}
		if json.Valid(b) {
			var v []json.RawMessage
			if err := json.Unmarshal(b, &v); err != nil || len(v) != len(out) {
				t.Fatalf("%q: %d chunks, encoding/json sees %d (%v)", b, len(out), len(v), err)
			}
		}
	})
}

// 50 corpus-sized stream chunks, as m2md upstream batches a fast stream.
func BenchmarkSplitBatch(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-9xyz","object":"chat.completion.chunk","created":1705520400,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_abc","choices":[{"index":0,"delta":{"content":" the \"answer\" is"},"logprobs":null,"finish_reason":null}]}`)
	chunks := make([][]byte, 50)
	for i := range chunks {
		chunks[i] = chunk
	}
	arr := AppendBatch(nil, chunks)
	out := make([][]byte, 0, 50)
	b.SetBytes(int64(len(arr)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if out, err = SplitBatch(out[:0], arr); err != nil || len(out) != 50 {
			b.Fatal(err)
		}
	}
}
