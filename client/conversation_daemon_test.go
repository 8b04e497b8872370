package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/conversation"
	"github.com/m2md/m2md/negotiate"
)

// chatter is a provider that answers each request with an assistant
// message naming the request's last message, streamed in chunks when the
// request asks for it, and keeps every body its handler was given and
// every final reply it gave.
type chatter struct {
	mu     sync.Mutex
	bodies [][]byte
	finals [][]byte
}

// respond sends the final reply and keeps it.
func (ch *chatter) respond(w ResponseWriter, final []byte) {
	ch.mu.Lock()
	ch.finals = append(ch.finals, final)
	ch.mu.Unlock()
	w.Respond(final)
}

func (ch *chatter) ServeM2M(_ context.Context, req *Request, w ResponseWriter) {
	ch.mu.Lock()
	ch.bodies = append(ch.bodies, req.Body)
	n := len(ch.bodies)
	ch.mu.Unlock()
	var r struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(req.Body, &r); err != nil || len(r.Messages) == 0 {
		w.Error("bad_request", "no messages")
		return
	}
	answer := fmt.Sprintf("Answer %d, to %d messages. The last one was %d bytes long.", n, len(r.Messages), len(r.Messages[len(r.Messages)-1]))
	if !req.Stream {
		ch.respond(w, fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q,"refusal":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":12,"total_tokens":%d}}`,
			n, req.Model, answer, len(req.Body)/4, len(req.Body)/4+12))
		return
	}
	// One chunk alone, the others together (one batch reply where both
	// ends negotiated feature batch).
	w.Chunk(fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, n))
	var chunks [][]byte
	for i := 0; i < len(answer); i += 16 {
		chunks = append(chunks, fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q}}]}`, n, answer[i:min(i+16, len(answer))]))
	}
	w.Chunks(chunks...)
	ch.respond(w, fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, n))
}

func (ch *chatter) received() [][]byte {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return slices.Clone(ch.bodies)
}

func (ch *chatter) answered() [][]byte {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return slices.Clone(ch.finals)
}

// dialog plays turns of a conversation the way an SDK user does: each
// request is the previous one's messages, the answer's assistant message
// re-serialised (members reordered, extra members dropped), and a new user
// message. Every turn streams when stream is set.
type dialog struct {
	model    string
	stream   bool
	messages []map[string]any
}

func (cv *dialog) next(t *testing.T, prev *Response, user string) []byte {
	t.Helper()
	if prev != nil {
		var content string
		if len(prev.Chunks) > 0 {
			for _, c := range append(prev.Chunks, prev.Body) {
				var chunk struct {
					Choices []struct {
						Delta struct {
							Content string `json:"content"`
						} `json:"delta"`
					} `json:"choices"`
				}
				if err := json.Unmarshal(c, &chunk); err != nil {
					t.Fatal(err)
				}
				if len(chunk.Choices) > 0 {
					content += chunk.Choices[0].Delta.Content
				}
			}
		} else {
			var r struct {
				Choices []struct {
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(prev.Body, &r); err != nil || len(r.Choices) == 0 {
				t.Fatalf("reply %s: %v", prev.Body, err)
			}
			content = r.Choices[0].Message.Content
		}
		cv.messages = append(cv.messages, map[string]any{"content": content, "role": "assistant"})
	}
	cv.messages = append(cv.messages, map[string]any{"role": "user", "content": user})
	b, err := json.Marshal(map[string]any{"model": cv.model, "messages": cv.messages, "stream": cv.stream, "temperature": 0.3})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// userText is a turn's new message: a few hundred bytes, new each turn.
func userText(i int) string {
	return fmt.Sprintf("Turn %d. Please look at the function below and tell me what it returns for n = %d, and why:\n\nfunc f(n int) int {\n\tif n < 2 {\n\t\treturn n\n\t}\n\treturn f(n-1) + f(n-2)\n}\n", i, i*3)
}

// play runs turns of cv from req and checks that the provider's handler
// got every request byte for byte, and the caller every final reply (a
// reply delta's included).
func play(t *testing.T, req *Client, prov *chatter, cv *dialog, turns int) {
	t.Helper()
	before := len(prov.received())
	answeredBefore := len(prov.answered())
	var sent [][]byte
	var resp *Response
	for i := range turns {
		body := cv.next(t, resp, userText(i))
		sent = append(sent, body)
		var err error
		if resp, err = req.Do(testCtx(t), body); err != nil {
			t.Fatalf("turn %d: %v", i+1, err)
		}
		if cv.stream != (len(resp.Chunks) > 0) {
			t.Fatalf("turn %d: %d chunks", i+1, len(resp.Chunks))
		}
		if a := prov.answered(); len(a) <= answeredBefore+i || !bytes.Equal(resp.Body, a[answeredBefore+i]) {
			t.Fatalf("turn %d: the caller got the final reply\n%s\nthe handler's was not that", i+1, resp.Body)
		}
	}
	got := prov.received()[before:]
	if len(got) != turns {
		t.Fatalf("the handler got %d requests for %d turns", len(got), turns)
	}
	for i := range got {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("turn %d: the handler got\n%s\nwant\n%s", i+1, got[i], sent[i])
		}
	}
}

// replyDeltasSent returns p's Stats once it counts n reply deltas sent (a
// provider counts one once its write returned, which can be after the
// requester had it), or after a second.
func replyDeltasSent(t *testing.T, p *Client, n uint64) Stats {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		ps := p.Stats()
		if ps.ReplyDeltasSent >= n || time.Now().After(deadline) {
			return ps
		}
		time.Sleep(time.Millisecond)
	}
}

// Every turn after the first travels as a delta, in every transport and
// security mode, plain and streamed, and the handler gets the exact JSON.
func TestConversationDeltas(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	for _, tr := range transports {
		for _, mode := range modes {
			for _, stream := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/stream=%v", tr, mode, stream)
				t.Run(name, func(t *testing.T) {
					model := fmt.Sprintf("conv-%s-%s-%v", tr, mode, stream)
					prov := &chatter{}
					p := dial(t, d, tr, Options{AgentID: "p-" + model, Models: []string{model}, Security: mode, Handler: prov})
					r := dial(t, d, tr, Options{AgentID: "r-" + model, Security: mode})
					if !r.Session().Params.Has(negotiate.FeatureDelta) {
						t.Fatal("delta not negotiated")
					}
					const turns = 5
					play(t, r, prov, &dialog{model: model, stream: stream}, turns)
					rs, ps := r.Stats(), p.Stats()
					if rs.DeltasSent != turns-1 || rs.DeltaResends != 0 || ps.DeltasReceived != turns-1 || ps.BasesMissing != 0 {
						t.Fatalf("requester %+v\nprovider %+v", rs, ps)
					}
					// Every final reply but the first as a reply delta,
					// rebuilt byte for byte (play compared them): the
					// first turn's answer goes plain, a delta is tried
					// only for a continuation.
					ps = replyDeltasSent(t, p, rs.ReplyDeltasReceived)
					if rs.ReplyDeltasReceived != ps.ReplyDeltasSent || rs.ReplyDeltasReceived != turns-1 || rs.BadFrames != 0 {
						t.Fatalf("reply deltas: requester %+v\nprovider %+v", rs, ps)
					}
					// Streamed: a chunk, a batch of the others, the final.
					if stream && rs.Replies != 3*turns {
						t.Fatalf("%d replies for %d streamed turns: no batches", rs.Replies, turns)
					}
				})
			}
		}
	}
}

// On the corpus's conversations requests shrink by an order of magnitude
// more than per-message framing gives (docs/benchmarks.md has the figures).
func TestConversationCorpus(t *testing.T) {
	d := startDaemon(t)
	files, err := filepath.Glob("../testdata/corpus/conversations/conv-01/turn-*.json")
	if err != nil || len(files) < 2 {
		t.Fatalf("%d turns: %v", len(files), err)
	}
	var turns [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		turns = append(turns, b)
	}
	// The provider answers with the assistant message the next turn holds.
	var mu sync.Mutex
	var got, answers [][]byte
	handler := HandlerFunc(func(_ context.Context, req *Request, w ResponseWriter) {
		mu.Lock()
		got = append(got, req.Body)
		i := len(got)
		mu.Unlock()
		msg := []byte(`{"role":"assistant","content":"The end."}`)
		if i < len(turns) {
			var next struct {
				Messages []json.RawMessage `json:"messages"`
			}
			if err := json.Unmarshal(turns[i], &next); err != nil {
				w.Error("bad", err.Error())
				return
			}
			msg = next.Messages[len(next.Messages)-2]
		}
		answer := fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":%s,"finish_reason":"stop"}]}`, i, msg)
		mu.Lock()
		answers = append(answers, answer)
		mu.Unlock()
		w.Respond(answer)
	})
	p := dial(t, d, "ws", Options{AgentID: "corpus-p", Models: []string{"gpt-4o"}, Handler: handler})
	r := dial(t, d, "ws", Options{AgentID: "corpus-r"})
	for i, body := range turns {
		resp, err := r.Do(testCtx(t), body)
		if err != nil {
			t.Fatalf("turn %d: %v", i+1, err)
		}
		mu.Lock()
		same := bytes.Equal(resp.Body, answers[i])
		mu.Unlock()
		if !same {
			t.Fatalf("turn %d: the answer arrived different", i+1)
		}
	}
	for i := range turns {
		if !bytes.Equal(got[i], turns[i]) {
			t.Fatalf("turn %d arrived different", i+1)
		}
	}
	s := r.Stats()
	if s.DeltasSent != uint64(len(turns)-1) {
		t.Fatalf("%d deltas for %d turns", s.DeltasSent, len(turns))
	}
	t.Logf("%d turns: %d JSON bytes in %d wire bytes (%.1fx); answers: %d JSON bytes in %d wire bytes (%.2fx), %d reply deltas",
		len(turns), s.JSONBytesSent, s.WireBytesSent, s.SendRatio(), s.JSONBytesReceived, s.WireBytesReceived, s.ReceiveRatio(), s.ReplyDeltasReceived)
	if ps := replyDeltasSent(t, p, s.ReplyDeltasReceived); s.ReplyDeltasReceived != ps.ReplyDeltasSent || s.ReplyDeltasReceived < uint64(len(turns)-1) {
		t.Fatalf("reply deltas: %d received, %d sent", s.ReplyDeltasReceived, ps.ReplyDeltasSent)
	}
	if s.SendRatio() < 20 {
		t.Fatalf("requests only %.1fx smaller than their JSON", s.SendRatio())
	}
}

