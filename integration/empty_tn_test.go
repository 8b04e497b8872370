package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/tokennative"
	"github.com/m2md/m2md/transport"
)

// TestEmptyTokenNativeRefused (protocol.md §4): a TokenNative frame that is
// only its tokenizer byte decodes to the empty text, which is no request or
// reply body. The daemon refuses it with bad_frame as a request and as a
// reply (the provider gets the notice, the requester the error), plain in
// mode none and sealed in hmac and aead, and never delivers it.
func TestEmptyTokenNativeRefused(t *testing.T) {
	d := startDaemon(t, nil)
	tn, err := tokennative.New(tokennative.Config{}).AppendBinary(nil, tokennative.Cl100k, corpus(t, "req-chat-1k-02.json"))
	if err != nil {
		t.Fatal(err)
	}
	empty := []byte{byte(tokennative.Cl100k)}
	algos := []negotiate.Algorithm{negotiate.AlgorithmM2M, negotiate.AlgorithmTokenNative}
	for _, mode := range modes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				cc := func(id string) negotiate.ClientConfig {
					return negotiate.ClientConfig{AgentID: id + mode.String() + "-" + tr, Security: mode, Algorithms: algos, Features: []negotiate.Feature{negotiate.FeatureTNSealed}}
				}
				prov := mustDialRaw(t, d, tr, cc("etp-"))
				req := mustDialRaw(t, d, tr, cc("etr-"))
				send := func(a *rawAgent, ch transport.ChannelID, flags negotiate.DataFlags, id uint64, peer string, fr []byte) {
					if mode == modes[0] {
						a.mustSend(ch, flags, id, peer, fr)
						return
					}
					a.sendRaw(ch, a.sealTN(ch, flags, id, peer, fr))
				}

				ch := req.channel()
				send(req, ch, 0, 1, prov.sess.AgentID, empty)
				if r := req.expectError(5*time.Second, 1, "bad_frame", false); !strings.Contains(errorMessage(t, r), "no tokens") {
					t.Fatalf("message %q does not say the frame has no tokens", errorMessage(t, r))
				}
				prov.expectSilence(50 * time.Millisecond)

				// A well-formed request on the same channel still goes
				// through; its empty reply is refused both ways.
				send(req, ch, 0, 2, prov.sess.AgentID, tn)
				dl := prov.recvData(5 * time.Second)
				if mode != modes[0] {
					prov.openTN(dl) // takes the delivery's sequence number
				}
				send(prov, dl.ch, negotiate.FlagReply|negotiate.FlagEnd, dl.hdr.RequestID, "", empty)
				prov.expectError(5*time.Second, dl.hdr.RequestID, "bad_frame", true)
				req.expectError(5*time.Second, 2, "bad_frame", false)
			})
		}
	}
}
