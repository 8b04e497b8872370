package conversation

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"github.com/m2md/m2md/internal/jsonscan"
)

// The OpenAI Chat Completions schema: what a conversation's messages say,
// as keys that the same message written differently shares.

// messageKeys reads the "messages" of a chat request and returns, for each
// i, a key of messages[0..i] (keys[i] depends on every message up to i).
// ok is false when the document has no non-empty messages array.
func messageKeys(seed maphash.Seed, doc []byte, keys []uint64) (_ []uint64, ok bool) {
	p := docs.Get().(*jsonscan.Doc)
	defer docs.Put(p)
	root, err := p.Parse(doc, jsonscan.Limits{})
	if err != nil || root.Kind != jsonscan.KindObject {
		return keys, false
	}
	msgs := member(p, root, "messages")
	if msgs.Kind != jsonscan.KindArray {
		return keys, false
	}
	var sum uint64
	for _, m := range p.Children(msgs) {
		sum = chain(seed, sum, messageKey(seed, p, m))
		keys = append(keys, sum)
	}
	return keys, len(keys) > 0
}

var (
	docs    = sync.Pool{New: func() any { return new(jsonscan.Doc) }}
	scratch = sync.Pool{New: func() any { return new([]byte) }}
)

// chain extends the key of a message list by one message.
func chain(seed maphash.Seed, sum, msg uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], sum)
	binary.LittleEndian.PutUint64(b[8:], msg)
	return maphash.Bytes(seed, b[:])
}

// messageKey is the key of one message: its role, content and tool calls
// (and tool_call_id), each canonical. An absent, null or empty content or
// tool_calls are the same.
func messageKey(seed maphash.Seed, p *jsonscan.Doc, m jsonscan.Node) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	if m.Kind != jsonscan.KindObject {
		writeCanonical(&h, p, m)
		return h.Sum64()
	}
	fields := [...]string{"role", "content", "tool_calls", "tool_call_id"}
	var found [len(fields)]jsonscan.Node
	for _, c := range p.Children(m) {
		for i, f := range fields {
			if p.HasName(&c, f) {
				found[i] = c
			}
		}
	}
	for _, v := range found {
		if isEmpty(p, v) {
			h.WriteByte('e')
		} else {
			writeCanonical(&h, p, v)
		}
	}
	return h.Sum64()
}

func isEmpty(p *jsonscan.Doc, v jsonscan.Node) bool {
	switch v.Kind {
	case jsonscan.KindNone, jsonscan.KindNull:
		return true
	case jsonscan.KindString:
		return p.Str(v).Len == 0
	case jsonscan.KindArray:
		return len(p.Children(v)) == 0
	}
	return false
}

// writeCanonical hashes a value so that the same JSON value written
// differently (member order, whitespace, string escapes) hashes alike.
func writeCanonical(h *maphash.Hash, p *jsonscan.Doc, v jsonscan.Node) {
	var n [8]byte
	switch v.Kind {
	case jsonscan.KindString:
		s := p.Str(v)
		binary.LittleEndian.PutUint64(n[:], uint64(s.Len))
		h.WriteByte('s')
		h.Write(n[:])
		if !s.Escaped {
			h.Write(s.Raw)
		} else {
			b := scratch.Get().(*[]byte)
			*b = s.AppendDecoded((*b)[:0])
			h.Write(*b)
			scratch.Put(b)
		}
	case jsonscan.KindArray:
		kids := p.Children(v)
		binary.LittleEndian.PutUint64(n[:], uint64(len(kids)))
		h.WriteByte('a')
		h.Write(n[:])
		for _, k := range kids {
			writeCanonical(h, p, k)
		}
	case jsonscan.KindObject:
		kids := slices.Clone(p.Children(v))
		names := make([]string, len(kids))
		for i, k := range kids {
			names[i] = string(p.Name(k).AppendDecoded(nil))
		}
		order := make([]int, len(kids))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(names[a], names[b]) })
		binary.LittleEndian.PutUint64(n[:], uint64(len(kids)))
		h.WriteByte('o')
		h.Write(n[:])
		for _, i := range order {
			h.WriteString(names[i])
			h.WriteByte(0)
			writeCanonical(h, p, kids[i])
		}
	default:
		h.WriteByte(byte('0' + v.Kind))
		h.Write(p.Text(v))
	}
}

// replyKey is the key of a response's assistant message (its
// choices[0].message, or for a stream what streamMessage rebuilds), as
// messageKeys computes it for the same message in a request.
func replyKey(seed maphash.Seed, resp []byte, stream bool) (uint64, bool) {
	if stream {
		m, ok := streamMessage(resp)
		if !ok {
			return 0, false
		}
		resp = m
	}
	p := docs.Get().(*jsonscan.Doc)
	defer docs.Put(p)
	msg, err := p.Parse(resp, jsonscan.Limits{})
	if err != nil || msg.Kind != jsonscan.KindObject {
		return 0, false
	}
	if !stream {
		choices := member(p, msg, "choices")
		if choices.Kind != jsonscan.KindArray || len(p.Children(choices)) == 0 {
			return 0, false
		}
		if msg = member(p, p.Children(choices)[0], "message"); msg.Kind != jsonscan.KindObject {
			return 0, false
		}
	}
	return messageKey(seed, p, msg), true
}

// member returns the member name of object n (the last one of that name),
// or a node of KindNone.
func member(p *jsonscan.Doc, n jsonscan.Node, name string) jsonscan.Node {
	var found jsonscan.Node
	if n.Kind != jsonscan.KindObject {
		return found
	}
	for _, c := range p.Children(n) {
		if p.HasName(&c, name) {
			found = c
		}
	}
	return found
}
