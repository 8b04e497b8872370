package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// A requester: send a chat request to whichever agent serves the model.
func Example_request() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "quic://127.0.0.1:4433", client.Options{
		// The fingerprint m2md prints at start-up (self-signed certificate).
		PinSHA256: os.Getenv("M2MD_PIN"),
		Security:  frame.SecurityAEAD,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	resp, err := c.Do(ctx, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`))
	var re *client.RemoteError
	switch {
	case errors.As(err, &re) && re.Code == negotiate.CodeNoRoute:
		log.Fatal("nobody serves gpt-4o right now")
	case err != nil:
		log.Fatal(err)
	}
	fmt.Printf("%s answered: %s\n", resp.From, resp.Body)

	// The same request, streamed.
	st, err := c.Stream(ctx, []byte(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Hi"}]}`))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	for {
		chunk, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("chunk: %s\n", chunk)
	}

	s := c.Stats()
	fmt.Printf("sent %d JSON bytes as %d wire bytes (%.1fx)\n", s.JSONBytesSent, s.WireBytesSent, s.SendRatio())
}

// A provider: serve a model until interrupted, reconnecting when the
// daemon restarts.
func Example_provider() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	c, err := client.Dial(ctx, "wss://daemon.example:8443/m2m", client.Options{
		AgentID:   "llama-box-1",
		Models:    []string{"llama-3-70b"},
		Org:       "acme",
		AgentKey:  loadAgentKey(), // 32 bytes handed out by the org
		Security:  frame.SecurityAEAD,
		Reconnect: true,
		Handler: client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
			if req.Stream {
				for _, word := range []string{"Hello", " there"} {
					if err := w.Chunk([]byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"delta":{"content":"` + word + `"}}]}`)); err != nil {
						return // the requester is gone
					}
				}
			}
			w.Respond([]byte(`{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"Hello there"},"finish_reason":"stop"}]}`))
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	select {
	case <-ctx.Done():
		c.Close()
	case <-c.Done(): // replaced by another session with this agent id
		log.Print(c.Err())
	}
}

func loadAgentKey() []byte { return make([]byte, 32) }

// A conversation: each turn resends the whole conversation so far, as LLM
// clients do, and every turn after the first crosses the mesh as a delta
// against the turn before it and its answer (feature delta, on by
// default). Neither side does anything for it: the handler gets the whole
// request. Here the daemon runs in this process and both agents attach to
// it (daemon.Server.Attach); over the network it is the same.
func Example_conversation() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := daemon.New(daemon.Config{QUICAddr: "-", WSAddr: "-", AdminAddr: "-"})
	if err != nil {
		log.Fatal(err)
	}
	run, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(run) }()
	defer func() { stop(); <-ran }()
	<-srv.Ready()

	// The provider answers with the last message it was sent, and says how
	// many messages the request held.
	provider, err := client.DialConn(ctx, srv.Attach, client.Options{
		AgentID: "echo-bot",
		Models:  []string{"gpt-4o"},
		Handler: client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
			var chat struct{ Messages []map[string]string }
			if err := json.Unmarshal(req.Body, &chat); err != nil || len(chat.Messages) == 0 {
				w.Error(negotiate.CodeBadFrame, "not a chat request")
				return
			}
			answer := fmt.Sprintf("%d messages, the last: %s", len(chat.Messages), chat.Messages[len(chat.Messages)-1]["content"])
			resp, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": answer}}}})
			w.Respond(resp)
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()
	requester, err := client.DialConn(ctx, srv.Attach, client.Options{AgentID: "asker"})
	if err != nil {
		log.Fatal(err)
	}
	defer requester.Close()

	messages := []map[string]string{{"role": "system", "content": "You are the support assistant of a shop for bicycle parts. " +
		"Answer in plain English, in two or three sentences, and never invent order details, tracking numbers or stock levels. " +
		"Returns are accepted within 30 days if the part is unused and in its original packaging."}}
	for _, question := range []string{"Is my derailleur in stock?", "Can I return it?", "Thanks!"} {
		messages = append(messages, map[string]string{"role": "user", "content": question})
		body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": messages})
		resp, err := requester.Do(ctx, body)
		if err != nil {
			log.Fatal(err)
		}
		var answer struct {
			Choices []struct{ Message map[string]string }
		}
		if err := json.Unmarshal(resp.Body, &answer); err != nil || len(answer.Choices) == 0 {
			log.Fatalf("answer %s: %v", resp.Body, err)
		}
		messages = append(messages, answer.Choices[0].Message)
		fmt.Printf("%s (deltas sent so far: %d)\n", answer.Choices[0].Message["content"], requester.Stats().DeltasSent)
	}
	// Output:
	// 2 messages, the last: Is my derailleur in stock? (deltas sent so far: 0)
	// 4 messages, the last: Can I return it? (deltas sent so far: 1)
	// 6 messages, the last: Thanks! (deltas sent so far: 2)
}
