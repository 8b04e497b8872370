package integration

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/m2md/m2md/frame"
)

// A multi-turn conversation from the OpenAI SDK through the ingress and
// m2md upstream: from the second turn on the ingress's requests travel as
// deltas (feature delta, docs/protocol.md §4.3), after answers plain and
// streamed, with the SDK re-serialising the assistant message it sends
// back; the upstream gets every request byte for byte as the SDK sent it.
func TestOpenAIConversationDeltas(t *testing.T) {
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	var sent sentBodies
	c := e.sdk("any", option.WithMiddleware(sent.middleware))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	params := chatParams("gpt-4o")
	check := func(turn int, deltas uint64) {
		t.Helper()
		if got, _ := e.upstream.last(); !bytes.Equal(got, sent.last()) {
			t.Fatalf("turn %d: upstream got\n%s\nSDK sent\n%s", turn, got, sent.last())
		}
		if s := e.agent.Stats(); s.DeltasReceived != deltas || s.BasesMissing != 0 {
			t.Fatalf("turn %d: the upstream agent rebuilt %d deltas (%d bases missing), want %d", turn, s.DeltasReceived, s.BasesMissing, deltas)
		}
	}
	// Turn 1: the answer calls a tool.
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	check(1, 0)
	// Turn 2: the assistant message as the SDK re-serialises it, the tool's
	// result.
	params.Messages = append(params.Messages, resp.Choices[0].Message.ToParam(),
		openai.ToolMessage("18 degrees, sunny", resp.Choices[0].Message.ToolCalls[0].ID))
	if resp, err = c.Chat.Completions.New(ctx, params); err != nil {
		t.Fatal(err)
	}
	check(2, 1)
	// Turn 3, streamed: a delta against turn 2 and its answer.
	params.Messages = append(params.Messages, resp.Choices[0].Message.ToParam(), openai.UserMessage("And tomorrow? Stream it."))
	st := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	check(3, 2)
	// Turn 4: a delta against the streamed turn, whose answer the ingress
	// rebuilt from the chunks.
	params.Messages = append(params.Messages, acc.Choices[0].Message.ToParam(), openai.UserMessage("Thanks."))
	if _, err = c.Chat.Completions.New(ctx, params); err != nil {
		t.Fatal(err)
	}
	check(4, 3)
}
