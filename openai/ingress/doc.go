// Package ingress is the OpenAI-compatible HTTP endpoint of the daemon
// (m2md serve --openai-addr): POST /v1/chat/completions, POST
// /v1/responses, POST /v1/completions, POST /v1/embeddings, GET /v1/models
// and GET /v1/models/{id}, for any OpenAI client library.
//
// The ingress is an agent of the mesh: it holds a session (package client)
// per API-key identity, so its requests take the daemon's one routing path
// like any agent's. A request body becomes an M2M v1 frame without being
// re-encoded (schema 01 for chat, the Responses API and legacy
// completions, told apart by the API byte, 04 for embeddings; the payload
// Brotli-compressed from 100 bytes on, as frame.AppendEncode does), is
// routed by its "model" to a provider, and the provider's replies are
// written back as they arrive: the final reply's bytes as the response
// body, or one "data: <chunk>" event per stream chunk, flushed, then
// "data: [DONE]" (package openai describes the conventions). Mesh errors
// become OpenAI's error JSON with the status a client library expects
// (openai.StatusFor); an error before the first chunk is a plain HTTP error,
// never a 200 event stream. An HTTP client that disconnects cancels its
// request at the provider.
//
// Bounds: Serve answers HTTP under Config.Limits (header and idle
// deadlines, caps on connections in all and per client IP); any server the
// Ingress handles for gets the per-read deadline of request bodies, the
// per-write deadline of answers (renewed as data flows, so a stream runs as
// long as its client reads it, and ends, cancelled at the provider, when
// the client stops), and the byte budget of bodies being read (in all, and
// half of it per client IP). The session
// of an identity that ends for good (another session claimed its agent id)
// is dialed again.
//
// Keys: with Config.Keys, every request needs "Authorization: Bearer KEY"
// and acts as the key's identity; without, the ingress is open (the daemon
// warns at start). Beside a cluster node (Config.Node) every identity's
// agent id gets the node id appended (NodeIdentity), so each node's
// ingress is its own agent and every node can serve the edge.
package ingress