// A provider that lost a base answers base_missing; the client resends the
// request in full, once, and the caller sees only the reply. After each
// miss the next 0, 1, 3, then 7 turns go in full, then a delta is tried
// again.
func TestConversationBaseMissing(t *testing.T) {
	d := startDaemon(t)
	prov := &chatter{}
	p := dial(t, d, "quic", Options{AgentID: "forgetful", Models: []string{"forget"}, Handler: prov, ConversationBases: -1})
	r := dial(t, d, "quic", Options{AgentID: "asker"})
	const turns = 17
	play(t, r, prov, &dialog{model: "forget"}, turns)
	// Deltas, each base_missing and resent, at turns 2, 3, 5, 9 and 17;
	// turns 4, 6-8 and 10-16 in full.
	rs, ps := r.Stats(), p.Stats()
	if rs.DeltasSent != 5 || rs.DeltaResends != 5 || ps.BasesMissing != 5 || ps.DeltasReceived != 0 || rs.Requests != turns+5 {
		t.Fatalf("requester %+v\nprovider %+v", rs, ps)
	}
}

// A provider that left mid-conversation: the daemon answers base_missing
// for the next delta, the client resends it in full to another provider.
func TestConversationProviderLeaves(t *testing.T) {
	d := startDaemon(t)
	first, second := &chatter{}, &chatter{}
	p1 := dial(t, d, "ws", Options{AgentID: "first", Models: []string{"leave"}, Handler: first})
	r := dial(t, d, "ws", Options{AgentID: "stays"})
	cv := &dialog{model: "leave"}
	var resp *Response
	var err error
	for i := range 3 {
		if resp, err = r.Do(testCtx(t), cv.next(t, resp, userText(i))); err != nil {
			t.Fatal(err)
		}
	}
	p1.Close()
	dial(t, d, "ws", Options{AgentID: "second", Models: []string{"leave"}, Handler: second})
	body := cv.next(t, resp, userText(3))
	if _, err := r.Do(testCtx(t), body); err != nil {
		t.Fatalf("turn 4, after the provider left: %v", err)
	}
	if got := second.received(); len(got) != 1 || !bytes.Equal(got[0], body) {
		t.Fatalf("second provider got %d requests", len(got))
	}
	if rs := r.Stats(); rs.DeltasSent != 3 || rs.DeltaResends != 1 {
		t.Fatalf("requester %+v", rs)
	}
}

