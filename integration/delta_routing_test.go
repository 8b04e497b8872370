package integration

import (
	"bytes"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// The daemon's side of conversation deltas (docs/protocol.md §4.3,
// docs/operations.md "Conversation affinity"), with raw agents that write
// the extension block themselves: affinity to the base's provider, the load
// rule, base_missing, the block removed for a provider without the feature,
// and refused from a session without it. The payload of a delta is opaque to
// the daemon; these tests send made-up delta bytes and check they arrive.

var deltaFeat = []negotiate.Feature{negotiate.FeatureDelta}

// requestExt sends body as a full request frame with ext's block.
func (a *rawAgent) requestExt(peer string, body []byte, ext frame.Extension) uint64 {
	a.t.Helper()
	fr, err := frame.AppendEncodeExt(nil, body, ext, frame.Limits{})
	if err != nil {
		a.t.Fatal(err)
	}
	return a.sendRequestFrame(peer, fr)
}

// requestDelta sends a delta request for body: the routing header and CRC
// are body's, the payload is delta.
func (a *rawAgent) requestDelta(peer string, body, delta []byte, doc, base uint64) uint64 {
	a.t.Helper()
	fr, err := frame.AppendEncodeDelta(nil, body, delta, frame.Extension{DocID: doc, BaseID: base}, frame.Limits{})
	if err != nil {
		a.t.Fatal(err)
	}
	return a.sendRequestFrame(peer, fr)
}

func (a *rawAgent) sendRequestFrame(peer string, fr []byte) uint64 {
	a.t.Helper()
	ch := a.channel()
	id := a.newID()
	if err := a.send(ch, 0, id, peer, a.protect(ch, fr)); err != nil {
		a.t.Fatalf("send request: %v", err)
	}
	return id
}

// delivered is what a provider got: its extension and its payload section.
func delivered(t *testing.T, r *received) (frame.Extension, []byte) {
	t.Helper()
	var h frame.Header
	if err := frame.ReadHeader(r.frame, &h); err != nil {
		t.Fatalf("delivered frame unreadable: %v", err)
	}
	return h.Ext, r.frame[h.PayloadOffset()+8:]
}

// expectAt waits for a request at want (one at another provider would be
// caught by the next expectation there) and checks its block and, unless
// nil, its payload; it returns it.
func expectAt(t *testing.T, want *rawAgent, ext frame.Extension, payload []byte) *received {
	t.Helper()
	got := want.recvData(5 * time.Second)
	if got.hdr.IsReply() {
		t.Fatalf("%s got a reply, want a request", want.sess.AgentID)
	}
	gotExt, gotPayload := delivered(t, got)
	if gotExt != ext || payload != nil && !bytes.Equal(gotPayload, payload) {
		t.Fatalf("%s got block %+v and %d payload bytes, want %+v and %d", want.sess.AgentID, gotExt, len(gotPayload), ext, len(payload))
	}
	return got
}

func expectCode(t *testing.T, a *rawAgent, id uint64, code string) {
	t.Helper()
	back := a.recvData(5 * time.Second)
	if back.hdr.RequestID != id || !back.hdr.IsEnd() || back.code != code {
		t.Fatalf("request %d: got id %d code %q, want %q", id, back.hdr.RequestID, back.code, code)
	}
}

func TestDeltaAffinityAllModes(t *testing.T) {
	d := startDaemon(t, nil)
	body := corpus(t, "req-chat-1k-01.json") // model gpt-4o
	resp := corpus(t, "resp-chat-06.json")
	fakeDelta := []byte("a delta the daemon never reads")
	for i, mode := range modes {
		tr := transports[i%len(transports)]
		t.Run(mode.String()+"/"+tr, func(t *testing.T) {
			sfx := mode.String() + tr
			dial := func(id string, models []string, feats []negotiate.Feature) *rawAgent {
				return mustDialRaw(t, d, transports[(len(id)+i)%len(transports)], negotiate.ClientConfig{
					AgentID: id + "-" + sfx, Security: mode, Models: models, Features: feats})
			}
			model := []string{"gpt-4o"}
			req := dial("req", nil, deltaFeat)
			first := dial("p1", model, deltaFeat)

			// Turn 1: a full request naming doc 1, to the only provider.
			base := req.requestExt("", body, frame.Extension{DocID: 1})
			got := expectAt(t, first, frame.Extension{DocID: 1}, nil)
			first.reply(got.ch, got.hdr.RequestID, true, resp)
			expectReply(t, req, base)
			other := dial("p2", model, deltaFeat)

			// Turn 2, full with BASE: round robin would now pick the other
			// provider; affinity keeps the conversation where it is.
			id := req.requestExt("", body, frame.Extension{DocID: 2, BaseID: 1})
			r := expectAt(t, first, frame.Extension{DocID: 2, BaseID: 1}, nil)
			first.reply(r.ch, r.hdr.RequestID, true, resp)
			expectReply(t, req, id)

			// Turn 3, a delta against doc 2: only the holder can read it.
			id = req.requestDelta("", body, fakeDelta, 3, 2)
			r = expectAt(t, first, frame.Extension{DocID: 3, BaseID: 2, Delta: true}, fakeDelta)
			first.reply(r.ch, r.hdr.RequestID, true, resp)
			expectReply(t, req, id)

			// The holder busy (3 outstanding against 0): a full request
			// spreads to the other provider, a delta still goes to it.
			for range 3 {
				req.request(first.sess.AgentID, body)
				first.recvData(5 * time.Second)
			}
			req.requestExt("", body, frame.Extension{DocID: 4, BaseID: 3})
			expectAt(t, other, frame.Extension{DocID: 4, BaseID: 3}, nil)
			req.requestDelta("", body, fakeDelta, 5, 3)
			expectAt(t, first, frame.Extension{DocID: 5, BaseID: 3, Delta: true}, fakeDelta)
			if n := d.Metric(t, "m2md_delta_routes_total", "result=spread"); n < 1 {
				t.Errorf("spread counted %v times", n)
			}

			// Doc 4 went to the other provider: its delta goes there.
			req.requestDelta("", body, fakeDelta, 6, 4)
			expectAt(t, other, frame.Extension{DocID: 6, BaseID: 4, Delta: true}, fakeDelta)

			// A base nobody recorded, and a base whose provider left:
			// base_missing from the daemon, nothing delivered.
			id = req.requestDelta("", body, fakeDelta, 7, 999)
			expectCode(t, req, id, "base_missing")
			first.conn.Close()
			waitGone(t, d, first)
			id = req.requestDelta("", body, fakeDelta, 8, 3)
			// The four requests outstanding at first end with agent_gone.
			for range 5 {
				if back := req.recvData(5 * time.Second); back.hdr.RequestID == id {
					if back.code != "base_missing" {
						t.Fatalf("delta to a departed provider: %q", back.code)
					}
					return
				}
			}
			t.Fatal("no base_missing for the delta to a departed provider")
		})
	}
}

func expectReply(t *testing.T, a *rawAgent, id uint64) {
	t.Helper()
	back := a.recvData(5 * time.Second)
	if back.hdr.RequestID != id || !back.hdr.IsReply() || back.code != "" {
		t.Fatalf("request %d: got id %d code %q, want its reply", id, back.hdr.RequestID, back.code)
	}
}

func waitGone(t *testing.T, d *testDaemon, a *rawAgent) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for d.SessionOpen(a.sess.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still registered", a.sess.AgentID)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A provider without feature delta gets full requests without the block
// and never a delta; a session without it may not send the block; and a
// daemon started with --disable-features delta negotiates it with nobody.
func TestDeltaWithoutFeature(t *testing.T) {
	body := corpus(t, "req-chat-1k-01.json")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			d := startDaemon(t, nil)
			plain := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "plain-prov", Security: frame.SecurityHMAC, Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "req", Security: frame.SecurityHMAC, Features: deltaFeat})
			if !req.sess.Params.Has(negotiate.FeatureDelta) {
				t.Fatal("delta not negotiated")
			}
			full, err := frame.AppendEncode(nil, body, frame.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			req.requestExt("", body, frame.Extension{DocID: 1})
			got := plain.recvData(5 * time.Second)
			var h frame.Header
			if err := frame.ReadHeader(got.frame, &h); err != nil || h.Flags.HasExtensions() || h.ExtLen != 0 {
				t.Fatalf("delivered with flags %v, block %d bytes (%v)", h.Flags, h.ExtLen, err)
			}
			if !bytes.Equal(got.body, body) || !bytes.Equal(got.frame[frame.OffVarHeader:], full[frame.OffVarHeader:]) {
				t.Fatal("stripped frame differs from the plain encoding of the same request")
			}
			plain.reply(got.ch, got.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
			req.recvData(5 * time.Second)

			// Doc 1 went to a provider that cannot hold bases: not recorded.
			id := req.requestDelta("", body, []byte("delta"), 2, 1)
			expectCode(t, req, id, "base_missing")
			// Addressed to it: the daemon cannot strip a delta.
			id = req.requestDelta(plain.sess.AgentID, body, []byte("delta"), 3, 1)
			expectCode(t, req, id, "base_missing")

			// The requester itself without the feature: bad_frame.
			id = plain.requestExt("", body, frame.Extension{DocID: 9})
			expectCode(t, plain, id, "bad_frame")

			off := startDaemon(t, func(c *daemon.Config) { c.DisableFeatures = deltaFeat })
			a := mustDialRaw(t, off, tr, negotiate.ClientConfig{AgentID: "a", Features: deltaFeat})
			if a.sess.Params.Has(negotiate.FeatureDelta) {
				t.Fatal("--disable-features delta: negotiated all the same")
			}
			id = a.requestExt("", body, frame.Extension{DocID: 1})
			expectCode(t, a, id, "bad_frame")
			if n := d.Metric(t, "m2md_delta_routes_total", "result=base_missing"); n != 2 {
				t.Errorf("base_missing counted %v times, want 2", n)
			}
		})
	}
}

