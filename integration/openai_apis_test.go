package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
)

// A Response object as OpenAI writes it.
const responseObject = `{"id":"resp_67ccd2bed1ec8190","object":"response","created_at":1741476542,"status":"%s","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4o-2024-08-06","output":[%s],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":%s,"user":null,"metadata":{}}`

const (
	responseMessage = `{"type":"message","id":"msg_67ccd2bf17f0","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Sunny in Paris.","annotations":[]}]}`
	responseUsage   = `{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}`
)

func responseJSON() string {
	return fmt.Sprintf(responseObject, "completed", responseMessage, responseUsage)
}

// responseEvents is a streamed Response as OpenAI sends it: typed events,
// ending with response.completed and no [DONE].
func responseEvents() string {
	inProgress := fmt.Sprintf(responseObject, "in_progress", "", "null")
	events := []struct{ typ, data string }{
		{"response.created", `{"type":"response.created","sequence_number":0,"response":` + inProgress + `}`},
		{"response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":` + inProgress + `}`},
		{"response.output_item.added", `{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"type":"message","id":"msg_67ccd2bf17f0","status":"in_progress","role":"assistant","content":[]}}`},
		{"response.content_part.added", `{"type":"response.content_part.added","sequence_number":3,"item_id":"msg_67ccd2bf17f0","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`},
		{"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_67ccd2bf17f0","output_index":0,"content_index":0,"delta":"Sunny ","logprobs":[]}`},
		{"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_67ccd2bf17f0","output_index":0,"content_index":0,"delta":"in Paris.","logprobs":[]}`},
		{"response.output_text.done", `{"type":"response.output_text.done","sequence_number":6,"item_id":"msg_67ccd2bf17f0","output_index":0,"content_index":0,"text":"Sunny in Paris.","logprobs":[]}`},
		{"response.content_part.done", `{"type":"response.content_part.done","sequence_number":7,"item_id":"msg_67ccd2bf17f0","output_index":0,"content_index":0,"part":{"type":"output_text","text":"Sunny in Paris.","annotations":[]}}`},
		{"response.output_item.done", `{"type":"response.output_item.done","sequence_number":8,"output_index":0,"item":` + responseMessage + `}`},
		{"response.completed", `{"type":"response.completed","sequence_number":9,"response":` + responseJSON() + `}`},
	}
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", e.typ, e.data)
	}
	return b.String()
}

// responses serves POST /v1/responses; model chat-only is a server
// without it (Go's own 404 page, as vLLM or Ollama builds without it
// answer).
func (u *testUpstream) responses(w http.ResponseWriter, r *http.Request) {
	body := u.record(r)
	switch model := modelOf(body); {
	case model == "chat-only":
		http.NotFound(w, r)
	case model == "responses-truncated":
		// Two events, then the end of the body: no terminal event.
		w.Header().Set("Content-Type", "text/event-stream")
		ev := responseEvents()
		io.WriteString(w, ev[:strings.Index(ev, "event: response.output_item.added")])
	case bytes.Contains(body, []byte(`"stream":true`)):
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range strings.SplitAfter(responseEvents(), "\n\n") {
			io.WriteString(w, ev)
			http.NewResponseController(w).Flush()
		}
	default:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, responseJSON())
	}
}

// Legacy completions as OpenAI writes them.
const (
	completionJSON  = `{"id":"cmpl-uqkvlQyYK7bGYrRHQ0eXlWi7","object":"text_completion","created":1589478378,"model":"gpt-3.5-turbo-instruct","system_fingerprint":"fp_44709d6fcb","choices":[{"text":"\n\nThis is indeed a test","index":0,"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`
	completionChunk = `{"id":"cmpl-7iA7iJjj8V2zOkCGvWF2hAkDWBQZe","object":"text_completion","created":1690759702,"choices":[{"text":"%s","index":0,"logprobs":null,"finish_reason":%s}],"model":"gpt-3.5-turbo-instruct","system_fingerprint":"fp_44709d6fcb"}`
)

var completionChunks = []string{
	fmt.Sprintf(completionChunk, "This", "null"),
	fmt.Sprintf(completionChunk, " is a", "null"),
	fmt.Sprintf(completionChunk, " test", `"stop"`),
}

func (u *testUpstream) completions(w http.ResponseWriter, r *http.Request) {
	body := u.record(r)
	if modelOf(body) == "chat-only" {
		http.NotFound(w, r)
		return
	}
	if bytes.Contains(body, []byte(`"stream":true`)) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range completionChunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
			http.NewResponseController(w).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, completionJSON)
}

