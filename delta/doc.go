// Package delta carries a chat request as a delta against its
// conversation's base: the previous request and its response, which the
// requester and the provider that answered both hold (docs/protocol.md §4.3,
// feature `delta`).
//
// LLM clients resend the whole conversation on every turn, so turn K
// repeats the K−1 earlier exchanges. A delta is one zstd frame (RFC 8878)
// of the new document compressed with the base as a raw content
// dictionary, D = base request ‖ base response. On the corpus
// conversations a turn shrinks to the size of its new message, about 1/60
// of its JSON, where per-message Brotli reaches 2.4x.
//
// Base holds D. AppendEncode and AppendDecode turn a document into a delta
// payload and back; AppendEncodeFrame and AppendDecodeFrame do the same
// with the M2M v1 request frame around it (package frame's extension
// block). Decoding checks everything before returning anything: the zstd
// frame's parameters, its content size against the limits before any
// output is allocated, the CRC-32 of the reconstructed document (a
// mismatch means the base was not the one the sender used:
// ErrBaseMismatch), and that it is JSON within the limits.
//
// zstd encoders and decoders are pooled: building one costs far more than
// a delta. Errors wrap the sentinels in errors.go.
package delta
