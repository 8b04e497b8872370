package integration

import (
	"bytes"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// The daemon's side of reply deltas (docs/protocol.md §4.3 "Reply
// deltas"), with raw agents that write the frames themselves: a final
// schema-02 reply with the block 01 01 reaches the requester unchanged
// when the delivery carried its request's block, and is refused (NOTICE
// bad_frame to the provider, error bad_frame to the requester) otherwise.
// The delta's payload is opaque to the daemon: made-up bytes here.

// replyDeltaJSON is the response whose header a reply delta carries.
var replyDeltaJSON = []byte(`{"id":"chatcmpl-7","object":"chat.completion","created":1732000000,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Seven."},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`)

// replyDeltaFrame is a reply delta of replyDeltaJSON with payload p.
func replyDeltaFrame(t *testing.T, p []byte) []byte {
	t.Helper()
	fr, err := frame.AppendEncodeReplyDelta(nil, replyDeltaJSON, p, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

// replyFrame sends the plain frame fr as a reply to delivery id on ch.
func (a *rawAgent) replyFrame(ch transport.ChannelID, id uint64, flags negotiate.DataFlags, fr []byte) {
	a.t.Helper()
	if err := a.send(ch, flags, id, "", a.protect(ch, fr)); err != nil {
		a.t.Fatalf("send reply: %v", err)
	}
}

// expectReplyDelta waits for request id's final reply at a and checks that
// it is the reply delta fr, byte for byte once opened.
func expectReplyDelta(t *testing.T, a *rawAgent, id uint64, fr []byte) {
	t.Helper()
	back := a.recvData(5 * time.Second)
	if back.hdr.RequestID != id || !back.hdr.IsReply() || !back.hdr.IsEnd() || back.code != "" {
		t.Fatalf("request %d: got id %d flags %v code %q, want its reply delta", id, back.hdr.RequestID, back.hdr.Flags, back.code)
	}
	plain := bytes.Clone(back.frame)
	frame.SetSequence(plain, 0, 0) // the daemon numbers frames per session
	want := bytes.Clone(fr)
	frame.SetSequence(want, 0, 0)
	if !bytes.Equal(plain, want) {
		t.Fatalf("reply delta arrived as %x\nsent %x", plain, want)
	}
}

// expectNotice waits for a NOTICE with code at provider a.
func expectNotice(t *testing.T, a *rawAgent, code string) {
	t.Helper()
	n := a.recvData(5 * time.Second)
	if !n.hdr.IsNotice() || n.code != code {
		t.Fatalf("%s: got flags %v code %q, want NOTICE %s", a.sess.AgentID, n.hdr.Flags, n.code, code)
	}
}

func TestReplyDeltaRouting(t *testing.T) {
	d := startDaemon(t, nil)
	body := corpus(t, "req-chat-1k-01.json") // model gpt-4o
	delta := replyDeltaFrame(t, []byte("a reply delta the daemon never reads"))
	for _, mode := range modes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				sfx := mode.String() + tr
				model := []string{"gpt-4o"}
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "rdreq-" + sfx, Security: mode, Features: deltaFeat})
				prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "rdprov-" + sfx, Security: mode, Models: model, Features: deltaFeat})
				before := d.Metric(t, "m2md_delta_replies_total")

				// A request with its block (a full turn 1, then a delta):
				// the reply delta travels unchanged.
				id := req.requestExt(prov.sess.AgentID, body, frame.Extension{DocID: 1})
				r := expectAt(t, prov, frame.Extension{DocID: 1}, nil)
				prov.replyFrame(r.ch, r.hdr.RequestID, negotiate.FlagReply|negotiate.FlagEnd, delta)
				expectReplyDelta(t, req, id, delta)
				id = req.requestDelta(prov.sess.AgentID, body, []byte("request delta"), 2, 1)
				r = expectAt(t, prov, frame.Extension{DocID: 2, BaseID: 1, Delta: true}, nil)
				prov.replyFrame(r.ch, r.hdr.RequestID, negotiate.FlagReply|negotiate.FlagEnd, delta)
				expectReplyDelta(t, req, id, delta)
				d.WaitMetric(t, before+2, "m2md_delta_replies_total")

				// A request delivered without a block: the requester holds
				// no dictionary for it.
				_, id = req.request(prov.sess.AgentID, body)
				r = prov.recvData(5 * time.Second)
				prov.replyFrame(r.ch, r.hdr.RequestID, negotiate.FlagReply|negotiate.FlagEnd, delta)
				expectNotice(t, prov, "bad_frame")
				expectCode(t, req, id, "bad_frame")

				// A reply delta that is not final: refused as well, and
				// the request ends with the error.
				id = req.requestExt(prov.sess.AgentID, body, frame.Extension{DocID: 3})
				r = expectAt(t, prov, frame.Extension{DocID: 3}, nil)
				prov.replyFrame(r.ch, r.hdr.RequestID, negotiate.FlagReply, delta)
				expectNotice(t, prov, "bad_frame")
				expectCode(t, req, id, "bad_frame")

				// A request carrying a response's block.
				id = req.sendRequestFrame(prov.sess.AgentID, delta)
				expectCode(t, req, id, "bad_frame")
				if n := d.Metric(t, "m2md_delta_replies_total"); n != before+2 {
					t.Errorf("m2md_delta_replies_total %v after refusals, want %v", n, before+2)
				}
			})
		}
	}
}

// In a cluster the provider's node made the delivery and checks the reply
// delta; the requester's node delivers it as any reply.
func TestClusterReplyDelta(t *testing.T) {
	nodes := startCluster(t, 2, nil, nil)
	body := corpus(t, "req-chat-1k-01.json")
	delta := replyDeltaFrame(t, []byte("a reply delta crossing the cluster"))
	p := mustDialRaw(t, nodes[1], "quic", negotiate.ClientConfig{AgentID: "crdp", Security: frame.SecurityAEAD, Models: []string{"gpt-4o"}, Features: deltaFeat})
	req := mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "crdreq", Security: frame.SecurityHMAC, Features: deltaFeat})
	waitAgentAt(t, nodes[0], "", "crdp", nodes[1])

	id := req.requestExt("", body, frame.Extension{DocID: 1})
	r := expectAt(t, p, frame.Extension{DocID: 1}, nil)
	p.replyFrame(r.ch, r.hdr.RequestID, negotiate.FlagReply|negotiate.FlagEnd, delta)
	expectReplyDelta(t, req, id, delta)
	nodes[1].WaitMetric(t, 1, "m2md_delta_replies_total")

	_, id = req.request("", body)
	r = p.recvData(5 * time.Second)
	p.replyFrame(r.ch, r.hdr.RequestID, negotiate.FlagReply|negotiate.FlagEnd, delta)
	expectNotice(t, p, "bad_frame")
	expectCode(t, req, id, "bad_frame")
}
