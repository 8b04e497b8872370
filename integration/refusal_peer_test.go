package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// The peer and message of provider_busy and base_missing (docs/protocol.md
// §4, Errors; §4.3, Routing): the provider's id when one provider was the
// only place the request could go (an addressed agent, the holder of a
// delta's base, an addressed provider without feature delta), empty when
// the daemon refused the request before choosing one.
func TestRefusalPeers(t *testing.T) {
	// A raw agent keeps each request's QUIC stream, and a session's stream
	// limit is also this maximum: room for the requester's six requests.
	const maxOut = 8
	d := startDaemon(t, func(c *daemon.Config) { c.MaxOutstanding = maxOut })
	body := corpus(t, "req-chat-1k-01.json") // model gpt-4o
	resp := corpus(t, "resp-chat-06.json")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			dial := func(id string, models []string, feats []negotiate.Feature) *rawAgent {
				return mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: id + "-" + tr, Security: frame.SecurityHMAC, Models: models, Features: feats})
			}
			prov := dial("busy-prov", []string{"gpt-4o"}, deltaFeat)
			plain := dial("plain-prov", []string{"gpt-5"}, nil)
			req := dial("req", nil, deltaFeat)
			// Two fillers: each session's streams include its control stream.
			fillers := []*rawAgent{dial("filler1", nil, nil), dial("filler2", nil, nil)}

			// Doc 1 goes to prov, which answers: prov holds it.
			id := req.requestExt("", body, frame.Extension{DocID: 1})
			got := expectAt(t, prov, frame.Extension{DocID: 1}, nil)
			prov.reply(got.ch, got.hdr.RequestID, true, resp)
			expectReply(t, req, id)

			// prov at its maximum of outstanding deliveries.
			for i := range maxOut {
				fillers[i%2].request(prov.sess.AgentID, body)
				prov.recvData(5 * time.Second)
			}
			expectRefusal := func(what string, id uint64, code, peer, inMessage string) {
				t.Helper()
				back := req.recvData(5 * time.Second)
				msg := errorMessage(t, back)
				if back.hdr.RequestID != id || back.code != code || back.peer != peer || !strings.Contains(msg, inMessage) {
					t.Errorf("%s: id %d code %q peer %q message %q; want %q from %q naming %q", what, back.hdr.RequestID, back.code, back.peer, msg, code, peer, inMessage)
				}
				if strings.Contains(msg, "no address") {
					t.Errorf("%s: misleading message %q", what, msg)
				}
			}
			_, id = req.request(prov.sess.AgentID, body)
			expectRefusal("addressed to a busy provider", id, "provider_busy", prov.sess.AgentID, "provider "+prov.sess.AgentID)
			id = req.requestDelta("", body, []byte("opaque delta"), 2, 1)
			expectRefusal("a delta whose base's provider is busy", id, "provider_busy", prov.sess.AgentID, "provider "+prov.sess.AgentID)
			_, id = req.request("", body)
			expectRefusal("routed by model, every provider busy", id, "provider_busy", "", "model gpt-4o")

			id = req.requestDelta("", body, []byte("opaque delta"), 3, 999)
			expectRefusal("a delta against an unknown base", id, "base_missing", "", "base document 999")
			id = req.requestDelta(plain.sess.AgentID, body, []byte("opaque delta"), 4, 1)
			expectRefusal("a delta addressed to a provider without delta", id, "base_missing", plain.sess.AgentID, "provider "+plain.sess.AgentID)
		})
	}
}
