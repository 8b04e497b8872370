package conversation

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/m2md/m2md/internal/testkit"
)

// streamMessageReflect is streamMessage as it was written first, on
// encoding/json: the reference the jsonscan version is held to.
func streamMessageReflect(resp []byte) (_ []byte, ok bool) {
	var msg streamedMessage
	dec := json.NewDecoder(bytes.NewReader(resp))
	for dec.More() {
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return nil, false
		}
		if raw[0] != '{' {
			continue // a relay's end marker ("[DONE]"), not a chunk
		}
		var chunk struct {
			Choices []struct {
				Message json.RawMessage `json:"message"`
				Delta   struct {
					Role      string  `json:"role"`
					Content   *string `json:"content"`
					ToolCalls []struct {
						Index int `json:"index"`
						streamedCall
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal(raw, &chunk) != nil {
			return nil, false
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		if m := chunk.Choices[0].Message; len(m) > 0 && string(m) != "null" {
			// A stream that ends with a whole response: its message is
			// the answer.
			return m, true
		}
		d := chunk.Choices[0].Delta
		if msg.Role == "" {
			msg.Role = d.Role
		}
		if d.Content != nil {
			s := *d.Content
			if msg.Content != nil {
				s = *msg.Content + s
			}
			msg.Content = &s
		}
		for _, tc := range d.ToolCalls {
			if tc.Index < 0 || tc.Index > len(msg.ToolCalls) {
				return nil, false
			}
			if tc.Index == len(msg.ToolCalls) {
				msg.ToolCalls = append(msg.ToolCalls, streamedCall{})
			}
			c := &msg.ToolCalls[tc.Index]
			c.ID += tc.ID
			c.Type += tc.Type
			c.Function.Name += tc.Function.Name
			c.Function.Arguments += tc.Function.Arguments
		}
	}
	if msg.Role == "" {
		return nil, false
	}
	b, err := json.Marshal(msg)
	return b, err == nil
}

// corpusStream is n corpus stream chunks (the 14 of testdata/corpus in
// turn), concatenated as a turn records them, then "[DONE]".
func corpusStream(tb testing.TB, n int) []byte {
	tb.Helper()
	root, err := testkit.CorpusDir()
	if err != nil {
		tb.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "stream-chunk-*.json"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("corpus stream chunks: %v", err)
	}
	var b []byte
	for i := range n {
		c, err := os.ReadFile(files[i%len(files)])
		if err != nil {
			tb.Fatal(err)
		}
		b = append(b, bytes.TrimSpace(c)...)
	}
	return append(b, `"[DONE]"`...)
}

// The jsonscan version writes what the encoding/json version wrote, byte
// for byte, so the keys of recorded replies do not change.
func TestStreamMessageMatchesReflect(t *testing.T) {
	cases := map[string]string{
		"corpus 14": string(corpusStream(t, 14)),
		"corpus 50": string(corpusStream(t, 50)),
		"tool calls": `{"choices":[{"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":""}}]}}]}` + "\n" +
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}},{"index":1,"id":"c2","function":{"name":"g"}}]}}]}` +
			` {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Par\u00eds <&>\"}"}}]}}]}` + `"[DONE]"`,
		"whole message": `{"choices":[{"delta":{"role":"assistant","content":"x"}}]}{"choices":[{"index":0,"message":{"role":"assistant","content":"whole"}}]}`,
		"nulls":         `{"choices":null}{"choices":[null]}{"choices":[{"delta":null,"message":null}]}{"choices":[{"delta":{"role":"assistant","content":null,"tool_calls":[null]}}]}`,
		"escapes":       `{"choices":[{"delta":{"role":"assistant","content":"a\"b\\c\u2028\ud83d\ude00 \/"}}]}`,
		"empty":         ``,
		"no role":       `{"choices":[{"delta":{"content":"x"}}]}`,
		"bad index":     `{"choices":[{"delta":{"role":"assistant","tool_calls":[{"index":2}]}}]}`,
		"float index":   `{"choices":[{"delta":{"role":"assistant","tool_calls":[{"index":0.5}]}}]}`,
		"wrong type":    `{"choices":[{"delta":{"role":"assistant","content":5}}]}`,
		"choices type":  `{"choices":{}}`,
		"not JSON":      `{"choices":[{"delta":{"role":"assistant"}}]}{"choices"`,
		"scalars":       `1 true "x" [] {"choices":[{"delta":{"role":"assistant","content":"y"}}]}`,
	}
	for name, in := range cases {
		want, wantOK := streamMessageReflect([]byte(in))
		got, ok := streamMessage([]byte(in))
		if ok != wantOK || !bytes.Equal(got, want) {
			t.Errorf("%s: %q %v, want %q %v", name, got, ok, want, wantOK)
		}
	}
}

// A stream's message is rebuilt at the requester for every streamed
// response (the key of the next turn's base): 50 corpus chunks.
func BenchmarkStreamMessage(b *testing.B) {
	resp := corpusStream(b, 50)
	for _, impl := range []struct {
		name string
		f    func([]byte) ([]byte, bool)
	}{{"jsonscan", streamMessage}, {"encoding-json", streamMessageReflect}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(resp)))
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := impl.f(resp); !ok {
					b.Fatal("no message")
				}
			}
		})
	}
}

// FuzzStreamMessage: never a panic; a message is a JSON object; where
// both versions find a message in input whose member names are lower case
// and not repeated (encoding/json matches names in any case and merges
// repeated objects), it is the same message (seeds under
// testdata/fuzz/FuzzStreamMessage).
func FuzzStreamMessage(f *testing.F) {
	f.Add(corpusStream(f, 3))
	f.Add([]byte(`{"choices":[{"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]}}]}{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}]}`))
	f.Add([]byte(`{"choices":[{"message":{"role":"assistant","content":"Hello"}}]}`))
	f.Add([]byte(`{"choices":[{"delta":{"role":"assistant","content":"a\u00e9"}}]} "[DONE]"`))
	f.Fuzz(func(t *testing.T, resp []byte) {
		got, ok := streamMessage(resp)
		if ok {
			var m map[string]any
			if json.Unmarshal(got, &m) != nil && got[0] == '{' {
				t.Fatalf("message %q is not JSON", got)
			}
		}
		want, wantOK := streamMessageReflect(resp)
		if ok && wantOK && !bytes.Equal(got, want) && plainNames(resp) {
			t.Fatalf("%q: %q, encoding/json %q", resp, got, want)
		}
	})
}

// plainNames reports whether every member name in the chunks of resp is
// lower case and unique in its object, as far as a rough look tells.
func plainNames(resp []byte) bool {
	if strings.ToLower(string(resp)) != string(resp) {
		return false
	}
	for rest := resp; ; {
		var v []byte
		if v, rest = nextValue(rest); v == nil {
			return true
		}
		var chunk any
		dec := json.NewDecoder(bytes.NewReader(v))
		if dec.Decode(&chunk) != nil {
			continue
		}
		if hasDuplicates(v) {
			return false
		}
	}
}

// hasDuplicates reports whether an object of the JSON value v repeats a
// member name.
func hasDuplicates(v []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(v))
	var stack []map[string]bool
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				stack = append(stack, map[string]bool{})
				expectKey = true
				continue
			case '[':
				stack = append(stack, nil)
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if expectKey && len(stack) > 0 && stack[len(stack)-1] != nil {
				if stack[len(stack)-1][tok] {
					return true
				}
				stack[len(stack)-1][tok] = true
				expectKey = false
				continue
			}
		}
		expectKey = len(stack) > 0 && stack[len(stack)-1] != nil
	}
}
