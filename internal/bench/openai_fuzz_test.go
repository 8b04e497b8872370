package bench

import (
	"encoding/json"
	"testing"
)

// FuzzOpenAIBody: whatever chat request it is given, the body sent is
// still JSON, with "stream" and "model" as asked and nothing else changed.
func FuzzOpenAIBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"a","messages":[]}`,
		`{"model":"a","stream":true,"messages":[{"stream":false}]}`,
		` { "stream" : null , "messages" : [ ] , "model" : 5 }`,
		`{"messages":[],"stream":"yes","model":"\u00e9"}`,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, doc []byte, stream bool) {
		if !isChatRequest(doc) {
			return
		}
		cfg := OpenAIConfig{Requests: []Payload{{JSON: doc}}, Model: "m", Stream: stream}
		out := openAIBodies(&cfg)[0]
		var got, want map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s became %s: %v", doc, out, err)
		}
		if err := json.Unmarshal(doc, &want); err != nil {
			t.Fatal(err)
		}
		if _, had := want["stream"]; had || stream {
			want["stream"] = stream
		}
		if _, ok := want["model"].(string); ok {
			want["model"] = "m"
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if string(a) != string(b) {
			t.Fatalf("%s became %s, want %s", doc, a, b)
		}
	})
}
