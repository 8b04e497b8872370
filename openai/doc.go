// Package openai holds what the two OpenAI-compatible edges of the mesh
// share: the ingress (package openai/ingress, an OpenAI HTTP endpoint on the
// daemon that turns each HTTP request into a mesh request) and the egress
// (package openai/upstream, a provider agent in front of an
// OpenAI-compatible server). Between them a request travels as an M2M v1
// frame and its answer as replies; this package fixes the conventions that
// make the round trip byte-exact, and the mapping of mesh errors to the HTTP
// status codes and error JSON that OpenAI client libraries expect.
//
// # Conventions between the edges
//
//   - A request body travels byte for byte in an M2M v1 frame: schema 01
//     (Request) for /v1/chat/completions, /v1/responses and
//     /v1/completions, told apart by the frame's API byte (frame.API,
//     docs/protocol.md §4.6), 04 (EmbeddingRequest) for /v1/embeddings, so
//     the egress knows the endpoint from the frame. The frame's routing
//     header carries the body's "model" and its stream flag.
//   - A non-streamed answer is one final reply whose JSON is the upstream's
//     body, byte for byte.
//   - A streamed answer (the upstream sent text/event-stream) is one stream
//     chunk per SSE event, whose JSON is the event's data, byte for byte, in
//     order; the upstream's "data: [DONE]" becomes the final reply Done, the
//     JSON string "[DONE]". A Responses stream has no [DONE]: the end of
//     the upstream's body after a terminal event (Terminal) becomes Done,
//     and the ingress writes each event with its "event: TYPE" line again.
//   - The ingress asks for the upstream's response headers with every
//     request (client.ResponseHeaders); the egress sends those a client
//     reads (PassedHeader: x-request-id, x-ratelimit-*,
//     openai-processing-ms) in a headers reply before anything else, and
//     the ingress sets them on its HTTP answer (docs/protocol.md §4.7).
//   - An HTTP error of the upstream is an error reply of code
//     "upstream_http_NNN" (NNN its status), or
//     "upstream_http_NNN_retry_after_S" when the upstream sent Retry-After
//     (S whole seconds), whose message is the upstream's body; the ingress
//     answers with that status, that body and that Retry-After.
//   - Failures between the egress and the upstream are error replies with
//     the codes below (CodeUpstreamTimeout, …).
package openai
