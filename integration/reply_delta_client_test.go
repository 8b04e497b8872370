package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/delta"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bench"
	"github.com/m2md/m2md/negotiate"
)

// replyDict rebuilds the request r delivered (h is its frame's header)
// against base when it is a delta, and returns it with the dictionary of
// its reply, D_r (docs/protocol.md §4.3, "Reply deltas").
func (r *received) replyDict(h *frame.Header, base *delta.Base) (req, dict []byte, err error) {
	req = r.body
	if h.Ext.Delta {
		if req, err = delta.AppendDecodeFrame(nil, r.frame, base, frame.Limits{}); err != nil {
			return nil, nil, err
		}
	} else {
		base = nil
	}
	return req, delta.AppendReplyDict(nil, base, req), nil
}

// Reply deltas (docs/protocol.md §4.3) between the Go client as requester
// and a raw provider that writes them itself: a real reply delta against
// D_r is rebuilt byte for byte, for a full request (D_r = the request) and
// for a delta (D_r = base response ‖ request); one that does not decode
// fails the request with ErrBadFrame and is not resent.
func TestReplyDeltaToClient(t *testing.T) {
	d := startDaemon(t, nil)
	convs := loadConversations(t)
	c := convs[0]
	for _, mt := range modesTransports() {
		t.Run(mt.mode.String()+"/"+mt.tr, func(t *testing.T) {
			sfx := mt.mode.String() + mt.tr
			prov := mustDialRaw(t, d, mt.tr, negotiate.ClientConfig{AgentID: "rdcp-" + sfx, Security: mt.mode, Models: []string{"gpt-4o"}, Features: deltaFeat})
			req := dialClient(t, d.url(mt.tr), client.Options{AgentID: "rdcr-" + sfx, Security: mt.mode, TLSConfig: d.clientTLS(t)})
			call := func(k int) (*client.Response, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return req.Do(ctx, c.Turns[k])
			}
			// answer reads the delivered turn k, rebuilding it against
			// base when it is a delta, and answers it with reply(D_r).
			answer := func(k int, base *delta.Base, reply func(resp, dict []byte) []byte) {
				r := prov.recvData(5 * time.Second)
				var h frame.Header
				if err := frame.ReadHeader(r.frame, &h); err != nil || !h.Ext.Present() {
					t.Errorf("turn %d delivered with block %+v (%v)", k+1, h.Ext, err)
				}
				_, dict, err := r.replyDict(&h, base)
				if err != nil {
					t.Errorf("turn %d: %v", k+1, err)
				}
				fr := reply(c.Responses[k], dict)
				prov.replyFrame(r.ch, r.hdr.RequestID, negotiate.FlagReply|negotiate.FlagEnd, fr)
			}
			// good is what a provider sends: the reply delta when it is
			// smaller (turn 1's D_r is its request alone: it may not be).
			good := func(resp, dict []byte) []byte {
				fr, _, err := delta.AppendEncodeReply(nil, resp, dict, frame.Limits{})
				if err != nil {
					t.Errorf("reply delta: %v", err)
				}
				return fr
			}
			for k := range 3 {
				var base *delta.Base
				if k > 0 {
					base = delta.NewBase(c.Turns[k-1], c.Responses[k-1])
				}
				go answer(k, base, good)
				resp, err := call(k)
				if err != nil || string(resp.Body) != string(c.Responses[k]) {
					t.Fatalf("turn %d: %v (answer arrived different: %v)", k+1, err, err == nil)
				}
			}
			if st := req.Stats(); st.ReplyDeltasReceived < 2 || st.DeltasSent != 2 {
				t.Fatalf("stats %+v", st)
			}

			// Turn 4 is a delta against turn 3: a reply delta against
			// another dictionary (here the response itself, which makes it
			// tiny), or with a changed byte, fails.
			bad := map[string]func(resp, dict []byte) []byte{
				"wrong D_r": func(resp, _ []byte) []byte {
					return good(resp, resp)
				},
				"flipped byte": func(resp, dict []byte) []byte {
					fr := good(resp, dict)
					fr[len(fr)-3] ^= 0x41
					return fr
				},
			}
			for name, reply := range bad {
				before := req.Stats()
				go answer(3, delta.NewBase(c.Turns[2], c.Responses[2]), reply)
				if _, err := call(3); !errors.Is(err, client.ErrBadFrame) {
					t.Fatalf("%s: %v, want ErrBadFrame", name, err)
				}
				if st := req.Stats(); st.DeltaResends != before.DeltaResends || st.BadFrames != before.BadFrames+1 || st.ReplyDeltasReceived != before.ReplyDeltasReceived {
					t.Fatalf("%s: stats %+v", name, st)
				}
			}
		})
	}
}

// Across a cluster: the provider's node checks the reply delta, the
// requester's node delivers it; a requester without feature delta sends
// no block, so it never gets a reply delta.
func TestClusterConversationReplyDeltas(t *testing.T) {
	nodes := startCluster(t, 2, nil, nil)
	convs := loadConversations(t)
	c := convs[1]
	p := dialClient(t, nodes[1].url("quic"), client.Options{AgentID: "crd-prov", Security: frame.SecurityAEAD, TLSConfig: nodes[1].clientTLS(t),
		Models: bench.ConversationModels(convs), Handler: answering(convs)})
	waitAgentAt(t, nodes[0], "", "crd-prov", nodes[1])
	r := &convRig{t: t, d: nodes[0], tr: "ws", mode: frame.SecurityHMAC, convs: convs}
	req := r.dial("crd-req", client.Options{})
	plain := r.dial("crd-plain", client.Options{DisableFeatures: deltaFeat})
	for k := range c.Turns {
		r.turn(req, c, k)
	}
	st := req.Stats()
	sent := waitReplyDeltas(t, st.ReplyDeltasReceived, p)
	if st.DeltasSent != uint64(len(c.Turns)-1) || st.ReplyDeltasReceived != sent || sent < uint64(len(c.Turns)-1) || st.BadFrames != 0 {
		t.Fatalf("requester %+v, provider sent %d reply deltas", st, sent)
	}
	nodes[1].WaitMetric(t, float64(sent), "m2md_delta_replies_total")
	for k := range 4 {
		r.turn(plain, c, k)
	}
	if ps, st := p.Stats(), plain.Stats(); ps.ReplyDeltasSent != sent || st.ReplyDeltasReceived != 0 || st.DeltasSent != 0 {
		t.Fatalf("without delta: provider sent %d reply deltas in all (%d before), requester %+v", ps.ReplyDeltasSent, sent, st)
	}
}
