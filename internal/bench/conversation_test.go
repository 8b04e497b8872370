package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/internal/daemontest"
)

const conversationCorpus = "../../testdata/corpus/conversations"

// The corpus replayed through an in-process daemon: every turn arrives byte
// for byte both ways, deltas make the requests far smaller than without,
// and the figures add up.
func TestRunConversation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunConversation(ctx, ConversationConfig{Corpus: conversationCorpus})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	d, b := rep.ConversationRun, rep.Baseline
	if d.Turns != 36 || b.Turns != 36 || len(d.Conversations) != 3 {
		t.Fatalf("turns %d and %d in %d conversations, want 36 in 3", d.Turns, b.Turns, len(d.Conversations))
	}
	if d.Resends != 0 {
		t.Errorf("%d resends: affinity lost a base", d.Resends)
	}
	// Reply deltas: the answers to the 33 delta turns at least (a first
	// turn's answer has only its request to be compressed against), none
	// without the feature, and the responses smaller for them.
	if d.ReplyDeltas < 33 || b.ReplyDeltas != 0 || d.WireBytesResponses >= b.WireBytesResponses {
		t.Errorf("reply deltas %d and %d; response wire bytes %d with deltas, %d without", d.ReplyDeltas, b.ReplyDeltas, d.WireBytesResponses, b.WireBytesResponses)
	}
	if d.JSONBytesRequests != b.JSONBytesRequests || d.JSONBytesResponses != b.JSONBytesResponses {
		t.Error("the two runs sent different documents")
	}
	// Bytes, not speed: deterministic for a given corpus and codec.
	if d.RatioRequests < 5*b.RatioRequests {
		t.Errorf("requests %.1fx with deltas, %.1fx without", d.RatioRequests, b.RatioRequests)
	}
	var sum int64
	for _, c := range d.Conversations {
		sum += c.WireBytesRequests
		if c.Turns != len(c.TurnWireRequests) || c.Turns != len(c.TurnLatencyMillis) {
			t.Errorf("%s: %d turns, %d per-turn figures", c.Name, c.Turns, len(c.TurnWireRequests))
		}
	}
	if sum != d.WireBytesRequests {
		t.Errorf("conversations sum to %d wire bytes, total %d", sum, d.WireBytesRequests)
	}
	var m map[string]any
	decodeReport(t, rep, &m)
	for _, k := range []string{"json_bytes_requests", "wire_bytes_requests", "json_bytes_responses", "wire_bytes_responses", "turns", "errors"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON report lacks %q", k)
		}
		if _, ok := m["baseline"].(map[string]any)[k]; !ok {
			t.Errorf("JSON report lacks baseline.%q", k)
		}
	}
	var out strings.Builder
	if err := rep.WriteTable(&out); err != nil || !strings.Contains(out.String(), "conv-02") {
		t.Errorf("table: %v\n%s", err, out.String())
	}
}

// A provider leaving in the middle of a conversation costs one full resend
// and no error. Against a daemon of its own, the report's wire bytes,
// warm-up included, are exactly the DATA bytes the daemon received.
func TestRunConversationProviderLeaves(t *testing.T) {
	d := daemontest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunConversation(ctx, ConversationConfig{Corpus: conversationCorpus, Target: d.URL("ws"), ProviderLeaves: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Check(); err != nil {
		t.Fatal(err)
	}
	if rep.Resends != 1 || rep.Conversations[0].Resends != 1 {
		t.Errorf("%d resends (%d in the first conversation), want 1", rep.Resends, rep.Conversations[0].Resends)
	}
	if rep.Baseline.Resends != 0 {
		t.Errorf("baseline resent %d times", rep.Baseline.Resends)
	}

	var sent float64
	for _, run := range []*ConversationRun{&rep.ConversationRun, &rep.Baseline} {
		if run.WarmUp.Turns != warmUpTurns || run.WarmUp.WireBytesRequests <= 0 || run.WarmUp.WireBytesResponses <= 0 {
			t.Errorf("deltas %v: warm-up %+v", run.Deltas, run.WarmUp)
		}
		sent += float64(run.WireBytesRequests + run.WireBytesResponses + run.WarmUp.WireBytesRequests + run.WarmUp.WireBytesResponses)
	}
	d.WaitMetric(t, sent, "m2md_bytes_in_total")
	if got := d.Metric(t, "m2md_bytes_in_total"); got != sent {
		t.Errorf("the daemon received %.0f DATA bytes, the report accounts for %.0f", got, sent)
	}
	var m struct {
		WarmUp   map[string]int64 `json:"warm_up"`
		Baseline struct {
			WarmUp map[string]int64 `json:"warm_up"`
		} `json:"baseline"`
	}
	decodeReport(t, rep, &m)
	if m.WarmUp["wire_bytes_requests"] != rep.WarmUp.WireBytesRequests || m.Baseline.WarmUp["wire_bytes_responses"] != rep.Baseline.WarmUp.WireBytesResponses {
		t.Errorf("JSON warm_up %v, baseline %v", m.WarmUp, m.Baseline.WarmUp)
	}
	var out strings.Builder
	if err := rep.WriteTable(&out); err != nil || !strings.Contains(out.String(), "m2md_bytes_in_total") ||
		!strings.Contains(out.String(), fmt.Sprintf("%d + %d wire bytes", rep.WarmUp.WireBytesRequests, rep.WarmUp.WireBytesResponses)) {
		t.Errorf("the table's footnote does not give the warm-up bytes: %v\n%s", err, out.String())
	}
}

func TestLoadConversations(t *testing.T) {
	convs, err := LoadConversations(conversationCorpus)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range convs {
		for k := range c.Turns {
			var resp struct {
				Choices []struct {
					Message json.RawMessage `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(c.Responses[k], &resp); err != nil || len(resp.Choices) != 1 {
				t.Fatalf("%s turn %d: response %s", c.Name, k+1, c.Responses[k])
			}
			// The answer is what the next turn carries, byte for byte.
			if k+1 < len(c.Turns) && !strings.Contains(string(c.Turns[k+1]), string(resp.Choices[0].Message)) {
				t.Errorf("%s turn %d: the next turn does not carry the answer", c.Name, k+1)
			}
		}
	}
	dir := t.TempDir()
	if _, err := LoadConversations(dir); !errors.Is(err, ErrPayload) {
		t.Errorf("empty corpus: %v", err)
	}
	bad := filepath.Join(dir, "c")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"turn-01.json": `{"model":"m","messages":[{"role":"user","content":"a"}]}`, "turn-02.json": `{"model":"m","messages":[]}`} {
		if err := os.WriteFile(filepath.Join(bad, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LoadConversations(dir); !errors.Is(err, ErrPayload) {
		t.Errorf("a turn that does not continue the previous one: %v", err)
	}
}
