// Package upstream is the egress of the mesh: a provider agent in front of
// an OpenAI-compatible HTTP server (vLLM, llama.cpp, Ollama, LM Studio,
// OpenRouter, OpenAI). Upstream is a client.Handler: each request the
// daemon delivers is POSTed to the server's /chat/completions,
// /responses, /completions or /embeddings (the frame's schema and API byte
// say which), byte for byte, and the
// server's answer comes back as replies following package openai's
// conventions: the body as the final reply, or one stream chunk per SSE
// event and Done for "data: [DONE]", or an error reply carrying the
// server's HTTP status and body.
//
// The server gets the agent's own API key (Config.APIKey), never anything
// of the requester's; the key is never logged. Connections to the server
// are pooled and kept alive, at most Config.Concurrency requests are in
// flight at once, and a request fails with upstream_timeout when the first
// byte or the next chunk does not come in time. A CANCEL of the request
// (the requester's caller gave up) ends its context, which aborts the HTTP
// request at once.
package upstream
