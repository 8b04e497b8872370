package openai

import (
	"net/http"
	"slices"
	"strings"

	"github.com/m2md/m2md/internal/jsonscan"
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
// crosses the mesh: x-request-id, openai-processing-ms and x-ratelimit-*,
// named with [a-z0-9-] only.
func PassedHeader(name string) bool {
	name = strings.ToLower(name)
	if strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return false
	}
	return name == "x-request-id" || name == "openai-processing-ms" || strings.HasPrefix(name, "x-ratelimit-")
}

// passedValue reports whether a header value crosses: at most 256 bytes of
// printable ASCII without '"' and '\', which JSON then holds as they are.
func passedValue(v string) bool {
	if len(v) > maxHeaderValue {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// HeadersJSON is the JSON object of the passed headers of h: names in lower
// case and in order, the first value of each, at most 32; nil when there
// are none.
func HeadersJSON(h http.Header) []byte {
	var names [maxHeaders]string
	n := 0
	for name, v := range h {
		if n < maxHeaders && len(v) > 0 && PassedHeader(name) && passedValue(v[0]) {
			names[n] = name
			n++
		}
	}
	if n == 0 {
		return nil
	}
	slices.Sort(names[:n])
	b := make([]byte, 0, 64*n)
	b = append(b, '{')
	for i, name := range names[:n] {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		for j := 0; j < len(name); j++ {
			c := name[j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
		}
		b = append(b, '"', ':', '"')
		b = append(b, h[name][0]...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// SetHeaders sets on h the passed headers of a headers reply's JSON, at
// most 32; an unreadable reply, a name not passed, a value that is not a
// string or not printable ASCII (HeadersJSON's rule) is left out.
func SetHeaders(h http.Header, reply []byte) {
	d := docs.Get().(*jsonscan.Doc)
	defer putDoc(d)
	root, err := d.Parse(reply, jsonscan.Limits{})
	if err != nil || root.Kind != jsonscan.KindObject {
		return
	}
	set := 0
	for _, m := range d.Children(root) {
		if set == maxHeaders {
			return
		}
		if m.Kind != jsonscan.KindString {
			continue
		}
		name := string(d.Name(m).AppendDecoded(nil))
		v := string(d.Str(m).AppendDecoded(nil))
		if PassedHeader(name) && passedValue(v) {
			h[http.CanonicalHeaderKey(name)] = []string{v}
			set++
		}
	}
}
