package testkit

import (
	"fmt"
	"math/rand/v2"
)

// LargeTurn returns a conversation's base (a request and its response) and
// the next turn's document of exactly n bytes (n ≥ 300): the base's user
// messages of at most 1 MiB each (a JSON string is limited to 10 MiB), then
// the answer and a new question. The text is words drawn from seed, so that
// it compresses about as prose does, and the same seed gives the same turn.
func LargeTurn(n int, seed uint64) (req, resp, doc []byte) {
	const (
		head   = `{"model":"gpt-4o","messages":[`
		answer = `,{"role":"assistant","content":"Noted."}`
		ask    = `,{"role":"user","content":"Summarise it."}]}`
		piece  = 1 << 20
	)
	words := []string{"the", "model", "answers", "a", "long", "conversation", "with", "every", "earlier", "turn", "again"}
	r := rand.New(rand.NewPCG(seed, seed+1))
	text := make([]byte, 0, n)
	for len(text) < n {
		text = append(append(text, words[r.IntN(len(words))]...), ' ')
	}
	messages := func(text []byte) []byte {
		var b []byte
		for len(text) > 0 {
			k := min(len(text), piece)
			if len(b) > 0 {
				b = append(b, ',')
			}
			b = fmt.Appendf(b, `{"role":"user","content":"%s"}`, text[:k])
			text = text[k:]
		}
		return b
	}
	l := n - len(head) - len(answer) - len(ask) - 30*(n/piece+1)
	for {
		m := messages(text[:l])
		if d := n - (len(head) + len(m) + len(answer) + len(ask)); d != 0 {
			l += d
			continue
		}
		req = fmt.Appendf(nil, "%s%s]}", head, m)
		doc = fmt.Appendf(nil, "%s%s%s%s", head, m, answer, ask)
		break
	}
	resp = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Noted."},"finish_reason":"stop"}]}`)
	return req, resp, doc
}
