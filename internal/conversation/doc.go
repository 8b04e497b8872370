// Package conversation is what the client keeps of the conversations its
// chat requests and their answers form, to send each turn as a delta
// against the previous one (docs/protocol.md §4.3, feature delta). It
// knows the OpenAI Chat Completions schema; the client that calls it knows
// only frames, and package delta only bytes.
//
// A requester keeps, in a History, the requests it sent with the responses
// they got, and finds among them the base of a new request (History.Begin):
// the kept request whose messages, followed by its response's assistant
// message, begin the new request's messages. Messages are compared by what
// they say (role, content, tool calls), not by their bytes: SDKs
// re-serialise the assistant message they send back. A wrong match costs
// compression, never correctness: the delta is encoded against the bytes
// the requester holds, and the provider checks the CRC. The Turn that Begin
// returns holds the request until its answer is in, for the history, for a
// resend after base_missing and for the dictionary of a reply delta.
//
// A provider keeps, in Bases, the requests delivered to it with an
// extension block and its answers (Bases.Record), under the requester's
// agent id and the request's doc_id, to rebuild the deltas that name them.
//
// Either end copies a request it keeps, since its caller or handler owns
// the request's bytes, and appends the answer to the copy; but an exchange
// that repeats a kept one byte for byte (a load test repeating one body, a
// retry) shares the kept bytes for as long as its answer repeats the kept
// answer: it adds no base a later request could use that the kept one does
// not hold, and what is kept, so every later delta, stays byte for byte the
// same.
//
// Both are bounded by a byte budget, least recently used out first; memory
// is taken only as conversations come. History and Bases are safe for
// concurrent use; a Turn and a Recording belong to one request and its
// caller.
package conversation
