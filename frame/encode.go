package frame

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"sync"

	"github.com/m2md/m2md/internal/jsonscan"
)

// maxField is the longest model or id a header's length byte can describe.
const maxField = 255

var summaries = sync.Pool{New: func() any { return new(jsonscan.Summary) }}

// AppendEncode appends to dst the binary-shape M2M v1 frame that carries
// json, and returns the extended buffer. The document is classified as in
// the Rust reference (wire reference §3.10): a request frame (schema 01)
// when it has both "messages" and "model", a response frame (02) when it
// has "choices" or an "id" starting with "chatcmpl-", else a request frame.
// The JSON travels byte for byte; it must be valid JSON within lim.
//
// Frames are byte-identical to the Rust encoder's, except that the Brotli
// stream may differ (both are valid; see wire reference §2.4) and that a
// model or id longer than 255 bytes is refused with ErrFieldTooLong
// instead of being written with a wrapped length byte. On error dst is
// returned unchanged. json must fit lim.MaxDecompressed and the frame
// lim.MaxMessage, so that a decoder with the same limits accepts it; json
// must not overlap dst's spare capacity.
func AppendEncode(dst, json []byte, lim Limits) ([]byte, error) {
	return appendFrame(dst, json, 0, lim)
}

// AppendEncodeText is AppendEncode for the text shape: "#M2M|1|" followed
// by the standard, padded Base64 of the rest of the binary frame. This is
// the form the Rust engine, its sessions and its HTTP API exchange.
func AppendEncodeText(dst, json []byte, lim Limits) ([]byte, error) {
	return appendFrameText(dst, json, 0, lim)
}

// AppendEncodeSchema is AppendEncode with the schema chosen by the caller
// instead of classified. Request schemas (01, 04) get a routing header,
// response schemas (02, 05, 10) a response header taken from json as for a
// response, and the others (03, fe, ff) no variable header. The daemon
// uses it with SchemaError for its error replies (see AppendErrorFrame).
func AppendEncodeSchema(dst, json []byte, schema Schema, lim Limits) ([]byte, error) {
	if !schemaDefined(schema) {
		return dst, errorf(ErrSchema, "schema byte %#02x", byte(schema))
	}
	return appendFrame(dst, json, schema, lim)
}

func schemaDefined(s Schema) bool {
	switch s {
	case SchemaRequest, SchemaResponse, SchemaStream, SchemaEmbeddingRequest,
		SchemaEmbeddingResponse, SchemaError, SchemaCustom, SchemaUnknown:
		return true
	}
	return false
}

func isRequestSchema(s Schema) bool {
	return s == SchemaRequest || s == SchemaEmbeddingRequest
}

func isResponseSchema(s Schema) bool {
	return s == SchemaResponse || s == SchemaEmbeddingResponse || s == SchemaError
}

// jsonError maps a scanner error to this package's sentinels.
func jsonError(err error, what string) error {
	switch {
	case errors.Is(err, jsonscan.ErrSyntax):
		return errorf(ErrInvalidJSON, "%s: %w", what, err)
	default:
		return errorf(ErrLimit, "%s: %w", what, err)
	}
}

// appendFrame writes a binary frame; schema 0 means classify.
func appendFrame(dst, json []byte, schema Schema, lim Limits) ([]byte, error) {
	return appendFrameExt(dst, json, schema, nil, nil, false, lim)
}

