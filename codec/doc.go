// Package codec is the one entry point to every M2M wire form: it encodes
// JSON with a chosen (or automatically selected) algorithm, and decodes any
// wire form it is given by detecting it from its prefix.
//
// The forms themselves live in their own packages: frame (M2M v1 frames and
// the Brotli text form), tokennative (#TK|), frame/legacy (#T1|, the zlib
// #M2M[v2.0]|DATA: form and the #M2M| dictionary form) and security (HMAC
// and AEAD protection of M2M v1 frames). This package only chooses between
// them.
//
// Detection follows the Rust reference's order (wire reference §1.2) and
// extends it with the legacy forms (§12): "#M2M|1|" (text or binary shape),
// "#TK|", "#M2M[v3.0]|", "#T1|", "#M2M[v2.0]|", "#M2M|"; anything else passes
// through unchanged. A known prefix with a malformed body is an error, never
// the input handed back and never partial output. The binary TokenNative
// shape has no prefix, so it is decoded only when asked for explicitly.
package codec
