package conversation

import (
	"hash/maphash"
	"slices"
	"testing"

	"github.com/m2md/m2md/delta"
	"github.com/m2md/m2md/internal/testkit"
)

func keysOf(t *testing.T, seed maphash.Seed, doc string) []uint64 {
	t.Helper()
	k, ok := messageKeys(seed, []byte(doc), nil)
	if !ok {
		t.Fatalf("no messages in %s", doc)
	}
	return k
}

// Messages are compared by role, content and tool calls, whatever their
// serialisation: member order, spacing, escapes, extra members an SDK
// adds or drops, null or absent content.
func TestMessageKeys(t *testing.T) {
	seed := maphash.MakeSeed()
	a := keysOf(t, seed, `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi \u00e9 \"x\""},
		{"role":"assistant","content":null,"refusal":null,"annotations":[],"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
		{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"42"}]}]}`)
	b := keysOf(t, seed, `{"temperature":0.2, "messages" : [ {"content":"Be brief.","role":"system"}, {"role":"user","content":"Hi é \u0022x\u0022"},
		{"tool_calls":[{"function":{"arguments":"{\"a\":1}","name":"f"},"type":"function","id":"c1"}],"role":"assistant"},
		{"content":[{"text":"42","type":"text"}],"tool_call_id":"c1","role":"tool"}],"model":"m"}`)
	if !slices.Equal(a, b) || len(a) != 4 {
		t.Fatalf("same messages, different keys:\n%x\n%x", a, b)
	}
	for i, other := range []string{
		`{"messages":[{"role":"system","content":"Be brief!"}]}`,
		`{"messages":[{"role":"user","content":"Be brief."}]}`,
		`{"messages":[{"role":"system","content":"Be brief.","tool_call_id":"x"}]}`,
		`{"messages":[{"role":"system","content":["Be brief."]}]}`,
	} {
		if k := keysOf(t, seed, other); k[0] == a[0] {
			t.Errorf("%d: %s has the key of another message", i, other)
		}
	}
	// A key covers every message before it.
	c := keysOf(t, seed, `{"messages":[{"role":"system","content":"Other."},{"role":"user","content":"Hi é \"x\""}]}`)
	if c[1] == a[1] {
		t.Error("messages[1] keyed alike after different messages[0]")
	}
	for _, doc := range []string{`{"messages":[]}`, `{"model":"m"}`, `[1]`, `{"messages":{}}`, `not json`} {
		if _, ok := messageKeys(seed, []byte(doc), nil); ok {
			t.Errorf("%s: keys without messages", doc)
		}
	}
}

