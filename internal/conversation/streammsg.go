package conversation

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/m2md/m2md/internal/jsonscan"
)

// streamedMessage is the assistant message a stream's chunks add up to, as
// encoding/json writes it (its keys and their order are the message's
// bytes).
type streamedMessage struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	ToolCalls []streamedCall `json:"tool_calls,omitempty"`
}

type streamedCall struct {
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// streamMessage returns, as JSON, the assistant message a streamed
// response's chunks (concatenated) add up to: their choices[0].delta
// pieces, or the choices[0].message of a stream that ends with a whole
// response. ok is false when there is none, or when a chunk is not JSON or
// has a field of the wrong type.
//
// It runs at the requester once per streamed response, over every chunk,
// so it reads them with jsonscan (one pass, no value allocated) rather
// than encoding/json, whose reflection cost a 50-chunk stream through the
// OpenAI edges a fifth of the mesh's CPU. Member names match exactly and
// the last of duplicates counts, as everywhere in jsonscan; the message is
// then written by encoding/json, so its bytes are encoding/json's.
func streamMessage(resp []byte) (_ []byte, ok bool) {
	var parts streamParts
	p := docs.Get().(*jsonscan.Doc)
	defer func() { p.Release(); docs.Put(p) }()
	for rest := resp; ; {
		var v []byte
		if v, rest = nextValue(rest); v == nil {
			break
		}
		whole, ok := parts.addChunk(p, v)
		if !ok {
			return nil, false
		}
		if whole != nil {
			return whole, true
		}
	}
	return parts.message()
}

// streamParts are the pieces of the message a stream's chunks bring,
// appended as they come; strings only at the end.
type streamParts struct {
	role, content []byte
	hasContent    bool
	calls         []callParts
}

type callParts struct{ id, typ, name, args []byte }

// addChunk adds the pieces of chunk v, parsed with p. whole is the message
// of a chunk that carries a whole one (a stream that ends with a whole
// response: its message is the answer). ok is false when v is not JSON or
// a field has the wrong type.
func (s *streamParts) addChunk(p *jsonscan.Doc, v []byte) (whole []byte, ok bool) {
	root, err := p.Parse(v, jsonscan.Limits{})
	if err != nil {
		return nil, false
	}
	if root.Kind != jsonscan.KindObject {
		return nil, true // a relay's end marker ("[DONE]"), not a chunk
	}
	choices, ok := typed(p, root, "choices", jsonscan.KindArray)
	if !ok {
		return nil, false
	}
	if len(p.Children(choices)) == 0 {
		return nil, true
	}
	choice := p.Children(choices)[0]
	switch choice.Kind {
	case jsonscan.KindNull:
		return nil, true
	case jsonscan.KindObject:
	default:
		return nil, false
	}
	if m := member(p, choice, "message"); m.Kind != jsonscan.KindNone && m.Kind != jsonscan.KindNull {
		return p.Text(m), true
	}
	d, ok := typed(p, choice, "delta", jsonscan.KindObject)
	if !ok {
		return nil, false
	}
	return nil, s.addDelta(p, d)
}

// addDelta adds a chunk's choices[0].delta: the first role, the content
// appended, and its tool calls' pieces.
func (s *streamParts) addDelta(p *jsonscan.Doc, d jsonscan.Node) bool {
	if r, ok := typed(p, d, "role", jsonscan.KindString); !ok {
		return false
	} else if len(s.role) == 0 {
		s.role = p.Str(r).AppendDecoded(s.role)
	}
	if c, ok := typed(p, d, "content", jsonscan.KindString); !ok {
		return false
	} else if c.Kind == jsonscan.KindString {
		s.content, s.hasContent = p.Str(c).AppendDecoded(s.content), true
	}
	tcs, ok := typed(p, d, "tool_calls", jsonscan.KindArray)
	if !ok {
		return false
	}
	for _, tc := range p.Children(tcs) {
		if !s.addToolCall(p, tc) {
			return false
		}
	}
	return true
}

// addToolCall appends the pieces of one tool call delta to the call its
// index names: the next one starts a call, a later one is refused.
func (s *streamParts) addToolCall(p *jsonscan.Doc, tc jsonscan.Node) bool {
	if tc.Kind == jsonscan.KindNull {
		tc = jsonscan.Node{} // a call at index 0 with nothing in it
	} else if tc.Kind != jsonscan.KindObject {
		return false
	}
	index := 0
	if n, ok := typed(p, tc, "index", jsonscan.KindNumber); !ok {
		return false
	} else if n.Kind == jsonscan.KindNumber {
		if _, integer := n.Number(); !integer {
			return false
		}
		var err error
		if index, err = strconv.Atoi(string(p.Text(n))); err != nil {
			return false
		}
	}
	if index < 0 || index > len(s.calls) {
		return false
	}
	if index == len(s.calls) {
		s.calls = append(s.calls, callParts{})
	}
	c := &s.calls[index]
	fn, ok := typed(p, tc, "function", jsonscan.KindObject)
	if !ok {
		return false
	}
	for _, f := range [...]struct {
		obj  jsonscan.Node
		name string
		dst  *[]byte
	}{{tc, "id", &c.id}, {tc, "type", &c.typ}, {fn, "name", &c.name}, {fn, "arguments", &c.args}} {
		v, ok := typed(p, f.obj, f.name, jsonscan.KindString)
		if !ok {
			return false
		}
		if v.Kind == jsonscan.KindString {
			*f.dst = p.Str(v).AppendDecoded(*f.dst)
		}
	}
	return true
}

// message writes the message the pieces add up to with encoding/json; ok
// is false when no chunk named a role.
func (s *streamParts) message() (_ []byte, ok bool) {
	if len(s.role) == 0 {
		return nil, false
	}
	msg := streamedMessage{Role: string(s.role)}
	if s.hasContent {
		c := string(s.content)
		msg.Content = &c
	}
	for _, c := range s.calls {
		var out streamedCall
		out.ID, out.Type, out.Function.Name, out.Function.Arguments = string(c.id), string(c.typ), string(c.name), string(c.args)
		msg.ToolCalls = append(msg.ToolCalls, out)
	}
	b, err := json.Marshal(msg)
	return b, err == nil
}

// typed returns member name of object n when it is of kind k. ok is false
// when it is there with another kind; a member that is absent or null is
// returned as it is (KindNone, KindNull), with ok: both mean "nothing".
func typed(p *jsonscan.Doc, n jsonscan.Node, name string, k jsonscan.Kind) (_ jsonscan.Node, ok bool) {
	m := member(p, n, name)
	return m, m.Kind == k || m.Kind == jsonscan.KindNone || m.Kind == jsonscan.KindNull
}

// nextValue splits the first JSON value off b, after white space, for
// Parse to check: an object or array ends at its closing bracket (brackets
// in strings not counted), a string at its closing quote, anything else
// at white space. v is nil when only white space is left.
func nextValue(b []byte) (v, rest []byte) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	if i == len(b) {
		return nil, nil
	}
	start, depth := i, 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i+1)
			if depth == 0 {
				end := min(i+1, len(b))
				return b[start:end], b[end:]
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth <= 0 {
				return b[start : i+1], b[i+1:]
			}
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				return b[start:i], b[i:]
			}
		}
	}
	return b[start:], nil
}

// stringEnd returns the index of the quote that closes the string whose
// contents begin at b[i] (one not escaped: after an even number of
// backslashes), or len(b).
func stringEnd(b []byte, i int) int {
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		k := q
		for k > i && b[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 {
			return q
		}
		i = q + 1
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