// appendFrameExt writes a binary frame with, when ext is not nil, an
// extension block (extension.go: a request's, or with DocID 0 a reply
// delta's) and, for a delta, the payload to carry instead of the document.
// stored leaves the payload uncompressed whatever its length.
func appendFrameExt(dst, json []byte, schema Schema, ext *Extension, delta []byte, stored bool, lim Limits) ([]byte, error) {
	lim = lim.Effective()
	if len(json) > lim.MaxDecompressed {
		return dst, errorf(ErrLimit, "document of %d bytes exceeds the %d-byte limit", len(json), lim.MaxDecompressed)
	}
	sum := summaries.Get().(*jsonscan.Summary)
	defer func() {
		// Drop the references into json before pooling the summary.
		*sum = jsonscan.Summary{Roles: sum.Roles[:0]}
		summaries.Put(sum)
	}()
	if err := sum.Scan(json, lim); err != nil {
		return dst, jsonError(err, "document to encode")
	}
	if schema == 0 {
		schema = classify(sum)
	}
	reply := ext != nil && ext.DocID == 0 // a reply delta's block
	switch {
	case reply && schema != SchemaResponse:
		return dst, errorf(ErrSchema, "reply delta of schema %#02x: only a final chat response (02) carries one", byte(schema))
	case ext != nil && !reply && schema != SchemaRequest:
		return dst, errorf(ErrSchema, "extension block on schema %#02x: only a chat request (01) carries one", byte(schema))
	}

	start := len(dst)
	out := append(dst, Prefix...)
	var zero [FixedHeaderLen]byte
	out = append(out, zero[:]...)
	var flags Flags
	var err error
	switch {
	case isRequestSchema(schema):
		out, flags, err = appendRouting(out, sum, ext != nil && ext.Delta)
	case reply:
		// A reply delta's response fields are empty (docs/protocol.md
		// §4.3): the requester rebuilds the response they describe, and
		// they were a third of a compact reply delta's bytes.
		out = append(out, emptyResponseFields[:]...)
	case isResponseSchema(schema):
		out, flags, err = appendResponse(out, sum)
	}
	if err != nil {
		return dst, err
	}
	switch {
	case reply:
		out = append(out, replyBlock[:]...)
		flags |= FlagHasExtensions
	case ext != nil:
		out = appendExtension(out, *ext)
		flags |= FlagHasExtensions
	}
	if lim.CompressFrom >= 0 && len(json) >= lim.CompressFrom && (ext == nil || !ext.Delta) && !stored {
		flags |= FlagCompressed
	}
	fixed := out[start+PrefixLen:]
	headerLen := len(out) - start - PrefixLen
	if headerLen > math.MaxUint16 {
		return dst, errorf(ErrLimit, "header of %d bytes exceeds 65535", headerLen)
	}
	binary.LittleEndian.PutUint16(fixed[0:], uint16(headerLen))
	fixed[2] = byte(schema)
	fixed[3] = byte(SecurityNone)
	binary.LittleEndian.PutUint32(fixed[4:], uint32(flags))

	lenAt := len(out)
	out = binary.LittleEndian.AppendUint32(out, 0)
	out = binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(json))
	switch {
	case ext != nil && ext.Delta:
		out = append(out, delta...)
	case flags.Compressed():
		if out, err = appendBrotli(out, json, &frameWriters[lim.Quality]); err != nil {
			return dst, err
		}
	default:
		out = append(out, json...)
	}
	binary.LittleEndian.PutUint32(out[lenAt:], uint32(len(out)-lenAt-8))
	if n := len(out) - start; n > lim.MaxMessage {
		return dst, errorf(ErrLimit, "frame of %d bytes exceeds the %d-byte message limit", n, lim.MaxMessage)
	}
	return out, nil
}

// classify picks request or response as M2MCodec::encode does.
func classify(sum *jsonscan.Summary) Schema {
	switch {
	case sum.Keys.Has(jsonscan.KeyMessages | jsonscan.KeyModel):
		return SchemaRequest
	case sum.Keys.Has(jsonscan.KeyChoices) || sum.ID.HasPrefix("chatcmpl-"):
		return SchemaResponse
	}
	return SchemaRequest
}

// requestFlags maps top-level keys to their request flag (wire reference
// §3.5); the remaining request flags depend on values.
var requestFlags = [...]struct {
	keys jsonscan.Key
	flag Flags
}{
	{jsonscan.KeyTools | jsonscan.KeyFunctions, flagHasTools},
	{jsonscan.KeyToolChoice | jsonscan.KeyFunctionCall, flagHasToolChoice},
	{jsonscan.KeyResponseFormat, flagHasResponseFormat},
	{jsonscan.KeyMaxTokens | jsonscan.KeyMaxCompletionTokens, flagHasMaxTokens},
	{jsonscan.KeyReasoningEffort, flagHasReasoningEffort},
	{jsonscan.KeyServiceTier, flagHasServiceTier},
	{jsonscan.KeySeed, flagHasSeed},
	{jsonscan.KeyLogprobs, flagHasLogprobs},
	{jsonscan.KeyUser, flagHasUserID},
	{jsonscan.KeyTemperature, flagHasTemperature},
	{jsonscan.KeyTopP, flagHasTopP},
	{jsonscan.KeyStop, flagHasStop},
}

// appendField writes a length byte and the decoded string.
func appendField(out []byte, s jsonscan.Str, what string) ([]byte, error) {
	if !s.IsString {
		return append(out, 0), nil
	}
	if s.Len > maxField {
		return out, errorf(ErrFieldTooLong, "%s is %d bytes", what, s.Len)
	}
	out = append(out, byte(s.Len))
	return s.AppendDecoded(out), nil
}

