package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/m2md/m2md/client"
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
