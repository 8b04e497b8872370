package integration

import (
	"context"
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
