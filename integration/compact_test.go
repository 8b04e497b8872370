package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/delta"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// Compact delta frames (docs/protocol.md §4.5) between the Go client as
// requester and a raw provider, in every mode and transport, with each side
// having the feature or not: a frame with an extension block reaches a
// session with compact in the compact form and one without it as the M2M
// v1 frame, whatever form its sender used; either way the provider
// rebuilds the turn and the requester the reply, byte for byte.
func TestCompactDeltaFrames(t *testing.T) {
	d := startDaemon(t, nil)
	c := loadConversations(t)[0]
	withCompact := []negotiate.Feature{negotiate.FeatureDelta, negotiate.FeatureCompact}
	for _, mt := range modesTransports() {
		for _, tc := range []struct {
			name                 string
			reqCompact, pCompact bool
		}{{"both", true, true}, {"requester-only", true, false}, {"provider-only", false, true}} {
			t.Run(mt.mode.String()+"/"+mt.tr+"/"+tc.name, func(t *testing.T) {
				sfx := mt.mode.String() + mt.tr + tc.name
				pf := deltaFeat
				if tc.pCompact {
					pf = withCompact
				}
				prov := mustDialRaw(t, d, mt.tr, negotiate.ClientConfig{AgentID: "cp-" + sfx, Security: mt.mode, Models: []string{"gpt-4o"}, Features: pf})
				if prov.sess.Params.Has(negotiate.FeatureCompact) != tc.pCompact {
					t.Fatalf("provider negotiated %v", prov.sess.Params.Features)
				}
				ro := client.Options{AgentID: "cr-" + sfx, Security: mt.mode, TLSConfig: d.clientTLS(t)}
				if !tc.reqCompact {
					ro.DisableFeatures = []negotiate.Feature{negotiate.FeatureCompact}
				}
				req := dialClient(t, d.url(mt.tr), ro)
				for k := range 3 {
					var base *delta.Base
					if k > 0 {
						base = delta.NewBase(c.Turns[k-1], c.Responses[k-1])
					}
					done := make(chan struct{})
					go func() {
						defer close(done)
						r := prov.recvData(5 * time.Second)
						wantFirst := byte('#')
						if tc.pCompact {
							wantFirst = frame.CompactMarker
						}
						if r.first != wantFirst {
							t.Errorf("turn %d reached the provider as %q, want %q", k+1, r.first, wantFirst)
						}
						var h frame.Header
						if err := frame.ReadHeader(r.frame, &h); err != nil || h.Ext.Delta != (k > 0) {
							t.Errorf("turn %d: block %+v, %v", k+1, h.Ext, err)
							return
						}
						q, dict, err := r.replyDict(&h, base)
						if err != nil || string(q) != string(c.Turns[k]) {
							t.Errorf("turn %d rebuilt to another document (%v)", k+1, err)
							return
						}
						// The provider's Sealer writes the reply delta compactly
						// when its session has the feature.
						fr, _, err := delta.AppendEncodeReply(nil, c.Responses[k], dict, frame.Limits{})
						if err != nil {
							t.Errorf("reply delta: %v", err)
						}
						prov.replyFrame(r.ch, r.hdr.RequestID, negotiate.FlagReply|negotiate.FlagEnd, fr)
					}()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					resp, err := req.Do(ctx, c.Turns[k])
					cancel()
					<-done
					if err != nil || string(resp.Body) != string(c.Responses[k]) {
						t.Fatalf("turn %d: %v", k+1, err)
					}
				}
				if st := req.Stats(); st.DeltasSent != 2 || st.ReplyDeltasReceived < 2 {
					t.Fatalf("stats %+v", st)
				}
			})
		}
	}
}

