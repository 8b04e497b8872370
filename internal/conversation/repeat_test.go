package conversation

import (
	"bytes"
	"testing"

	"github.com/m2md/m2md/delta"
)

// turnFor sends request through h as a full request and answers it with
// replies; the last reply ends it.
func turnFor(t *testing.T, h *History, request string, replies ...string) *Turn {
	t.Helper()
	tn := h.Begin([]byte(request))
	if tn == nil {
		t.Fatalf("no turn for %s", request)
	}
	req := []byte(request)
	tn.Sent(req, false)
	clear(req) // the caller's buffer is free once it is sent
	if got := tn.Request(); string(got) != request {
		t.Fatalf("request held %q", got)
	}
	for i, r := range replies {
		tn.Reply([]byte(r), i == len(replies)-1)
	}
	return tn
}

// keptBase is the base the history holds for doc.
func keptBase(h *History, doc uint64) *delta.Base {
	if e := h.docs.m[doc]; e != nil {
		return e.base
	}
	return nil
}

func wantBase(t *testing.T, b *delta.Base, request, response string) {
	t.Helper()
	if b == nil || string(b.Request()) != request || string(b.Response()) != response {
		t.Fatalf("base %v, want %q ‖ %q", b, request, response)
	}
}

// A request sent again and answered alike shares the kept bytes instead of
// a copy, and replaces the older document as before; one answered
// otherwise (at any point of its replies) gets bytes of its own.
func TestHistoryRepeat(t *testing.T) {
	h := NewHistory(1 << 20)
	const (
		req   = `{"model":"m","messages":[{"role":"user","content":"one"}]}`
		a1    = `{"choices":[{"message":{"role":"assistant","content":"A1"}}]}`
		b1    = `{"choices":[{"message":{"role":"assistant","content":"B1"}}]}`
		next  = `{"model":"m","messages":[{"role":"user","content":"one"},{"role":"assistant","content":"A1"},{"role":"user","content":"two"}]}`
		chunk = `{"choices":[{"delta":{"role":"assistant","content":"A"}}]}`
	)
	first := turnFor(t, h, req, a1)
	shared := keptBase(h, first.docID)
	wantBase(t, shared, req, a1)

	again := turnFor(t, h, req, a1)
	if keptBase(h, again.docID) != shared {
		t.Fatal("a repeated exchange copied the kept bytes")
	}
	if keptBase(h, first.docID) != nil {
		t.Fatal("the older document of a repeated exchange is still kept")
	}
	if again.Request() != nil {
		t.Fatal("the turn holds its request after its answer")
	}
	// The kept document is the base of the next turn, as before.
	if tn := h.Begin([]byte(next)); tn.baseID != again.docID || tn.Base() != shared {
		t.Fatalf("next turn: base %d, want %d", tn.baseID, again.docID)
	}

	third := turnFor(t, h, req, a1)
	if keptBase(h, third.docID) != shared {
		t.Fatal("a repeated exchange copied the kept bytes")
	}

	// Answered otherwise: its own bytes, beside the kept exchange.
	other := turnFor(t, h, req, b1)
	wantBase(t, keptBase(h, other.docID), req, b1)
	if keptBase(h, third.docID) != shared {
		t.Fatal("another answer replaced the kept exchange")
	}
	// The same answer in two pieces, and a longer one that begins alike:
	// the same bytes and key only for the first.
	split := turnFor(t, h, req, a1[:10], a1[10:])
	wantBase(t, keptBase(h, split.docID), req, a1)
	longer := turnFor(t, h, req, chunk, chunk, chunk)
	wantBase(t, keptBase(h, longer.docID), req, chunk+chunk+chunk)
	short := turnFor(t, h, req, chunk, chunk)
	wantBase(t, keptBase(h, short.docID), req, chunk+chunk)
	if keptBase(h, longer.docID) != nil && keptBase(h, longer.docID) == keptBase(h, short.docID) {
		t.Fatal("a shorter answer shares a longer one's bytes")
	}
}

// A request whose replies overrun the budget keeps its request (for a
// reply delta's dictionary) until the end, and joins nothing.
func TestHistoryRepeatOverBudget(t *testing.T) {
	const req = `{"model":"m","messages":[{"role":"user","content":"one"}]}`
	a := `{"choices":[{"message":{"role":"assistant","content":"` + string(bytes.Repeat([]byte("x"), 100)) + `"}}]}`
	h := NewHistory(len(req) + len(a) + EntryOverhead)
	first := turnFor(t, h, req, a)
	shared := keptBase(h, first.docID)
	tn := h.Begin([]byte(req))
	tn.Sent([]byte(req), false)
	tn.Reply([]byte(a), false)
	tn.Reply([]byte(a), false) // over the budget
	if string(tn.Request()) != req {
		t.Fatalf("request %q", tn.Request())
	}
	tn.Reply([]byte(a), true)
	if keptBase(h, tn.docID) != nil || keptBase(h, first.docID) != shared {
		t.Fatal("an answer over the budget was kept")
	}
}

func recordFor(b *Bases, from string, doc uint64, request string, failed bool, replies ...string) *Recording {
	req := []byte(request)
	r := b.Record(from, doc, req)
	clear(req) // the handler owns the delivered body
	for i, j := range replies {
		if !r.Reply([]byte(j), failed && i == len(replies)-1, i == len(replies)-1) {
			break
		}
	}
	return r
}

// A provider delivered the same request again and answering alike shares
// the kept base's bytes; another answer, or an error, does not.
func TestBasesRepeat(t *testing.T) {
	b := NewBases(1 << 20)
	const req, a, other = `{"messages":[{"role":"user","content":"one"}]}`, `{"choices":[{"message":{"content":"A"}}]}`, `{"choices":[{"message":{"content":"B"}}]}`
	r := recordFor(b, "alice", 1, req, false, a)
	if string(r.Request()) != req {
		t.Fatalf("request %q", r.Request())
	}
	first := b.Get("alice", 1)
	wantBase(t, first, req, a)
	recordFor(b, "alice", 2, req, false, a[:5], a[5:])
	if b.Get("alice", 2) != first || b.Get("alice", 1) != first {
		t.Fatal("a repeated exchange copied the kept bytes")
	}
	recordFor(b, "bob", 1, req, false, a)
	if b.Get("bob", 1) != first {
		t.Fatal("another requester's repeat copied the kept bytes")
	}
	recordFor(b, "alice", 3, req, false, other)
	wantBase(t, b.Get("alice", 3), req, other)
	recordFor(b, "alice", 4, req, false, a[:5])
	wantBase(t, b.Get("alice", 4), req, a[:5])
	recordFor(b, "alice", 5, req, true, a)
	if b.Get("alice", 5) != nil {
		t.Fatal("a failed answer was kept")
	}
}
