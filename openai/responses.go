package openai

import (
	"errors"
	"sync"

	"github.com/m2md/m2md/internal/jsonscan"
)

// The Responses API (POST /responses) travels as a request frame whose API
// byte is frame.APIResponses (docs/protocol.md §4.6). Its answer is the
// Response object, or a stream of typed events: each event's data is a
// JSON object whose "type" names it (response.created,
// response.output_text.delta, …), and the stream ends after a terminal
// event, without "data: [DONE]".

// ErrNoEventType: a Responses stream event without a string "type".
var ErrNoEventType = errors.New(`a Responses stream event is not a JSON object with a string "type"`)

// docs keeps the trees of the events read.
var docs = sync.Pool{New: func() any { return new(jsonscan.Doc) }}

// maxPooledDoc: a Doc grown past this by one large event is dropped.
const maxPooledDoc = 1 << 20

// EventType returns the "type" of a Responses stream event, appended to
// dst.
func EventType(dst, event []byte) ([]byte, error) {
	d := docs.Get().(*jsonscan.Doc)
	defer putDoc(d)
	root, err := d.Parse(event, jsonscan.Limits{})
	if err != nil {
		return dst, err
	}
	n, ok := member(d, root, "type")
	if !ok || n.Kind != jsonscan.KindString {
		return dst, ErrNoEventType
	}
	return d.Str(n).AppendDecoded(dst), nil
}

// Terminal reports whether a Responses stream event of type typ ends the
// stream: no event follows it.
func Terminal(typ []byte) bool {
	switch string(typ) {
	case "response.completed", "response.incomplete", "response.failed", "error":
		return true
	}
	return false
}

// ResponsesUsage returns the tokens a Responses answer counts: the
// input_tokens and output_tokens of its "usage", at the top of a Response
// object or in the "response" of a stream event (response.completed).
// ok is false when there is none.
func ResponsesUsage(b []byte) (tokens uint64, ok bool) {
	d := docs.Get().(*jsonscan.Doc)
	defer putDoc(d)
	root, err := d.Parse(b, jsonscan.Limits{})
	if err != nil {
		return 0, false
	}
	if r, found := member(d, root, "response"); found {
		root = r
	}
	usage, found := member(d, root, "usage")
	if !found {
		return 0, false
	}
	in, okIn := count(d, usage, "input_tokens")
	out, okOut := count(d, usage, "output_tokens")
	if !okIn && !okOut {
		return 0, false
	}
	return in + out, true
}

// MaxOutputTokens returns the max_output_tokens of a Responses request.
func MaxOutputTokens(body []byte) (uint64, bool) {
	d := docs.Get().(*jsonscan.Doc)
	defer putDoc(d)
	root, err := d.Parse(body, jsonscan.Limits{})
	if err != nil {
		return 0, false
	}
	return count(d, root, "max_output_tokens")
}

// member finds the member name of the object obj.
func member(d *jsonscan.Doc, obj jsonscan.Node, name string) (jsonscan.Node, bool) {
	if obj.Kind != jsonscan.KindObject {
		return jsonscan.Node{}, false
	}
	kids := d.Children(obj)
	for i := range kids {
		if d.HasName(&kids[i], name) {
			return kids[i], true
		}
	}
	return jsonscan.Node{}, false
}

// count reads the member name of obj as a count of tokens: a
// non-negative integer.
func count(d *jsonscan.Doc, obj jsonscan.Node, name string) (uint64, bool) {
	n, ok := member(d, obj, name)
	if !ok || n.Kind != jsonscan.KindNumber {
		return 0, false
	}
	f, integer := n.Number()
	if !integer || f < 0 || f > 1<<53 {
		return 0, false
	}
	return uint64(f), true
}

func putDoc(d *jsonscan.Doc) {
	if d.Size() > maxPooledDoc {
		return
	}
	d.Release()
	docs.Put(d)
}
