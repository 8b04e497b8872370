package openai

import (
	"encoding/json"
	"net/http"
	"strings"
)

// The response headers of a model server that cross the mesh (a headers
// reply, docs/protocol.md §4.7) and reach the HTTP client: those OpenAI's
// SDKs and agent frameworks read. Everything else (cookies, the server's
// own) stays at the edge.
const (
	maxHeaders     = 32
	maxHeaderValue = 256
)

// PassedHeader reports whether a response header named name (any case)
// crosses the mesh: x-request-id, openai-processing-ms and x-ratelimit-*.
func PassedHeader(name string) bool {
	name = strings.ToLower(name)
	if strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return false
	}
	return name == "x-request-id" || name == "openai-processing-ms" || strings.HasPrefix(name, "x-ratelimit-")
}

// HeadersJSON is the JSON object of the passed headers of h, names in
// lower case, the first value of each, at most 32 of at most 256 bytes
// each; nil when there are none.
func HeadersJSON(h http.Header) []byte {
	out := map[string]string{}
	for name, v := range h {
		if len(out) == maxHeaders {
			break
		}
		if PassedHeader(name) && len(v) > 0 && len(v[0]) <= maxHeaderValue {
			out[strings.ToLower(name)] = v[0]
		}
	}
	if len(out) == 0 {
		return nil
	}
	b, _ := json.Marshal(out)
	return b
}

// SetHeaders sets on h the passed headers of a headers reply's JSON, at
// most 32; an unreadable reply, a name not passed, a value that is not a
// string, over 256 bytes or with a control character is left out.
func SetHeaders(h http.Header, reply []byte) {
	var in map[string]json.RawMessage
	if json.Unmarshal(reply, &in) != nil {
		return
	}
	n := 0
	for name, raw := range in {
		if n == maxHeaders {
			return
		}
		var v string
		if !PassedHeader(name) || json.Unmarshal(raw, &v) != nil {
			continue
		}
		if len(v) <= maxHeaderValue && !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			h.Set(name, v)
			n++
		}
	}
}