// In a cluster the requester's node keeps the affinity map: a provider on
// another node receives the conversation's deltas, that node removes the
// block for its agent without the feature (and refuses a delta for it with
// base_missing), and a base whose provider left is base_missing at once.
func TestClusterDeltaAffinity(t *testing.T) {
	nodes := startCluster(t, 2, nil, nil)
	body := corpus(t, "req-chat-1k-01.json")
	resp := corpus(t, "resp-chat-06.json")
	fakeDelta := []byte("a delta for the provider on the other node")
	p := mustDialRaw(t, nodes[1], "quic", negotiate.ClientConfig{AgentID: "cdp", Security: frame.SecurityAEAD, Models: []string{"gpt-4o"}, Features: deltaFeat})
	q := mustDialRaw(t, nodes[1], "ws", negotiate.ClientConfig{AgentID: "cdq", Security: frame.SecurityHMAC})
	req := mustDialRaw(t, nodes[0], "ws", negotiate.ClientConfig{AgentID: "cdreq", Security: frame.SecurityHMAC, Features: deltaFeat})
	waitAgentAt(t, nodes[0], "", "cdp", nodes[1])
	waitAgentAt(t, nodes[0], "", "cdq", nodes[1])

	id := req.requestExt("", body, frame.Extension{DocID: 1})
	r := expectAt(t, p, frame.Extension{DocID: 1}, nil)
	p.reply(r.ch, r.hdr.RequestID, true, resp)
	expectReply(t, req, id)
	id = req.requestDelta("", body, fakeDelta, 2, 1)
	r = expectAt(t, p, frame.Extension{DocID: 2, BaseID: 1, Delta: true}, fakeDelta)
	p.reply(r.ch, r.hdr.RequestID, true, resp)
	expectReply(t, req, id)

	// The agent without the feature, addressed across the cluster.
	req.requestExt("cdq", body, frame.Extension{DocID: 3})
	got := q.recvData(5 * time.Second)
	var h frame.Header
	if err := frame.ReadHeader(got.frame, &h); err != nil || h.ExtLen != 0 || !bytes.Equal(got.body, body) {
		t.Fatalf("cdq got a block of %d bytes (%v)", h.ExtLen, err)
	}
	id = req.requestDelta("cdq", body, fakeDelta, 4, 3)
	expectCode(t, req, id, "base_missing")

	p.conn.Close()
	waitAgentGone(t, nodes, "cdp")
	id = req.requestDelta("", body, fakeDelta, 5, 2)
	expectCode(t, req, id, "base_missing")
}
