package frame

import "fmt"

// API names the HTTP API a request frame's JSON body is a request of: the
// reserved flags byte (bits 16–23, frame offset 13) of a request frame
// (docs/protocol.md §4.6). The Rust reference writes 00 there and never
// reads it, so every frame it writes is a chat completions request.
type API byte

const (
	// APIChat: POST /chat/completions, and every M2M request without an
	// API byte.
	APIChat API = 0x00
	// APIResponses: POST /responses (the Responses API).
	APIResponses API = 0x01
	// APICompletions: POST /completions (legacy completions).
	APICompletions API = 0x02
)

// offAPI is the frame offset of the API byte.
const offAPI = OffFlags + 2

// String is the API's path under an OpenAI API root.
func (a API) String() string {
	switch a {
	case APIChat:
		return "/chat/completions"
	case APIResponses:
		return "/responses"
	case APICompletions:
		return "/completions"
	}
	return fmt.Sprintf("API %#02x", byte(a))
}

// Known reports whether a is an API of docs/protocol.md §4.6.
func (a API) Known() bool { return a <= APICompletions }

// API returns the API byte (request frames).
func (f Flags) API() API { return API(f >> 16) }

// SetAPI writes the API byte of the binary-shape request frame fr, before
// it is protected (the byte is covered by the HMAC tag and the AEAD
// associated data).
func SetAPI(fr []byte, a API) error {
	if len(fr) < MinFrameLen || string(fr[:PrefixLen]) != Prefix {
		return errorf(ErrBadPrefix, "SetAPI: not a binary M2M v1 frame")
	}
	if s := Schema(fr[OffSchema]); s != SchemaRequest {
		return errorf(ErrSchema, "SetAPI: schema %#02x; only a request frame (01) names an API", byte(s))
	}
	fr[offAPI] = byte(a)
	return nil
}

// flagWantsHeaders (bit 15 of a request frame's specific flags, reserved
// by the wire reference) asks the provider for the model server's
// response headers in a headers reply (docs/protocol.md §4.7).
const flagWantsHeaders Flags = 1 << 15

// WantsHeaders reports that a request frame asks the provider for the
// model server's response headers in a headers reply (SetWantsHeaders).
func (f Flags) WantsHeaders() bool { return f&flagWantsHeaders != 0 }

// headersReply is the reserved flags byte (offAPI) of a stream-chunk frame
// (schema 03) that carries response headers instead of a chunk.
const headersReply = 0x01

// SetWantsHeaders sets flagWantsHeaders in the binary-shape request frame
// fr (schema 01 or 04), before it is protected.
func SetWantsHeaders(fr []byte) error {
	if len(fr) < MinFrameLen || string(fr[:PrefixLen]) != Prefix {
		return errorf(ErrBadPrefix, "SetWantsHeaders: not a binary M2M v1 frame")
	}
	if s := Schema(fr[OffSchema]); s != SchemaRequest && s != SchemaEmbeddingRequest {
		return errorf(ErrSchema, "SetWantsHeaders: schema %#02x; only a request frame (01, 04) asks for headers", byte(s))
	}
	fr[OffFlags+1] |= byte(flagWantsHeaders >> 8)
	return nil
}

// AppendEncodeHeadersReply appends the headers reply carrying json, an
// object of response headers (docs/protocol.md §4.7): a schema 03 frame
// with its reserved flags byte (byte 2 of the flags) set to 0x01, its payload never compressed.
// It is a few hundred bytes of distinct strings, which Brotli barely
// shrinks, and compressing it cost the OpenAI edge more CPU per request
// than anything else about the headers.
func AppendEncodeHeadersReply(dst, json []byte, lim Limits) ([]byte, error) {
	start := len(dst)
	out, err := appendFrameExt(dst, json, SchemaStream, nil, nil, true, lim)
	if err != nil {
		return dst, err
	}
	out[start+offAPI] = headersReply
	return out, nil
}

// IsHeadersReply reports whether the binary-shape frame fr is a headers
// reply: schema 03 with its reserved flags byte set to 0x01.
func IsHeadersReply(fr []byte) bool {
	return len(fr) >= MinFrameLen && string(fr[:PrefixLen]) == Prefix &&
		Schema(fr[OffSchema]) == SchemaStream && fr[offAPI] == headersReply
}
