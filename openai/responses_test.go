package openai

import (
	"strings"
	"testing"
)

func TestEventType(t *testing.T) {
	for _, tc := range []struct {
		event, typ string
		ok         bool
	}{
		{`{"type":"response.created","response":{"type":"x"}}`, "response.created", true},
		{`{"response":{"type":"x"},"sequence_number":1,"type":"response.completed"}`, "response.completed", true},
		{`{"type":"response.output_text\u002edelta"}`, "response.output_text.delta", true},
		{`{"response":{"type":"x"}}`, "", false},
		{`{"type":7}`, "", false},
		{`["type"]`, "", false},
		{`{"type":"a"`, "", false},
	} {
		typ, err := EventType(nil, []byte(tc.event))
		if (err == nil) != tc.ok || string(typ) != tc.typ {
			t.Errorf("%s: %q, %v", tc.event, typ, err)
		}
	}
	if !Terminal([]byte("response.completed")) || !Terminal([]byte("error")) || Terminal([]byte("response.output_text.done")) {
		t.Fatal("Terminal")
	}
}

func TestResponsesUsage(t *testing.T) {
	for _, tc := range []struct {
		b  string
		n  uint64
		ok bool
	}{
		{`{"object":"response","usage":{"input_tokens":36,"output_tokens":87,"total_tokens":123}}`, 123, true},
		{`{"type":"response.completed","response":{"usage":{"input_tokens":1,"output_tokens":2}}}`, 3, true},
		{`{"type":"response.created","response":{"usage":null}}`, 0, false},
		{`{"usage":{"input_tokens":-1,"output_tokens":2.5}}`, 0, false},
		{`{"usage":{"prompt_tokens":3}}`, 0, false},
		{`nope`, 0, false},
	} {
		if n, ok := ResponsesUsage([]byte(tc.b)); n != tc.n || ok != tc.ok {
			t.Errorf("%s: %d %v", tc.b, n, ok)
		}
	}
	if n, ok := MaxOutputTokens([]byte(`{"model":"m","max_output_tokens":200}`)); n != 200 || !ok {
		t.Fatalf("MaxOutputTokens: %d %v", n, ok)
	}
	if _, ok := MaxOutputTokens([]byte(`{"model":"m","max_output_tokens":"200"}`)); ok {
		t.Fatal("a string taken for max_output_tokens")
	}
}

// The readers of Responses events and bodies never panic, and EventType
// appends to what it is given.
func FuzzResponsesEvent(f *testing.F) {
	f.Add([]byte(`{"type":"response.completed","response":{"usage":{"input_tokens":1,"output_tokens":2}}}`))
	f.Add([]byte(`{"type":"\ud83d\ude00","max_output_tokens":1e3}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, err := EventType([]byte("event: "), b)
		if !strings.HasPrefix(string(typ), "event: ") || (err != nil && len(typ) != len("event: ")) {
			t.Fatalf("EventType appended %q (err %v)", typ, err)
		}
		ResponsesUsage(b)
		MaxOutputTokens(b)
	})
}

// The cost of naming an event of a Responses stream, which both edges pay
// for each event.
func BenchmarkEventType(b *testing.B) {
	event := []byte(`{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_67ccd2bf17f0","output_index":0,"content_index":0,"delta":"Sunny ","logprobs":[]}`)
	dst := make([]byte, 0, 64)
	b.SetBytes(int64(len(event)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EventType(dst[:0], event); err != nil {
			b.Fatal(err)
		}
	}
}
