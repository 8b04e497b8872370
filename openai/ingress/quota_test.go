package ingress

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/jsonscan"
)

// A key's limits as a client meets them: its models, its concurrent
// requests, its requests and tokens per minute (each refused with the
// OpenAI error type and a wait), and the tokens its answers used settled
// against what was reserved.
func TestQuotaLimits(t *testing.T) {
	var qs quotas
	qs.update(map[string]KeyLimits{
		"k":    {Concurrent: 2, RequestsPerMinute: 3, TokensPerMinute: 10000, Models: []string{"gpt-4o"}},
		"open": {},
	})
	q, open := qs.get("k"), qs.get("open")
	if !q.allows("gpt-4o") || q.allows("gpt-4.1") || !open.allows("anything") || len(qs.all()) != 2 {
		t.Fatal("models: a key is limited to its list; a key without one is not")
	}
	now := time.Now()
	// A key without limits admits whatever comes.
	for range 5 {
		if _, r := open.admit(now); r != nil {
			t.Fatalf("a key without limits: %+v", r)
		}
	}
	t1, r := q.admit(now)
	t2, r2 := q.admit(now)
	if r != nil || r2 != nil {
		t.Fatalf("two concurrent requests of two: %+v %+v", r, r2)
	}
	if _, r := q.admit(now); r == nil || r.limit != "concurrent_requests" || r.max != 2 || r.wait <= 0 {
		t.Fatalf("a third concurrent request: %+v", r)
	}
	t2.done(0, true)
	t3, r := q.admit(now)
	if r != nil {
		t.Fatalf("the third request of the minute, a slot given back: %+v", r)
	}
	t3.done(0, true)
	if _, r := q.admit(now); r == nil || r.limit != "requests" || r.max != 3 || r.wait < 10*time.Second {
		t.Fatalf("a fourth request in the minute: %+v", r)
	}

	// Tokens: the prompt at 4 bytes a token plus max_tokens, or plus
	// ReservedCompletionTokens without it.
	var withMax, without jsonscan.Summary
	if withMax.Scan([]byte(`{"max_tokens":1000}`), jsonscan.Limits{}) != nil || without.Scan([]byte(`{}`), jsonscan.Limits{}) != nil {
		t.Fatal("scan")
	}
	if r := t1.reserve(&withMax, make([]byte, 400), frame.APIChat, now); r != nil || t1.reserved != 1100 {
		t.Fatalf("reserve 400 bytes with max_tokens 1000: %+v, %d reserved", r, t1.reserved)
	}
	t4 := &ticket{q: q}
	if r := t4.reserve(&without, make([]byte, 400), frame.APIChat, now); r != nil || t4.reserved != 100+ReservedCompletionTokens {
		t.Fatalf("reserve without max_tokens: %+v, %d reserved", r, t4.reserved)
	}
	left := 10000 - 1100 - 100 - ReservedCompletionTokens
	t5 := &ticket{q: q}
	if r := t5.reserve(&without, make([]byte, 4*(left-ReservedCompletionTokens+1)), frame.APIChat, now); r == nil || r.limit != "tokens" || r.max != 10000 || r.wait <= 0 {
		t.Fatalf("one token more than is left: %+v", r)
	}
	// The answer used 100 of the 1100: 1000 come back, and fit now.
	t1.done(100, true)
	if r := t5.reserve(&without, make([]byte, 4*(left-ReservedCompletionTokens+1)), frame.APIChat, now); r != nil {
		t.Fatalf("after the refund: %+v", r)
	}
	// An answer without usage is charged its reservation: nothing back.
	t4.done(0, false)
	if r := (&ticket{q: q}).reserve(&withMax, nil, frame.APIChat, now); r == nil {
		t.Fatal("a reservation charged in full was given back")
	}

	// A reload keeps what was used: the 3 requests of this minute count
	// against a raised limit of 5, and the key no longer limited by models
	// takes any.
	qs.update(map[string]KeyLimits{"k": {RequestsPerMinute: 5}})
	if qs.get("k") != q || !q.allows("gpt-4.1") {
		t.Fatal("a reload replaced the key's quota, or kept its model list")
	}
	for i := range 3 {
		tk, r := q.admit(now)
		if i < 2 && r != nil {
			t.Fatalf("request %d of 5 after the reload: %+v", 4+i, r)
		}
		if i == 2 && (r == nil || r.limit != "requests" || r.max != 5) {
			t.Fatalf("a sixth request in the minute: %+v", r)
		}
		if tk != nil {
			tk.done(0, true)
		}
	}

	rec := httptest.NewRecorder()
	(&refusal{"tokens", "tokens per minute (TPM)", 10000, 1500 * time.Millisecond}).write(rec, "k")
	var body struct {
		Error struct{ Type, Code string }
	}
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "2" || json.Unmarshal(rec.Body.Bytes(), &body) != nil ||
		body.Error.Type != "tokens" || body.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("refusal: %d, Retry-After %q, %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
}

// The tokens an answer used are its usage's prompt and completion tokens.
func TestUsageOf(t *testing.T) {
	for _, tc := range []struct {
		body string
		n    int
		ok   bool
	}{
		{`{"usage":{"prompt_tokens":5,"completion_tokens":7}}`, 12, true},
		{`{"usage":{"prompt_tokens":5}}`, 5, true},
		{`{"usage":{"completion_tokens":7}}`, 0, false},
		{`{"choices":[]}`, 0, false},
		{`{"usage":`, 0, false},
	} {
		if n, ok := usageOf([]byte(tc.body), frame.APIChat); n != tc.n || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.body, n, ok, tc.n, tc.ok)
		}
	}
}

// A request holds its concurrency slot from admission to done, whatever the
// key's limits: one refused for its rate gives the slot back, and requests
// of a key without a concurrency limit count against one a reload sets.
func TestQuotaSlots(t *testing.T) {
	now := time.Now()
	var qs quotas
	qs.update(map[string]KeyLimits{"c": {Concurrent: 2, RequestsPerMinute: 2}, "u": {}})
	c, u := qs.get("c"), qs.get("u")
	if _, r := c.admit(now); r != nil {
		t.Fatal(r)
	}
	second, r := c.admit(now)
	if r != nil {
		t.Fatal(r)
	}
	second.done(0, true)
	if _, r := c.admit(now); r == nil || r.limit != "requests" {
		t.Fatalf("a third request in the minute: %+v", r)
	}
	for range 3 {
		if _, r := u.admit(now); r != nil {
			t.Fatal(r)
		}
	}
	qs.update(map[string]KeyLimits{"c": {Concurrent: 2}, "u": {Concurrent: 4}})
	for name, q := range map[string]*quota{"c": c, "u": u} {
		if _, r := q.admit(now); r != nil {
			t.Fatalf("%s: the last free slot: %+v", name, r)
		}
		if _, r := q.admit(now); r == nil || r.limit != "concurrent_requests" {
			t.Fatalf("%s: one over the concurrency limit: %+v", name, r)
		}
	}
}
