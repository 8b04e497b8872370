// Package jsonscan validates a JSON document in one pass over its bytes and,
// in the same pass, picks out the few values the M2M v1 frame headers are
// built from (wire reference §2.5, §3.5–§3.7): the model, the message roles
// and content sizes of a chat request, the finish reason and token counts of
// a response, and which well-known top-level keys are present.
//
// It exists because the encoder must both validate its input (an M2M frame
// only ever carries JSON) and extract routing fields, and doing that with
// encoding/json would cost an allocation per value and several passes. The
// scanner allocates nothing: extracted strings alias the input.
//
// Semantics follow serde_json, which the Rust reference uses, so the headers
// m2md writes are the bytes a Rust encoder would write:
//
//   - A key looked up in an object takes its last occurrence (serde_json
//     keeps the last duplicate).
//   - A number is an unsigned integer (Summary's U64 fields) only when it is
//     written as a non-negative integer literal that fits in 64 bits: no
//     '-', no fraction, no exponent. "-0", "1.0" and "1e3" are not.
//   - String lengths are UTF-8 byte lengths of the decoded value, so the
//     escape \u00e9 counts 2 bytes and \n counts 1.
//   - Input must be UTF-8; an escaped lone surrogate (\ud800 alone) and a
//     number too large for a float64 are errors, as they are for serde_json.
//
// Doc.Parse reads a whole document into a tree of Nodes, for callers that
// need every value and their own rules about them (the negotiate package's
// control messages, which refuse duplicate members it defines, and the
// legacy T1 codec, which rewrites every value): same validation and limits,
// Limits.MaxMembers bounds an object's members, and each number carries
// the value serde_json reads (Node.Number), so the T1 codec writes back
// the floats a Rust encoder would write.
//
// AppendString is the other direction, for every package that writes JSON
// strings: serde_json's escaping, so the bytes match the Rust reference's.
//
// Limits (nesting depth, bytes of one string as written, elements of one
// array) are enforced during the scan, so hostile input fails at the first
// byte that exceeds them. Errors are *Error values that wrap one of the
// sentinel errors (ErrSyntax, ErrDepth, ErrStringTooLong, ErrArrayTooLong)
// and carry the byte offset of the failure.
package jsonscan
