package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
)

// TestLeastOutstandingSpread: three providers of one model, replies held.
// Nine requests by model spread 3/3/3; once one provider answers its three,
// the next three all go to it (it alone has nothing outstanding); every
// reply then finds its requester with the right id and provider.
func TestLeastOutstandingSpread(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			var provs []*rawAgent
			for i := range 3 {
				provs = append(provs, mustDialRaw(t, d, tr, negotiate.ClientConfig{
					AgentID: fmt.Sprintf("spread-%s-%d", tr, i), Models: []string{"gpt-4o"},
				}))
			}
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "spread-req-" + tr})
			body := corpus(t, "req-chat-1k-01.json") // gpt-4o

			type held struct {
				prov *rawAgent
				got  *received
			}
			sent := map[uint64]bool{}
			var pending []held
			collect := func(n int, want map[*rawAgent]int) {
				t.Helper()
				for range n {
					_, id := req.request("", body)
					sent[id] = true
				}
				for _, p := range provs {
					for range want[p] {
						got := p.recvData(5 * time.Second)
						if got.hdr.IsReply() || got.peer != req.sess.AgentID || string(got.body) != string(body) {
							t.Fatalf("%s got flags %v peer %q", p.sess.AgentID, got.hdr.Flags, got.peer)
						}
						pending = append(pending, held{p, got})
					}
				}
				for _, p := range provs {
					p.expectSilence(100 * time.Millisecond)
				}
			}
			collect(9, map[*rawAgent]int{provs[0]: 3, provs[1]: 3, provs[2]: 3})

			answer := func(h held) {
				h.prov.reply(h.got.ch, h.got.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
			}
			// provs[1] answers its three; the others keep theirs.
			var rest []held
			for _, h := range pending {
				if h.prov == provs[1] {
					answer(h)
				} else {
					rest = append(rest, h)
				}
			}
			byProv := map[string]int{}
			for range 3 {
				back := req.recvData(5 * time.Second)
				if !sent[back.hdr.RequestID] || !back.hdr.IsEnd() || back.peer != provs[1].sess.AgentID {
					t.Fatalf("reply id %d flags %v from %q", back.hdr.RequestID, back.hdr.Flags, back.peer)
				}
				delete(sent, back.hdr.RequestID)
				byProv[back.peer]++
			}
			pending = rest
			collect(3, map[*rawAgent]int{provs[1]: 3})
			for _, h := range pending {
				answer(h)
			}
			for range 9 {
				back := req.recvData(5 * time.Second)
				if !sent[back.hdr.RequestID] || !back.hdr.IsEnd() || back.code != "" {
					t.Fatalf("reply id %d flags %v code %q (outstanding %v)", back.hdr.RequestID, back.hdr.Flags, back.code, sent)
				}
				delete(sent, back.hdr.RequestID)
				byProv[back.peer]++
			}
			if byProv[provs[0].sess.AgentID] != 3 || byProv[provs[1].sess.AgentID] != 6 || byProv[provs[2].sess.AgentID] != 3 {
				t.Fatalf("replies by provider %v, want 3/6/3", byProv)
			}
		})
	}
}

// TestRouteByAgentID: a request addressed to one provider reaches exactly
// that one, even though others serve the model and are less loaded.
func TestRouteByAgentID(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			var provs []*rawAgent
			for i := range 3 {
				provs = append(provs, mustDialRaw(t, d, tr, negotiate.ClientConfig{
					AgentID: fmt.Sprintf("byid-%s-%d", tr, i), Models: []string{"gpt-4o"},
				}))
			}
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "byid-req-" + tr})
			target := provs[2]
			var got []*received
			for range 4 {
				req.request(target.sess.AgentID, corpus(t, "req-chat-4k-02.json")) // a claude model: address wins
				got = append(got, target.recvData(5*time.Second))
			}
			provs[0].expectSilence(100 * time.Millisecond)
			provs[1].expectSilence(10 * time.Millisecond)
			for _, g := range got {
				target.reply(g.ch, g.hdr.RequestID, true, corpus(t, "resp-chat-02.json"))
			}
			for range 4 {
				if back := req.recvData(5 * time.Second); back.peer != target.sess.AgentID || !back.hdr.IsEnd() {
					t.Fatalf("reply from %q flags %v", back.peer, back.hdr.Flags)
				}
			}
		})
	}
}

// chunk is a chat.completion.chunk whose content names its stream and
// position, so the requester can check order and origin.
func chunk(stream string, i int) []byte {
	return fmt.Appendf(nil, `{"id":"chatcmpl-%s","object":"chat.completion.chunk","created":1717171717,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"delta":{"content":"%s chunk %03d"},"finish_reason":null}]}`, stream, stream, i)
}

// TestStreams: a provider streams N chunks and a final reply; the
// requester sees them all, in order, END only on the last. Several streams
// on one session, their chunks interleaved by the provider, arrive each in
// its own order with nothing mixed, in every security mode.
func TestStreams(t *testing.T) {
	const chunks = 20
	d := startDaemon(t, nil)
	for _, mode := range modes {
		for _, tr := range transports {
			for _, streams := range []int{1, 4} {
				t.Run(fmt.Sprintf("%s/%s/%d-streams", mode, tr, streams), func(t *testing.T) {
					suffix := fmt.Sprintf("%s-%s-%d", mode, tr, streams)
					prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "sprov-" + suffix, Security: mode, Models: []string{"gpt-4o"}})
					req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "sreq-" + suffix, Security: mode})

					names := map[uint64]string{} // request id → stream name
					var deliveries []*received
					for s := range streams {
						_, id := req.request("", corpus(t, "req-stream-01.json"))
						names[id] = fmt.Sprintf("s%d", s)
						deliveries = append(deliveries, prov.recvData(5*time.Second))
					}
					// Interleave: chunk i of every stream, then i+1.
					for i := range chunks + 1 {
						for s, dl := range deliveries {
							body := chunk(fmt.Sprintf("s%d", s), i)
							if i == chunks {
								body = corpus(t, "resp-chat-06.json")
							}
							prov.reply(dl.ch, dl.hdr.RequestID, i == chunks, body)
						}
					}
					next := map[uint64]int{}
					for range streams * (chunks + 1) {
						r := req.recvData(5 * time.Second)
						name, ok := names[r.hdr.RequestID]
						if !ok || r.peer != prov.sess.AgentID || r.err != nil {
							t.Fatalf("reply for unknown id %d from %q (err %v)", r.hdr.RequestID, r.peer, r.err)
						}
						i := next[r.hdr.RequestID]
						next[r.hdr.RequestID]++
						switch {
						case i < chunks:
							if r.hdr.IsEnd() || string(r.body) != string(chunk(name, i)) {
								t.Fatalf("stream %s position %d: END=%v body %.80s", name, i, r.hdr.IsEnd(), r.body)
							}
						case i == chunks:
							if !r.hdr.IsEnd() || string(r.body) != string(corpus(t, "resp-chat-06.json")) {
								t.Fatalf("stream %s: last reply END=%v", name, r.hdr.IsEnd())
							}
						default:
							t.Fatalf("stream %s: reply after END", name)
						}
					}
					req.expectSilence(100 * time.Millisecond)
					// Every delivery is over: a late chunk is unknown, dropped
					// without a word to anyone.
					prov.reply(deliveries[0].ch, deliveries[0].hdr.RequestID, false, chunk("late", 0))
					req.expectSilence(100 * time.Millisecond)
				})
			}
		}
	}
}