// Without the feature on either side requests travel in full, and the
// handler sees no difference; a provider without it gets full frames
// without their block.
func TestConversationWithoutDelta(t *testing.T) {
	d := startDaemon(t)
	off := []negotiate.Feature{negotiate.FeatureDelta}
	for _, tc := range []struct {
		name           string
		prov, req      Options
		deltas, resent uint64
	}{
		{"requester without", Options{}, Options{DisableFeatures: off}, 0, 0},
		{"requester keeps nothing", Options{}, Options{ConversationHistory: -1}, 0, 0},
		// The daemon has no base for a provider without delta: the deltas
		// of turns 2 and 3 come back base_missing, turn 4 goes in full.
		{"provider without", Options{DisableFeatures: off}, Options{}, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("plain-%d", tc.deltas+uint64(len(tc.name)))
			model := "model-" + id
			prov := &chatter{}
			tc.prov.AgentID, tc.prov.Models, tc.prov.Handler = "p-"+id, []string{model}, prov
			tc.req.AgentID = "r-" + id
			tc.prov.Security, tc.req.Security = frame.SecurityHMAC, frame.SecurityHMAC
			p := dial(t, d, "ws", tc.prov)
			r := dial(t, d, "ws", tc.req)
			play(t, r, prov, &dialog{model: model}, 4)
			if rs := r.Stats(); rs.DeltasSent != tc.deltas || rs.DeltaResends != tc.resent {
				t.Fatalf("requester %+v", rs)
			}
			// No block reached the provider: no reply deltas either.
			if rs, ps := r.Stats(), p.Stats(); rs.ReplyDeltasReceived != 0 || ps.ReplyDeltasSent != 0 {
				t.Fatalf("reply deltas: requester %+v\nprovider %+v", rs, ps)
			}
		})
	}
}

