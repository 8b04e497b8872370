// Package legacy encodes and decodes the three legacy M2M text forms that
// m2md still reads (wire reference §1.1, §6.2, §6.3, §12):
//
//   - T1, "#T1|" + compact JSON with abbreviated keys and values
//     (EncodeT1, DecodeT1). T1 is lossy by design: it drops nulls and
//     default parameters and rewrites keys, exactly like the Rust
//     reference's TokenCodec, and its decoder restores six request defaults.
//   - zlib, "#M2M[v2.0]|DATA:" + Base64 of a zlib stream (EncodeZlib,
//     DecodeZlib). The Rust reference never implemented it; the seed spec
//     allows it and m2md reads it.
//   - dictionary, "#M2M|" + Base64 of the text with 34 common JSON fragments
//     replaced by single bytes (EncodeDictionary, DecodeDictionary). ASCII
//     only.
//
// The Rust reference passes all three through unchanged when
// auto-detecting; m2md's auto-detecting decoder decodes them instead, and a
// known prefix with a malformed body is an error, never the input handed
// back and never partial output. Because "#M2M|" is a prefix of the M2M v1
// prefix "#M2M|1|", a detector must test "#M2M|1|" first; a Base64
// dictionary body never contains '|', so the order is unambiguous.
//
// Every function appends to a caller-supplied dst and returns the extended
// slice, so callers can reuse buffers; on error nothing is appended. All
// of them take a frame.Limits (zero value: the spec's caps) and check sizes
// before spending memory: T1 parses JSON with the depth, string and array
// caps, zlib decompresses as a stream that stops at MaxDecompressed, and the
// dictionary decoder sizes its output before writing it. Plain-text sizes
// are bounded by MaxDecompressed, encoded messages by MaxMessage.
//
// Errors are *Error values wrapping one of ErrMalformed, ErrLimit,
// ErrNotUTF8 and ErrNonASCII; they never quote the payload.
//
// T1 output must match serde_json byte for byte. The JSON is read by
// internal/jsonscan's Doc.Parse, which follows serde_json: integers kept
// exactly when they fit u64/i64, other numbers parsed with serde's default
// (not always correctly rounded) algorithm. This package writes with serde's
// semantics: object keys sorted by their UTF-8 bytes, the last duplicate key
// winning, numbers written as serde_json 1.0.149 writes them (zmij: shortest
// digits, 1.0, 0.00001, 1e+16, 1e-6; older serde_json releases used ryu and
// wrote 1e16), and strings escaped only where serde escapes them. Peak
// memory for T1 is 32 bytes per JSON value plus the input and output, so a
// pathological 16 MiB of one-digit numbers in arrays costs on the order of
// 256 MiB; realistic messages cost a few times their size.
package legacy
