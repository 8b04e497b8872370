// Package frame reads and writes M2M v1 frames ("#M2M|1|"), the unit in
// which m2md carries one LLM API document (a chat request, a response, a
// stream chunk, an error) between agents (wire reference §3).
//
// A frame is a 7-byte prefix, a 20-byte fixed header (schema, security
// mode, flags, and 12 reserved bytes where m2md keeps its sequence number),
// a variable header that summarises the JSON for routing (model, message
// roles, token counts, a cost estimate), the payload length and CRC-32, and
// the JSON itself, Brotli-compressed from 100 bytes on. The JSON is carried
// byte for byte, never re-serialised.
//
// Frames come in two shapes with the same content: binary (what m2md
// sessions send) and text ("#M2M|1|" + Base64 of the rest, what the Rust
// engine, its HTTP API and its sessions exchange). This package writes both
// and reads the text shape's header; to decode a text frame to JSON, use the
// codec package, which takes every form:
//
//	AppendEncode / AppendEncodeText          JSON → frame, request or response chosen from the JSON
//	AppendEncodeSchema                       JSON → frame of a given schema (AppendErrorFrame uses it)
//	AppendDecode                             frame → JSON, fully checked
//	ReadHeader / ReadTextHeader              frame → Header, without touching the payload
//	Sequence / SetSequence                   the m2md sequence number and channel id
//	AppendEncodeBrotliText / AppendDecodeBrotliText   the "#M2M[v3.0]|DATA:" Brotli text form (§6.1)
//	AppendEncodeExt / AppendEncodeDelta / StripExtension   request frames with m2md's
//	                                         extension block (docs/protocol.md §4.3), read by ReadHeader
//	AppendEncodeReplyDelta                   a final response carried as a reply delta (§4.3)
//	AppendCompact / AppendExpand             a protected frame with an extension block ↔ its
//	                                         compact form (docs/protocol.md §4.5, feature `compact`)
//
// ReadHeader is what a router uses: it does not allocate and costs tens of
// nanoseconds, whatever the payload size. Decoding checks everything before
// returning anything (framing, size limits while decompressing, UTF-8, the
// CRC, that the payload is JSON within Limits) and never returns partial
// output. Protection (HMAC, AEAD) is the security package's job: this
// package decodes security modes none and HMAC without verifying the tag,
// and refuses AEAD frames with ErrEncrypted.
//
// Encoding is byte-compatible with the Rust reference (infernet-org/
// m2m-protocol v0.4.0) except for the Brotli stream itself, which any
// decoder accepts, and for models or ids over 255 bytes, which are refused
// (ErrFieldTooLong) because Rust writes them with a wrapped length byte.
//
// All functions append to a caller-supplied buffer and return it, so hot
// paths can reuse buffers; Brotli writers and readers are pooled. Limits
// bound every input, its zero value meaning the wire reference §8 defaults.
// Errors wrap the sentinels in errors.go.
package frame