// emptyResponseFields are the response header fields of a reply delta:
// id and model empty, finish_reason unknown, no tokens (and no flags, so
// no cost estimate).
var emptyResponseFields = [5]byte{0, 0, byte(FinishUnknown), 0, 0}

// appendRouting writes the request routing header (wire reference §3.6);
// for a delta (docs/protocol.md §4.3) without what describes the document's
// messages (msg_count 0, no roles, content_hint 0) and without the optional
// est_cost_usd: the provider rebuilds the document, and on a long
// conversation those fields were a tenth of a delta frame.
func appendRouting(out []byte, sum *jsonscan.Summary, delta bool) ([]byte, Flags, error) {
	var flags Flags
	if sum.SystemRole {
		flags |= flagHasSystemPrompt
	}
	if sum.Image {
		flags |= flagHasImages
	}
	if sum.StreamTrue {
		flags |= flagStreamRequested
	}
	for _, f := range requestFlags {
		if sum.Keys.HasAny(f.keys) {
			flags |= f.flag
		}
	}

	modelAt := len(out) + 1
	out, err := appendField(out, sum.Model, "model")
	if err != nil {
		return out, 0, err
	}
	model := out[modelAt:]
	if delta {
		out = append(out, 0, 0) // msg_count 0, no roles, content_hint 0
	} else {
		out = appendUvarint(out, uint64(uint32(sum.MsgCount)))
		out = append(out, sum.Roles...)
		out = appendUvarint(out, uint64(sum.ContentHint))
	}

	completion := uint32(500) // the Rust default when max_tokens is unknown
	if flags.HasMaxTokens() {
		// max_tokens wins whenever the key exists, even with a value that
		// is not an integer; the varint is then omitted but the flag kept.
		mt := sum.MaxCompletionTokens
		if sum.Keys.Has(jsonscan.KeyMaxTokens) {
			mt = sum.MaxTokens
		}
		if mt.OK {
			completion = uint32(mt.Value)
			out = appendUvarint(out, uint64(completion))
		}
	}
	if delta {
		return out, flags, nil
	}
	cost := estimateCost(model, sum.ContentHint/4, completion)
	out = binary.LittleEndian.AppendUint32(out, math.Float32bits(cost))
	return out, flags, nil
}

// appendResponse writes the response header (wire reference §3.7).
func appendResponse(out []byte, sum *jsonscan.Summary) ([]byte, Flags, error) {
	var flags Flags
	finish := FinishUnknown
	switch fr := sum.FinishReason; {
	case fr.Equal("stop"):
		finish = FinishStop
	case fr.Equal("length"):
		finish = FinishLength
		flags |= flagTruncated
	case fr.Equal("tool_calls"):
		finish = FinishToolCalls
	case fr.Equal("content_filter"):
		finish = FinishContentFilter
		flags |= flagContentFiltered
	}
	if sum.ToolCalls {
		flags |= flagHasToolCalls
	}
	if sum.Refusal {
		flags |= flagHasRefusal
	}
	if sum.Keys.Has(jsonscan.KeyUsage) {
		flags |= flagHasUsage | flagHasCostEstimate
	}
	if sum.CachedTokens.OK && sum.CachedTokens.Value > 0 {
		flags |= flagHasCachedTokens
	}
	if sum.ReasoningTokens.OK && sum.ReasoningTokens.Value > 0 {
		flags |= flagHasReasoningTokens
	}

	out, err := appendField(out, sum.ID, "id")
	if err != nil {
		return out, 0, err
	}
	modelAt := len(out) + 1
	if out, err = appendField(out, sum.Model, "model"); err != nil {
		return out, 0, err
	}
	model := out[modelAt:]
	out = append(out, byte(finish))
	// Counts that are not u64 are 0; all are truncated to u32 like Rust's "as u32".
	prompt := uint32(sum.PromptTokens.Value)
	completion := uint32(sum.CompletionTokens.Value)
	out = appendUvarint(out, uint64(prompt))
	out = appendUvarint(out, uint64(completion))
	if flags.HasCachedTokens() {
		out = appendUvarint(out, uint64(uint32(sum.CachedTokens.Value)))
	}
	if flags.HasReasoningTokens() {
		out = appendUvarint(out, uint64(uint32(sum.ReasoningTokens.Value)))
	}
	if flags.HasCostEstimate() {
		cost := estimateCost(model, prompt, completion)
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(cost))
	}
	return out, flags, nil
}
