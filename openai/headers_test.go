package openai

import (
	"net/http"
	"strings"
	"testing"
)

// Only the headers a client reads cross, bounded, and only well-formed
// ones are set.
func TestHeaders(t *testing.T) {
	h := http.Header{}
	h.Set("X-Request-Id", "req_1")
	h.Set("X-Ratelimit-Reset-Tokens", "6ms")
	h.Set("Openai-Processing-Ms", "87")
	h.Set("Set-Cookie", "secret")
	h.Set("X-Request-Id-Long", "no")
	h.Set("X-Ratelimit-Huge", strings.Repeat("x", 257))
	j := HeadersJSON(h)
	if string(j) != `{"openai-processing-ms":"87","x-ratelimit-reset-tokens":"6ms","x-request-id":"req_1"}` {
		t.Fatalf("HeadersJSON: %s", j)
	}
	if HeadersJSON(http.Header{"Server": {"x"}}) != nil {
		t.Fatal("HeadersJSON of no passed header")
	}
	out := http.Header{}
	SetHeaders(out, []byte(`{"x-request-id":"req_1","set-cookie":"a","x-ratelimit-a\r\nb":"c","x-ratelimit-b":"bad\r\nvalue","openai-processing-ms":7}`))
	if len(out) != 1 || out.Get("X-Request-Id") != "req_1" {
		t.Fatalf("SetHeaders: %v", out)
	}
	SetHeaders(out, []byte(`nope`))
	if len(out) != 1 {
		t.Fatalf("SetHeaders of a broken reply: %v", out)
	}
}

// SetHeaders never panics and sets only names it passes, with values
// without control characters.
func FuzzSetHeaders(f *testing.F) {
	f.Add([]byte(`{"x-request-id":"req_1","x-ratelimit-limit-requests":"10000"}`))
	f.Add([]byte(`{"x-ratelimit-\u0000":"a","x-request-id":"\u007f"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h := http.Header{}
		SetHeaders(h, b)
		if len(h) > maxHeaders {
			t.Fatalf("%d headers", len(h))
		}
		for name, v := range h {
			if !PassedHeader(name) || len(v) != 1 || strings.ContainsAny(v[0], "\r\n\x00") {
				t.Fatalf("set %q: %q", name, v)
			}
		}
	})
}
