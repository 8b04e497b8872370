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
	var msg streamedMessage
	// The pieces, appended as they come; strings only at the end.
	type callParts struct{ id, typ, name, args []byte }
	var (
		role, content []byte
		hasContent    bool
		calls         []callParts
	)
	p := docs.Get().(*jsonscan.Doc)
	defer func() { p.Release(); docs.Put(p) }()
	for rest := resp; ; {
		var v []byte
		if v, rest = nextValue(rest); v == nil {
			break
		}
		root, err := p.Parse(v, jsonscan.Limits{})
		if err != nil {
			return nil, false
		}
		if root.Kind != jsonscan.KindObject {
			continue // a relay's end marker ("[DONE]"), not a chunk
		}
		choices, ok := typed(p, root, "choices", jsonscan.KindArray)
		if !ok {
			return nil, false
		}
		if len(p.Children(choices)) == 0 {
			continue
		}
		choice := p.Children(choices)[0]
		switch choice.Kind {
		case jsonscan.KindNull:
			continue
		case jsonscan.KindObject:
		default:
			return nil, false
		}
		if m := member(p, choice, "message"); m.Kind != jsonscan.KindNone && m.Kind != jsonscan.KindNull {
			// A stream that ends with a whole response: its message is
			// the answer.
			return p.Text(m), true
		}
		d, ok := typed(p, choice, "delta", jsonscan.KindObject)
		if !ok {
			return nil, false
		}
		if r, ok := typed(p, d, "role", jsonscan.KindString); !ok {
			return nil, false
		} else if len(role) == 0 {
			role = p.Str(r).AppendDecoded(role)
		}
		if c, ok := typed(p, d, "content", jsonscan.KindString); !ok {
			return nil, false
		} else if c.Kind == jsonscan.KindString {
			content, hasContent = p.Str(c).AppendDecoded(content), true
		}
		tcs, ok := typed(p, d, "tool_calls", jsonscan.KindArray)
		if !ok {
			return nil, false
		}
		for _, tc := range p.Children(tcs) {
			if tc.Kind == jsonscan.KindNull {
				tc = jsonscan.Node{} // a call at index 0 with nothing in it
			} else if tc.Kind != jsonscan.KindObject {
				return nil, false
			}
			index := 0
			if n, ok := typed(p, tc, "index", jsonscan.KindNumber); !ok {
				return nil, false
			} else if n.Kind == jsonscan.KindNumber {
				if _, integer := n.Number(); !integer {
					return nil, false
				}
				if index, err = strconv.Atoi(string(p.Text(n))); err != nil {
					return nil, false
				}
			}
			if index < 0 || index > len(calls) {
				return nil, false
			}
			if index == len(calls) {
				calls = append(calls, callParts{})
			}
			c := &calls[index]
			fn, ok := typed(p, tc, "function", jsonscan.KindObject)
			if !ok {
				return nil, false
			}
			for _, f := range [...]struct {
				obj  jsonscan.Node
				name string
				dst  *[]byte
			}{{tc, "id", &c.id}, {tc, "type", &c.typ}, {fn, "name", &c.name}, {fn, "arguments", &c.args}} {
				s, ok := typed(p, f.obj, f.name, jsonscan.KindString)
				if !ok {
					return nil, false
				}
				if s.Kind == jsonscan.KindString {
					*f.dst = p.Str(s).AppendDecoded(*f.dst)
				}
			}
		}
	}
	if len(role) == 0 {
		return nil, false
	}
	msg.Role = string(role)
	if hasContent {
		s := string(content)
		msg.Content = &s
	}
	for _, c := range calls {
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