// The assistant message of a response, plain or streamed in chunks, has
// the key it has in the request that sends it back.
func TestReplyKey(t *testing.T) {
	seed := maphash.MakeSeed()
	next := keysOf(t, seed, `{"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":"Sure: calling.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny"}]}`)
	first := keysOf(t, seed, `{"messages":[{"role":"user","content":"q"}]}`)
	want := next[1]
	if chain(seed, first[0], 0) == want {
		t.Fatal("chain ignores its message")
	}
	for _, tc := range []struct {
		name   string
		resp   string
		stream bool
	}{
		{"response", `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Sure: calling.","refusal":null,
			"tool_calls":[{"type":"function","id":"call_1","function":{"name":"lookup","arguments":"{\"city\":\"Paris\"}"}}]}}]}`, false},
		{"stream", `{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` +
			`{"id":"c","choices":[{"index":0,"delta":{"content":"Sure: "}}]}` +
			`{"id":"c","choices":[{"index":0,"delta":{"content":"calling."}}]}` +
			`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":""}}]}}]}` +
			`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}` +
			`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}` +
			`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + `"[DONE]"`, true},
	} {
		k, ok := replyKey(seed, []byte(tc.resp), tc.stream)
		if !ok || chain(seed, first[0], k) != want {
			t.Errorf("%s: reply key %x (%v) does not continue the conversation", tc.name, k, ok)
		}
	}
	for _, bad := range []string{`{"choices":[]}`, `{"error":{}}`, `nope`} {
		if _, ok := replyKey(seed, []byte(bad), false); ok {
			t.Errorf("%s: a reply key", bad)
		}
		if _, ok := replyKey(seed, []byte(bad), true); ok {
			t.Errorf("%s (stream): a reply key", bad)
		}
	}
}

func testBase(n int) *delta.Base {
	return delta.NewBase(make([]byte, n/2), make([]byte, n-n/2))
}

// The base of a request is the kept request its messages continue, the
// longest when several do; least recently used documents leave first.
func TestHistory(t *testing.T) {
	h := NewHistory(3 * (1000 + EntryOverhead))
	turn1 := `{"messages":[{"role":"user","content":"one"}]}`
	turn2 := `{"messages":[{"role":"user","content":"one"},{"role":"assistant","content":"A1"},{"role":"user","content":"two"}]}`
	turn3 := `{"messages":[{"role":"user","content":"one"},{"role":"assistant","content":"A1"},{"role":"user","content":"two"},{"role":"assistant","content":"A2"},{"role":"user","content":"three"}]}`
	reply := func(content string) uint64 {
		k, ok := replyKey(h.seed, []byte(`{"choices":[{"message":{"role":"assistant","content":"`+content+`"}}]}`), false)
		if !ok {
			t.Fatal("no reply key")
		}
		return k
	}
	last := func(doc string) uint64 { k := keysOf(t, h.seed, doc); return k[len(k)-1] }

	if id, _, _ := h.find(keysOf(t, h.seed, turn2)); id != 0 {
		t.Fatalf("empty history found %d", id)
	}
	b1 := testBase(1000)
	h.add(1, last(turn1), reply("A1"), b1, false, backoff{})
	if id, b, _ := h.find(keysOf(t, h.seed, turn2)); id != 1 || b != b1 {
		t.Fatalf("turn 2: base %d", id)
	}
	h.add(2, last(turn2), reply("A2"), testBase(1000), false, backoff{full: 3, misses: 3})
	if id, _, miss := h.find(keysOf(t, h.seed, turn3)); id != 2 || miss != (backoff{full: 3, misses: 3}) {
		t.Fatalf("turn 3: base %d, backoff %+v; want the longest, 2, and its backoff", id, miss)
	}
	// Another answer to turn 1 continues nothing kept.
	other := `{"messages":[{"role":"user","content":"one"},{"role":"assistant","content":"B1"},{"role":"user","content":"two"}]}`
	if id, _, _ := h.find(keysOf(t, h.seed, other)); id != 0 {
		t.Fatalf("other answer: base %d", id)
	}

	// Budget: three bases fit. Using 1 makes 2 the least recent.
	h.find(keysOf(t, h.seed, turn2))
	h.add(3, last(`{"messages":[{"role":"user","content":"x"}]}`), reply("X"), testBase(1000), false, backoff{})
	h.add(4, last(`{"messages":[{"role":"user","content":"y"}]}`), reply("Y"), testBase(1000), false, backoff{})
	if id, _, _ := h.find(keysOf(t, h.seed, turn3)); id != 1 {
		t.Fatalf("after eviction turn 3 finds %d, want 1 (2 was evicted)", id)
	}
	if len(h.index) != 3 || len(h.docs.m) != 3 || h.docs.used != 3*(1000+EntryOverhead) {
		t.Fatalf("index %d, docs %d, used %d", len(h.index), len(h.docs.m), h.docs.used)
	}
	// A base larger than the budget is not kept, and evicts nothing.
	h.add(5, last(`{"messages":[{"role":"user","content":"z"}]}`), reply("Z"), testBase(4000), false, backoff{})
	if len(h.docs.m) != 3 || h.docs.m[5] != nil {
		t.Fatalf("oversized base kept: %d docs", len(h.docs.m))
	}
	// Keeping a document again replaces it.
	h.add(4, last(`{"messages":[{"role":"user","content":"y"}]}`), reply("Y"), testBase(500), false, backoff{})
	if h.docs.used != 2*(1000+EntryOverhead)+500+EntryOverhead {
		t.Fatalf("used %d after replacing", h.docs.used)
	}
	// The same request answered alike again (a load test repeating one
	// body) replaces the older document instead of filling the budget.
	h.add(6, last(`{"messages":[{"role":"user","content":"y"}]}`), reply("Y"), testBase(500), false, backoff{})
	if len(h.docs.m) != 3 || h.docs.m[4] != nil || h.docs.m[6] == nil {
		t.Fatalf("repeated request: docs %v", h.docs.m)
	}
}

func TestBases(t *testing.T) {
	b := NewBases(2 * (100 + EntryOverhead))
	b1, b2, b3 := testBase(100), testBase(100), testBase(100)
	b.put("alice", 1, b1, 1)
	b.put("bob", 1, b2, 2)
	if b.Get("alice", 1) != b1 || b.Get("bob", 1) != b2 || b.Get("alice", 2) != nil {
		t.Fatal("lookup by requester and doc_id")
	}
	b.put("alice", 2, b3, 3) // evicts alice/1, the least recently used
	if b.Get("alice", 1) != nil || b.Get("bob", 1) != b2 || b.Get("alice", 2) != b3 {
		t.Fatal("eviction")
	}
}

// BenchmarkMessageKeys is what finding a base costs a requester per chat
// request, on the corpus's longest conversation turn:
//
//	go test ./internal/conversation -run '^$' -bench MessageKeys
func BenchmarkMessageKeys(b *testing.B) {
	doc := testkit.CorpusFile(b, "conversations/conv-01/turn-12.json")
	seed := maphash.MakeSeed()
	keys := make([]uint64, 0, 64)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := messageKeys(seed, doc, keys[:0]); !ok {
			b.Fatal("no messages")
		}
	}
}

// FuzzConversationKeys reads arbitrary requests and responses (a provider's
// reply is untrusted) as base finding does: never a panic, and a reply
// that yields a key yields the same key again (seeds under
// testdata/fuzz/FuzzConversationKeys).
func FuzzConversationKeys(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`), false)
	f.Add([]byte(`{"choices":[{"message":{"role":"assistant","content":"Hello"}}]}`), false)
	f.Add([]byte(`{"choices":[{"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]}}]}{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}]}`), true)
	f.Add([]byte(`{"choices":[{"delta":{"tool_calls":[{"index":5}]}}]}`), true)
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"\u00e9"}],"x":{"b":1,"a":[true,null,1.5e3]}}]}`), false)
	seed := maphash.MakeSeed()
	f.Fuzz(func(t *testing.T, doc []byte, stream bool) {
		if keys, ok := messageKeys(seed, doc, nil); ok != (len(keys) > 0) {
			t.Fatalf("ok %v with %d keys", ok, len(keys))
		}
		k1, ok1 := replyKey(seed, doc, stream)
		k2, ok2 := replyKey(seed, doc, stream)
		if ok1 != ok2 || k1 != k2 {
			t.Fatalf("reply key %x %v, then %x %v", k1, ok1, k2, ok2)
		}
	})
}

// A delta that arrives ends the backoff: after one miss (the provider lost
// that one base) the very next turn is a delta again.
func TestBackoff(t *testing.T) {
	var b backoff
	var fulls []uint8
	for range 6 {
		b = b.missed()
		fulls = append(fulls, b.full)
	}
	if want := []uint8{0, 1, 3, 7, 7, 7}; !slices.Equal(fulls, want) {
		t.Fatalf("full turns after each miss: %v, want %v", fulls, want)
	}
}
