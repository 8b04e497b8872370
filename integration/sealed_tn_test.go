package integration

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/tokennative"
	"github.com/m2md/m2md/transport"
)

// sealTN builds a DATA message carrying the TokenNative frame tn sealed for
// channel ch (docs/protocol.md §4.3), the DATA header as associated data.
func (a *rawAgent) sealTN(ch transport.ChannelID, flags negotiate.DataFlags, id uint64, peer string, tn []byte) []byte {
	a.t.Helper()
	hdr, err := negotiate.AppendDataHeader(nil, flags, id, peer)
	if err != nil {
		a.t.Fatal(err)
	}
	msg, err := a.sealer.SealTokenNative(bytes.Clone(hdr), uint32(ch), hdr, tn)
	if err != nil {
		a.t.Fatal(err)
	}
	return msg
}

// openTN opens a received sealed TokenNative DATA message.
func (a *rawAgent) openTN(r *received) []byte {
	a.t.Helper()
	hdr, err := negotiate.AppendDataHeader(nil, r.hdr.Flags, r.hdr.RequestID, r.peer)
	if err != nil {
		a.t.Fatal(err)
	}
	if !negotiate.IsSealedTN(r.frame) {
		a.t.Fatalf("frame %x… is not a sealed TokenNative envelope", r.frame[:min(16, len(r.frame))])
	}
	tn, err := a.opener.OpenTokenNative(uint32(r.ch), hdr, bytes.Clone(r.frame))
	if err != nil {
		a.t.Fatalf("open sealed TokenNative: %v", err)
	}
	return tn
}

// TestSealedTokenNative: with tn_sealed, TokenNative frames travel in hmac
// and aead sessions inside the sealed envelope, both ways, through the real
// daemon, which opens each with the sender's key and seals it again with the
// receiver's (security review item 13). A plain TokenNative frame, an
// envelope whose DATA header was changed, a replayed envelope, and a
// receiver without tn_sealed are refused.
func TestSealedTokenNative(t *testing.T) {
	d := startDaemon(t, nil)
	tok := tokennative.New(tokennative.Config{})
	body := corpus(t, "req-chat-1k-02.json")
	resp := corpus(t, "resp-chat-03.json")
	encode := func(b []byte) []byte {
		tn, err := tok.AppendBinary(nil, tokennative.Cl100k, b)
		if err != nil {
			t.Fatal(err)
		}
		return tn
	}
	decode := func(tn []byte) []byte {
		b, _, err := tok.DecodeBinary(nil, tn)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	algos := []negotiate.Algorithm{negotiate.AlgorithmM2M, negotiate.AlgorithmTokenNative}
	for _, mode := range protectedModes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				suffix := mode.String() + "-" + tr
				cc := func(id string, feats ...negotiate.Feature) negotiate.ClientConfig {
					return negotiate.ClientConfig{AgentID: id + suffix, Security: mode, Algorithms: algos, Features: feats}
				}
				prov := mustDialRaw(t, d, tr, cc("tnp-", negotiate.FeatureTNSealed))
				req := mustDialRaw(t, d, tr, cc("tnr-", negotiate.FeatureTNSealed))
				for _, a := range []*rawAgent{prov, req} {
					if p := a.sess.Params; !p.Has(negotiate.FeatureTNSealed) || !slices.Contains(p.Algorithms, negotiate.AlgorithmTokenNative) {
						t.Fatalf("negotiated %v / %v", p.Features, p.Algorithms)
					}
				}
				// A request and its final reply, both sealed TokenNative.
				ch := req.channel()
				req.sendRaw(ch, req.sealTN(ch, 0, 1, prov.sess.AgentID, encode(body)))
				dl := prov.recvData(5 * time.Second)
				if got := decode(prov.openTN(dl)); !bytes.Equal(got, body) || dl.peer != req.sess.AgentID {
					t.Fatalf("provider got %d bytes from %q", len(got), dl.peer)
				}
				prov.sendRaw(dl.ch, prov.sealTN(dl.ch, negotiate.FlagReply|negotiate.FlagEnd, dl.hdr.RequestID, "", encode(resp)))
				back := req.recvData(5 * time.Second)
				if !back.hdr.IsEnd() || back.hdr.RequestID != 1 || !bytes.Equal(decode(req.openTN(back)), resp) {
					t.Fatalf("requester got flags %v id %d code %q", back.hdr.Flags, back.hdr.RequestID, back.code)
				}

				// Refusals, each answered to the requester with an error.
				ch = req.channel()
				req.mustSend(ch, 0, 2, prov.sess.AgentID, encode(body)) // plain TokenNative
				req.expectError(5*time.Second, 2, "bad_tag", false)
				msg := req.sealTN(ch, 0, 3, prov.sess.AgentID, encode(body))
				moved := bytes.Clone(msg)
				moved[2] = 4 // request id 3 → 4: the header is associated data
				req.sendRaw(ch, moved)
				req.expectError(5*time.Second, 4, "bad_tag", false)
				req.sendRaw(ch, msg) // the untouched envelope, with the sequence still expected
				dl = prov.recvData(5 * time.Second)
				prov.sendRaw(dl.ch, prov.sealTN(dl.ch, negotiate.FlagReply|negotiate.FlagEnd, dl.hdr.RequestID, "", encode(resp)))
				if r := req.recvData(5 * time.Second); r.hdr.RequestID != 3 || !bytes.Equal(decode(req.openTN(r)), resp) {
					t.Fatalf("reply to 3: id %d code %q", r.hdr.RequestID, r.code)
				}
				req.sendRaw(ch, msg) // replayed
				req.expectError(5*time.Second, 3, "replay", false)

				// A protected receiver without tn_sealed cannot take one.
				old := mustDialRaw(t, d, tr, cc("tno-"))
				if p := old.sess.Params; p.Has(negotiate.FeatureTNSealed) || slices.Contains(p.Algorithms, negotiate.AlgorithmTokenNative) {
					t.Fatalf("without tn_sealed: %v / %v", p.Features, p.Algorithms)
				}
				ch = req.channel()
				req.sendRaw(ch, req.sealTN(ch, 0, 5, old.sess.AgentID, encode(body)))
				req.expectError(5*time.Second, 5, "bad_frame", false)
				old.expectSilence(100 * time.Millisecond)
			})
		}
	}
}
