package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/tokennative"
)

// TestUnknownFrameFormRefused (protocol.md §4): a DATA frame is an M2M v1
// frame (first byte 23), a TokenNative frame (its tokenizer byte 00-02) or,
// in a protected session with tn_sealed, a sealed envelope (54, §4.2).
// Whatever else it begins with, the daemon refuses it with bad_frame, as a
// request and as a reply, in every mode, without taking a sequence number
// and without delivering it (nor routing it as TokenNative). An
// envelope in mode none, and an authentic envelope whose content begins with
// no tokenizer byte (which has taken its number), are refused alike.
func TestUnknownFrameFormRefused(t *testing.T) {
	d := startDaemon(t, nil)
	tn, err := tokennative.New(tokennative.Config{}).AppendBinary(nil, tokennative.Cl100k, corpus(t, "req-chat-tiny-07.json"))
	if err != nil {
		t.Fatal(err)
	}
	unknown := append([]byte{0x99}, tn[1:]...) // a TokenNative frame but for its tokenizer byte
	algos := []negotiate.Algorithm{negotiate.AlgorithmM2M, negotiate.AlgorithmTokenNative}
	for _, mode := range modes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				cc := func(id string) negotiate.ClientConfig {
					return negotiate.ClientConfig{AgentID: id + mode.String() + "-" + tr, Security: mode, Algorithms: algos, Features: []negotiate.Feature{negotiate.FeatureTNSealed}}
				}
				prov := mustDialRaw(t, d, tr, cc("ufp-"))
				req := mustDialRaw(t, d, tr, cc("ufr-"))
				expectUnknown := func(a *rawAgent, id uint64, notice bool, what string) {
					t.Helper()
					if m := errorMessage(t, a.expectError(5*time.Second, id, "bad_frame", notice)); !strings.Contains(m, what) {
						t.Fatalf("message %q does not say %q", m, what)
					}
				}

				// A request on a channel, then a well-formed one on the
				// same channel: the refused frame took no number.
				ch := req.channel()
				req.mustSend(ch, 0, 1, prov.sess.AgentID, unknown)
				expectUnknown(req, 1, false, "begins with byte 0x99")
				req.mustSend(ch, 0, 2, prov.sess.AgentID, []byte("\x03hello"))
				expectUnknown(req, 2, false, "byte 0x03")
				prov.expectSilence(50 * time.Millisecond)
				req.mustSend(ch, 0, 3, prov.sess.AgentID, req.protect(ch, encode(t, corpus(t, "req-chat-tiny-07.json"))))
				dl := prov.recvData(5 * time.Second)
				if dl.hdr.IsReply() || dl.body == nil {
					t.Fatalf("well-formed request after the refusals: flags %v err %v", dl.hdr.Flags, dl.err)
				}

				// A reply of no known form: the provider gets the
				// notice, the requester the error, nothing else.
				prov.mustSend(dl.ch, negotiate.FlagReply|negotiate.FlagEnd, dl.hdr.RequestID, "", unknown)
				expectUnknown(prov, dl.hdr.RequestID, true, "begins with byte 0x99")
				expectUnknown(req, 3, false, "begins with byte 0x99")

				if mode == frame.SecurityNone {
					// No envelopes in mode none: TokenNative travels as it is.
					req.mustSend(ch, 0, 4, prov.sess.AgentID, append([]byte{negotiate.SealedTNMarker, 1}, make([]byte, 60)...))
					expectUnknown(req, 4, false, "mode none")
				} else {
					// An authentic envelope sealing no TokenNative frame
					// takes its number: the next envelope is in step.
					req.sendRaw(ch, req.sealTN(ch, 0, 4, prov.sess.AgentID, unknown))
					expectUnknown(req, 4, false, "not a tokenizer byte")
					req.sendRaw(ch, req.sealTN(ch, 0, 5, prov.sess.AgentID, tn))
					dl := prov.recvData(5 * time.Second)
					if got := prov.openTN(dl); string(got) != string(tn) {
						t.Fatalf("sealed TokenNative after the refusal: %x", got)
					}
				}
				prov.expectSilence(50 * time.Millisecond)
				roundTrip(t, req, prov)
			})
		}
	}
}