// A compact frame from a session that did not negotiate compact is refused
// with bad_frame before verification: no sequence number is taken, so the
// same request sent next as an M2M v1 frame goes through.
func TestCompactFrameWithoutFeature(t *testing.T) {
	d := startDaemon(t, nil)
	c := loadConversations(t)[0]
	for _, mt := range modesTransports() {
		t.Run(mt.mode.String()+"/"+mt.tr, func(t *testing.T) {
			sfx := mt.mode.String() + mt.tr
			prov := mustDialRaw(t, d, mt.tr, negotiate.ClientConfig{AgentID: "cnp-" + sfx, Security: mt.mode, Models: []string{"gpt-4o"}, Features: deltaFeat})
			reqr := mustDialRaw(t, d, mt.tr, negotiate.ClientConfig{AgentID: "cnr-" + sfx, Security: mt.mode, Features: deltaFeat})
			fr, err := frame.AppendEncodeExt(nil, c.Turns[0], frame.Extension{DocID: 1}, frame.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			ch := reqr.channel()
			// Compact what this session's Sealer protects, as a compact
			// session would have.
			sealed := reqr.protect(ch, fr)
			comp, ok := frame.AppendCompact(nil, sealed, uint32(ch))
			if !ok {
				t.Fatal("a request with a block could not be written compactly")
			}
			// protect took number 1: the daemon, which refuses the compact
			// frame without taking it, expects 1 again.
			if err := reqr.send(ch, 0, 1, "", comp); err != nil {
				t.Fatal(err)
			}
			r := reqr.recvData(5 * time.Second)
			if r.code != string(negotiate.CodeBadFrame) {
				t.Fatalf("compact frame without the feature: code %q", r.code)
			}
			if err := reqr.send(ch, 0, 2, "", sealed); err != nil {
				t.Fatal(err)
			}
			got := prov.recvData(5 * time.Second)
			if got.first != '#' || string(got.body) != string(c.Turns[0]) {
				t.Fatalf("the M2M v1 frame after it: first byte %q, body %d bytes", got.first, len(got.body))
			}
		})
	}
}

// A compact frame that fits the sender's max_payload but whose rebuilt M2M
// v1 frame exceeds the receiver's (docs/protocol.md §4.5): the daemon
// checks the frame the receiver would get, and answers the sender too_large
// with the receiver as peer; one byte less goes through.
func TestCompactRebuiltOverReceiverLimit(t *testing.T) {
	const limit = 1024
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "small-prov-" + tr, Security: frame.SecurityHMAC, MaxPayload: limit, Models: []string{"gpt-4o"}, Features: deltaFeat})
			reqr := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "compact-req-" + tr, Security: frame.SecurityHMAC, Features: []negotiate.Feature{negotiate.FeatureDelta, negotiate.FeatureCompact}})
			if prov.sess.Params.MaxPayload != limit || !reqr.sess.Params.Has(negotiate.FeatureCompact) {
				t.Fatalf("max_payload %d, compact %v", prov.sess.Params.MaxPayload, reqr.sess.Params.Has(negotiate.FeatureCompact))
			}
			// Requests with a block, their JSON random letters: the largest
			// whose M2M v1 frame, with its 32-byte tag, fits limit, and the
			// next, over it while its compact form still fits.
			r := rand.New(rand.NewPCG(5, 6))
			letters := make([]byte, 2*limit)
			for i := range letters {
				letters[i] = byte('a' + r.IntN(26))
			}
			ext := frame.Extension{DocID: 1}
			var fits, over []byte
			for n := 100; over == nil; n++ {
				fr, err := frame.AppendEncodeExt(nil, fmt.Appendf(nil, `{"model":"gpt-4o","messages":[{"role":"user","content":"%s"}]}`, letters[:n]), ext, frame.Limits{})
				if err != nil {
					t.Fatal(err)
				}
				if len(fr)+32 <= limit {
					fits = fr
				} else {
					over = fr
				}
			}
			send := func(fr []byte) uint64 {
				ch := reqr.channel()
				id := reqr.newID()
				// The compact session's Sealer writes the compact form.
				comp := reqr.protect(ch, fr)
				if comp[0] != frame.CompactMarker || len(comp) > limit {
					t.Fatalf("sent %d bytes, first byte %q", len(comp), comp[0])
				}
				if err := reqr.send(ch, 0, id, "", comp); err != nil {
					t.Fatal(err)
				}
				return id
			}
			id := send(over)
			back := reqr.recvData(5 * time.Second)
			if back.hdr.RequestID != id || back.code != string(negotiate.CodeTooLarge) || back.peer != prov.sess.AgentID {
				t.Fatalf("rebuilt to %d bytes, over the receiver's max_payload: id %d code %q peer %q", len(over)+32, back.hdr.RequestID, back.code, back.peer)
			}
			if msg := errorMessage(t, back); !strings.Contains(msg, fmt.Sprintf("max_payload %d", limit)) {
				t.Errorf("message %q does not name the receiver's max_payload", msg)
			}
			send(fits)
			// Delivered as M2M v1 (the provider has no compact), verified.
			if got := prov.recvData(5 * time.Second); got.first != '#' || len(got.frame) != len(fits) {
				t.Fatalf("the %d-byte frame: first byte %q, %d bytes once verified", len(fits)+32, got.first, len(got.frame))
			}
		})
	}
}
