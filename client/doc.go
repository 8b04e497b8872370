// Package client is the Go library agents use to talk to the m2md daemon
// (docs/protocol.md): to send LLM API requests to whichever agent serves a
// model, and to serve models themselves.
//
// A requester dials, sends JSON and gets JSON back:
//
//	c, err := client.Dial(ctx, "quic://daemon:4433", client.Options{PinSHA256: fp})
//	resp, err := c.Do(ctx, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`))
//	// resp.Body is the provider's final reply, resp.From its agent id
//
// Stream returns the replies one by one (stream chunks, then the final one),
// To addresses one agent instead of the model's providers, and SendFrame
// sends a frame encoded elsewhere. A provider announces its models and
// answers through a Handler, much like net/http:
//
//	c, err := client.Dial(ctx, url, client.Options{
//		AgentID: "gpu-1",
//		Models:  []string{"llama-3-70b"},
//		Handler: client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
//			w.Chunk(…)
//			w.Respond(…)
//		}),
//	})
//
// # What the library does for the caller
//
// Bodies travel as M2M v1 binary frames (package frame: Brotli-compressed
// from 100 bytes on), protected in the session's negotiated mode (none,
// HMAC-SHA256 or ChaCha20-Poly1305 with per-direction keys from the
// handshake), each carrying its channel's sequence number so that a replayed
// or reordered frame is refused. Over QUIC the session's requests share one
// data stream (feature shared_stream, docs/protocol.md §1: with a daemon
// that lacks it, each request has a stream of its own from a pool of
// long-lived streams); over WebSocket they share the one connection. Either
// way the messages a moment's requests make leave together, in as few
// system calls and packets as they fill. One goroutine per
// session reads and dispatches, verifying each frame; decoding happens in the
// goroutine that asked for it (Stream.Recv, the handler), so a large reply
// does not hold up the others. Handlers run in their own goroutines, at most
// Options.MaxConcurrentHandlers at once; beyond that the requester is told
// provider_busy rather than the connection stalling.
//
// The session is kept alive as the protocol prescribes: PINGs are answered,
// a silent daemon is PINGed and given up on after three missed PONGs, and a
// CLOSE from the daemon is acknowledged. With Options.Reconnect the client
// then reconnects with jittered exponential backoff, handshakes again and so
// re-registers its models; requests in flight fail with ErrConnectionLost
// (never hang) and new ones wait for the new session. A CLOSE with reason
// REPLACED (another session took this agent id) is final, as is Close.
//
// # Errors
//
// Error replies (schema 0x10, from the daemon or the provider) are returned
// as *RemoteError with their code (negotiate.CodeNoRoute,
// negotiate.CodeAgentGone, …: the protocol's codes are negotiate's). Frames
// that fail verification, the sequence check or decoding give ErrBadFrame,
// wrapping the security, negotiate or frame error. ErrConnectionLost,
// ErrClosed, ErrTooLarge, ErrSlowConsumer, ErrDeliveryCancelled and the
// context's errors cover the rest. Dial returns the handshake's errors
// (*negotiate.RejectError, negotiate.ErrBadAccept) as they are.
//
// # Conversations
//
// LLM clients resend the whole conversation on every turn. When the daemon
// grants feature delta (docs/protocol.md §4.3; on by default, off with
// Options.DisableFeatures), a chat request whose messages continue one this
// client sent earlier, followed by the answer it got, travels as a delta
// against that request and answer: a few hundred bytes whatever the length
// of the conversation. Nothing changes for the caller or the handler: the
// requester finds the base itself (messages compared by role, content and
// tool calls, so an SDK re-serialising the assistant message still
// matches), the provider rebuilds the exact JSON, and a provider that lost
// the base makes the requester resend the whole request, once,
// transparently. Options.ConversationHistory and ConversationBases bound
// what either side keeps.
//
// The answer travels back the same way: a provider's final response to a
// request that came with its extension block goes as a reply delta,
// compressed against that request (and the answer it continued), when that
// is smaller (ResponseWriter.Respond decides; Stats.ReplyDeltasSent counts
// them). The requester rebuilds the exact JSON; one that does not rebuild
// fails the request with ErrBadFrame.
//
// # Traces
//
// A request carries the OpenTelemetry span of its context (the one
// trace.SpanContextFromContext finds: an instrumented caller's span, or a
// remote parent) when the daemon grants feature trace (docs/protocol.md
// §4.8), so that the daemon's spans, the provider's and a model server's
// join the caller's trace; a context without a span sends nothing more. A
// handler's context carries the requester's span (the daemon's, when it
// records spans) as its remote parent: start the handler's spans from it.
// The package records no span and sets no SDK up: an agent that exports
// traces sets up its own TracerProvider, as any OpenTelemetry program does.
//
// Session reports the negotiated parameters, and Stats counts frames and
// bytes on the wire against JSON bytes, which is the compression achieved.
package client