// A provider whose budget holds one base: two interleaved conversations
// evict each other's, so each second turn's delta comes back base_missing
// and is resent in full (whose base in turn evicts the other's). Callers
// see only their replies, the handler only the exact requests.
func TestConversationBudgetEviction(t *testing.T) {
	d := startDaemon(t)
	prov := &chatter{}
	const budget = 1100
	p := dial(t, d, "ws", Options{AgentID: "small", Models: []string{"budget"}, Handler: prov, ConversationBases: budget})
	r := dial(t, d, "ws", Options{AgentID: "two-chats"})
	a, b := &dialog{model: "budget"}, &dialog{model: "budget"}
	var ra, rb *Response
	var sent [][]byte
	for i := range 2 {
		for _, cv := range []struct {
			c    *dialog
			resp **Response
		}{{a, &ra}, {b, &rb}} {
			body := cv.c.next(t, *cv.resp, userText(i))
			sent = append(sent, body)
			resp, err := r.Do(testCtx(t), body)
			if err != nil {
				t.Fatalf("turn %d: %v", i+1, err)
			}
			if size := len(body) + len(resp.Body) + conversation.EntryOverhead; size > budget || 2*size <= budget {
				t.Fatalf("a base of %d bytes: the budget %d must hold one, not two", size, budget)
			}
			*cv.resp = resp
		}
	}
	got := prov.received()
	if len(got) != len(sent) {
		t.Fatalf("the handler got %d requests for %d turns", len(got), len(sent))
	}
	for i := range got {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("request %d arrived different", i)
		}
	}
	if rs, ps := r.Stats(), p.Stats(); rs.DeltasSent != 2 || rs.DeltaResends != 2 || ps.BasesMissing != 2 || ps.DeltasReceived != 0 {
		t.Fatalf("requester %+v\nprovider %+v", rs, ps)
	}
}

// A request sent again and answered alike (a load test, a client's retry)
// shares, at both ends, the bytes kept of the first exchange; the
// conversation then continues as a delta against the newest of them (the
// requester's budget holds one), and the provider rebuilds it byte for
// byte.
func TestConversationRepeated(t *testing.T) {
	d := startDaemon(t)
	var (
		mu  sync.Mutex
		got [][]byte
	)
	const answer = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Sixty-three, since f(n) counts the calls."},"finish_reason":"stop"}]}`
	p := dial(t, d, "ws", Options{AgentID: "p-repeat", Models: []string{"repeat"}, Handler: HandlerFunc(func(_ context.Context, req *Request, w ResponseWriter) {
		mu.Lock()
		got = append(got, req.Body)
		mu.Unlock()
		w.Respond([]byte(answer))
	})})
	system, _ := json.Marshal(userText(1))
	first := []byte(`{"model":"repeat","messages":[{"role":"system","content":` + string(system) + `},{"role":"user","content":"What is f(6)?"}]}`)
	r := dial(t, d, "ws", Options{AgentID: "r-repeat", ConversationHistory: len(first) + len(answer) + conversation.EntryOverhead})
	next := []byte(`{"model":"repeat","messages":[{"role":"system","content":` + string(system) + `},{"role":"user","content":"What is f(6)?"},` +
		`{"role":"assistant","content":"Sixty-three, since f(n) counts the calls."},{"role":"user","content":"And f(7)?"}]}`)
	sent := [][]byte{first, first, first, next}
	for i, body := range sent {
		resp, err := r.Do(testCtx(t), body)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if string(resp.Body) != answer {
			t.Fatalf("request %d: answer %s", i+1, resp.Body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(sent) {
		t.Fatalf("the handler got %d requests for %d", len(got), len(sent))
	}
	for i := range got {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("request %d: the handler got\n%s\nwant\n%s", i+1, got[i], sent[i])
		}
	}
	if rs, ps := r.Stats(), p.Stats(); rs.DeltasSent != 1 || rs.DeltaResends != 0 || ps.DeltasReceived != 1 || ps.BasesMissing != 0 {
		t.Fatalf("requester %+v\nprovider %+v", rs, ps)
	}
}