// The Responses API and legacy completions through the ingress, the
// daemon and m2md upstream to the model server, with the OpenAI Go SDK:
// each request reaches the server's endpoint of its API byte for byte, and
// each answer, streamed or not, reaches the SDK as the server wrote it.
func TestOpenAIResponsesAndCompletions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tr   string
		mode frame.Security
	}{{"quic", frame.SecurityNone}, {"ws", frame.SecurityHMAC}, {"quic", frame.SecurityAEAD}} {
		t.Run(tc.tr+"/"+tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			e := startEdges(t, tc.tr, tc.mode, nil, nil)
			var sent sentBodies
			c := e.sdk("any", option.WithMiddleware(sent.middleware))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			checkSent := func(what string) {
				t.Helper()
				if got, _ := e.upstream.last(); !bytes.Equal(got, sent.last()) {
					t.Fatalf("%s: the server got\n%s\nthe SDK sent\n%s", what, got, sent.last())
				}
			}

			params := responses.ResponseNewParams{
				Model: "gpt-4o", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")},
				MaxOutputTokens: openai.Int(200),
			}
			resp, err := c.Responses.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if resp.RawJSON() != responseJSON() || resp.OutputText() != "Sunny in Paris." || resp.Usage.TotalTokens != 123 {
				t.Fatalf("Responses.New: %q\n%s", resp.OutputText(), resp.RawJSON())
			}
			checkSent("Responses.New")

			st := c.Responses.NewStreaming(ctx, params)
			var types []string
			var text strings.Builder
			for st.Next() {
				ev := st.Current()
				types = append(types, ev.Type)
				if ev.Type == "response.output_text.delta" {
					text.WriteString(ev.Delta)
				}
				if ev.Type == "response.completed" && ev.Response.OutputText() != "Sunny in Paris." {
					t.Fatalf("response.completed: %s", ev.RawJSON())
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			if len(types) != 10 || types[0] != "response.created" || types[9] != "response.completed" || text.String() != "Sunny in Paris." {
				t.Fatalf("streamed events %v, text %q", types, text.String())
			}
			checkSent("Responses.NewStreaming")

			// The stream as the server wrote it, byte for byte: the event
			// lines, no [DONE].
			r, err := http.Post(e.base+"/v1/responses", "application/json", strings.NewReader(`{"model":"gpt-4o","input":"Weather in Paris?","stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != 200 || r.Header.Get("Content-Type") != "text/event-stream" || string(out) != responseEvents() {
				t.Fatalf("HTTP %d %s:\n%s", r.StatusCode, r.Header.Get("Content-Type"), out)
			}

			comp, err := c.Completions.New(ctx, openai.CompletionNewParams{
				Model: "gpt-4o", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say this is a test")}, MaxTokens: openai.Int(7),
			})
			if err != nil {
				t.Fatal(err)
			}
			if comp.RawJSON() != completionJSON || comp.Choices[0].Text != "\n\nThis is indeed a test" {
				t.Fatalf("Completions.New: %s", comp.RawJSON())
			}
			checkSent("Completions.New")

			cst := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
				Model: "gpt-4o", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say this is a test")},
			})
			i := 0
			for cst.Next() {
				if i >= len(completionChunks) || cst.Current().RawJSON() != completionChunks[i] {
					t.Fatalf("completion chunk %d: %s", i, cst.Current().RawJSON())
				}
				i++
			}
			if err := cst.Err(); err != nil || i != len(completionChunks) {
				t.Fatalf("%d completion chunks, err %v", i, err)
			}
			checkSent("Completions.NewStreaming")
		})
	}
}

// A model server without the Responses API (or legacy completions) gives
// the HTTP client a 404 in OpenAI's error shape naming what is missing; a
// Responses stream the server breaks off before its terminal event ends in
// an error the SDK reports, never as a complete answer.
func TestOpenAIResponsesUnsupported(t *testing.T) {
	t.Parallel()
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	c := e.sdk("any")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	input := responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}
	_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "chat-only", Input: input})
	if ae := apiError(t, err); ae.StatusCode != 404 || ae.Code != "unsupported_api" || !strings.Contains(ae.Message, "/responses") {
		t.Fatalf("Responses.New on a server without it: %d %q %q", ae.StatusCode, ae.Code, ae.Message)
	}
	st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "chat-only", Input: input})
	for st.Next() {
		t.Fatalf("event from a server without the API: %s", st.Current().RawJSON())
	}
	if ae := apiError(t, st.Err()); ae.StatusCode != 404 || ae.Code != "unsupported_api" {
		t.Fatalf("NewStreaming on a server without it: %d %q", ae.StatusCode, ae.Code)
	}
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: "chat-only", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}})
	if ae := apiError(t, err); ae.StatusCode != 404 || ae.Code != "unsupported_api" || !strings.Contains(ae.Message, "/completions") {
		t.Fatalf("Completions.New on a server without it: %d %q %q", ae.StatusCode, ae.Code, ae.Message)
	}

	st = c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "responses-truncated", Input: input})
	n := 0
	for st.Next() {
		n++
	}
	if err := st.Err(); n != 2 || err == nil || !strings.Contains(err.Error(), "terminal event") {
		t.Fatalf("truncated stream: %d events, err %v", n, err)
	}
}

// wantHeaders checks that an answer carries the model server's headers a
// client reads (x-request-id of the server's path, x-ratelimit-*,
// openai-processing-ms), and none of the others.
func wantHeaders(t *testing.T, what string, h http.Header, path string) {
	t.Helper()
	if h.Get("X-Request-Id") != "req_"+path || h.Get("Openai-Processing-Ms") != "87" ||
		h.Get("X-Ratelimit-Limit-Requests") != "10000" || h.Get("X-Ratelimit-Remaining-Tokens") != "29985" {
		t.Fatalf("%s: the server's headers did not reach the client: %v", what, h)
	}
	if h.Get("Openai-Organization") != "" || h.Get("Set-Cookie") != "" {
		t.Fatalf("%s: a header a client does not read crossed the mesh: %v", what, h)
	}
}

// The model server's response headers a client reads reach the OpenAI SDK
// through the mesh, with answers, streams and errors, for every API; a
// conversation's turns still travel as deltas.
func TestOpenAIResponseHeaders(t *testing.T) {
	t.Parallel()
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	c := e.sdk("any")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var resp *http.Response
	chat, err := c.Chat.Completions.New(ctx, chatParams("gpt-4o"), option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	wantHeaders(t, "chat", resp.Header, "/v1/chat/completions")

	st := c.Chat.Completions.NewStreaming(ctx, chatParams("gpt-4o-mini"), option.WithResponseInto(&resp))
	for st.Next() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	wantHeaders(t, "chat stream", resp.Header, "/v1/chat/completions")

	input := responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}
	if _, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o", Input: input}, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	wantHeaders(t, "Responses", resp.Header, "/v1/responses")
	if _, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "text-embedding-3-small", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hi")},
	}, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	wantHeaders(t, "embeddings", resp.Header, "/v1/embeddings")

	_, err = c.Chat.Completions.New(ctx, chatParams("rate-limited"))
	ae := apiError(t, err)
	wantHeaders(t, "a 429 of the server", ae.Response.Header, "/v1/chat/completions")

	// The next turn of the conversation: a delta, whose base the headers
	// reply is no part of on either side.
	deltas := e.agent.Stats().DeltasReceived
	params := chatParams("gpt-4o")
	params.Messages = append(params.Messages, chat.Choices[0].Message.ToParam(), openai.UserMessage("And tomorrow?"))
	if _, err := c.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	wantHeaders(t, "a delta turn", resp.Header, "/v1/chat/completions")
	if e.agent.Stats().DeltasReceived == deltas {
		t.Fatal("the next turn did not travel as a delta")
	}
}

// The headers reply between two Go clients: a provider sends it only when
// asked, once, before any other reply; the requester gets it from
// Stream.Headers, never as a chunk.
func TestHeadersReply(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil)
	type seen struct {
		wants              bool
		second, afterChunk error
	}
	got := make(chan seen, 2)
	dialClient(t, d.url("quic"), client.Options{AgentID: "hdr", Models: []string{"hdr"}, Security: frame.SecurityAEAD, TLSConfig: d.clientTLS(t),
		Handler: client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
			hw := w.(client.HeaderWriter)
			var s seen
			s.wants = req.WantsHeaders
			if req.WantsHeaders {
				hw.Headers([]byte(`{"x-request-id":"req_1"}`))
				s.second = hw.Headers([]byte(`{"x-request-id":"req_2"}`))
			}
			w.Chunk([]byte(`{"n":1}`))
			s.afterChunk = hw.Headers([]byte(`{"x-request-id":"req_3"}`))
			got <- s
			w.Respond([]byte(`{"n":2}`))
		})})
	req := dialClient(t, d.url("quic"), client.Options{AgentID: "asker", Security: frame.SecurityAEAD, TLSConfig: d.clientTLS(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, ask := range []bool{true, false} {
		var opts []client.CallOption
		if ask {
			opts = append(opts, client.ResponseHeaders())
		}
		st, err := req.Stream(ctx, []byte(`{"model":"hdr","messages":[{"role":"user","content":"hi"}]}`), opts...)
		if err != nil {
			t.Fatal(err)
		}
		var replies []string
		for {
			b, err := st.Recv()
			if err != nil {
				if err != io.EOF {
					t.Fatal(err)
				}
				break
			}
			replies = append(replies, string(b))
		}
		s := <-got
		if s.wants != ask || !errors.Is(s.afterChunk, client.ErrResponded) || (ask && !errors.Is(s.second, client.ErrResponded)) {
			t.Fatalf("ask %v: provider saw %+v", ask, s)
		}
		wantHdr := ""
		if ask {
			wantHdr = `{"x-request-id":"req_1"}`
		}
		if string(st.Headers()) != wantHdr || strings.Join(replies, " ") != `{"n":1} {"n":2}` {
			t.Fatalf("ask %v: headers %s, replies %v", ask, st.Headers(), replies)
		}
	}
}
