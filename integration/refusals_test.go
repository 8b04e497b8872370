package integration

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
	"github.com/m2md/m2md/transport"
)

var protectedModes = []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD}

// TestTamperedFrames: a protected frame with one byte flipped (fixed
// header, sequence, payload, tag) is refused with bad_tag, reaches nobody,
// and leaves the channel's counter where it was: the honest frame that
// follows with the same sequence number goes through.
func TestTamperedFrames(t *testing.T) {
	d := startDaemon(t, nil)
	body := corpus(t, "req-chat-1k-01.json")
	fr := encode(t, body)
	spots := []struct {
		name string
		at   func(n int) int // offset in the protected frame of length n
	}{
		{"prefix", func(int) int { return 2 }},
		{"flags", func(int) int { return frame.OffFlags }},
		{"sequence", func(int) int { return frame.OffSequence }},
		{"channel", func(int) int { return frame.OffChannel }},
		{"model", func(int) int { return frame.OffVarHeader + 3 }},
		{"payload", func(n int) int { return n / 2 }},
		{"tag", func(n int) int { return n - 1 }},
	}
	for _, mode := range protectedModes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				suffix := mode.String() + "-" + tr
				prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "tprov-" + suffix, Security: mode, Models: []string{"gpt-4o"}})
				for i, s := range spots {
					before := metric(t, d, "m2md_frames_refused_total", "reason=bad_tag")
					req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: fmt.Sprintf("treq-%s-%d", suffix, i), Security: mode})
					ch := req.channel()
					bad := req.protectAt(ch, fr, 1)
					bad[s.at(len(bad))] ^= 0x20
					req.mustSend(ch, 0, 7, "", bad)
					req.expectError(5*time.Second, 7, "bad_tag", false)
					waitMetric(t, d, before+1, "m2md_frames_refused_total", "reason=bad_tag")

					// The honest frame, sequence 1 on the same channel. Had
					// the tampered one been forwarded, it would reach the
					// provider first and its reply would answer request 7.
					req.mustSend(ch, 0, 8, "", req.protect(ch, fr))
					got := prov.recvData(5 * time.Second)
					if !bytes.Equal(got.body, body) {
						t.Fatalf("%s: honest frame after the tampered one: err %v", s.name, got.err)
					}
					prov.reply(got.ch, got.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
					if r := req.recvData(5 * time.Second); r.hdr.RequestID != 8 || r.code != "" {
						t.Fatalf("%s: reply id %d code %q", s.name, r.hdr.RequestID, r.code)
					}
				}
				prov.expectSilence(100 * time.Millisecond)
			})
		}
	}
}

// TestReplayedAndReorderedFrames: the same protected bytes sent twice are
// refused the second time (replay); a frame numbered 2 before 1 is refused
// (replay) and does not advance the counter, so 1 then 2 still work.
func TestReplayedAndReorderedFrames(t *testing.T) {
	d := startDaemon(t, nil)
	body := corpus(t, "req-chat-1k-01.json")
	fr := encode(t, body)
	resp := corpus(t, "resp-chat-06.json")
	for _, mode := range protectedModes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				suffix := mode.String() + "-" + tr
				prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "rprov-" + suffix, Security: mode, Models: []string{"gpt-4o"}})
				serve := func() {
					t.Helper()
					got := prov.recvData(5 * time.Second)
					if !bytes.Equal(got.body, body) {
						t.Fatalf("provider: err %v", got.err)
					}
					prov.reply(got.ch, got.hdr.RequestID, true, resp)
				}
				t.Run("replay", func(t *testing.T) {
					before := metric(t, d, "m2md_frames_refused_total", "reason=replay")
					req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "replay-" + suffix, Security: mode})
					ch := req.channel()
					once := req.protect(ch, fr)
					req.mustSend(ch, 0, 1, "", once)
					req.mustSend(ch, 0, 2, "", once)
					serve()
					prov.expectSilence(100 * time.Millisecond) // the copy went nowhere
					codes := map[uint64]string{}
					for range 2 {
						r := req.recvData(5 * time.Second)
						codes[r.hdr.RequestID] = r.code
					}
					if codes[1] != "" || codes[2] != "replay" {
						t.Fatalf("replies %v, want 1 answered and 2 refused as replay", codes)
					}
					waitMetric(t, d, before+1, "m2md_frames_refused_total", "reason=replay")
				})
				t.Run("reorder", func(t *testing.T) {
					before := metric(t, d, "m2md_frames_refused_total", "reason=replay")
					req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "reorder-" + suffix, Security: mode})
					ch := req.channel()
					req.mustSend(ch, 0, 1, "", req.protectAt(ch, fr, 2))
					req.expectError(5*time.Second, 1, "replay", false)
					prov.expectSilence(100 * time.Millisecond)
					for id := uint64(2); id <= 3; id++ { // sequence 1, then 2
						req.mustSend(ch, 0, id, "", req.protect(ch, fr))
						serve()
						if r := req.recvData(5 * time.Second); r.hdr.RequestID != id || r.code != "" {
							t.Fatalf("reply id %d code %q, want %d answered", r.hdr.RequestID, r.code, id)
						}
					}
					waitMetric(t, d, before+1, "m2md_frames_refused_total", "reason=replay")
				})
				t.Run("frame of another channel", func(t *testing.T) {
					if tr == "ws" {
						t.Skip("WebSocket has one channel")
					}
					req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "otherch-" + suffix, Security: mode})
					ch, other := req.channel(), req.channel()
					req.mustSend(other, 0, 1, "", req.protectAt(ch, fr, 1))
					req.expectError(5*time.Second, 1, "replay", false)
					prov.expectSilence(100 * time.Millisecond)
				})
			})
		}
	}
}

// TestWrongModeFrames: a frame in another security mode than the session's
// is refused with bad_tag and counted; the session carries on.
func TestWrongModeFrames(t *testing.T) {
	d := startDaemon(t, nil)
	body := corpus(t, "req-chat-1k-01.json")
	plain := encode(t, body)
	key := bytes.Repeat([]byte{0x42}, 32)
	protectWith := func(t *testing.T, mode frame.Security, k []byte, seq uint64, ch transport.ChannelID) []byte {
		fr := append([]byte(nil), plain...)
		if err := frame.SetSequence(fr, seq, uint32(ch)); err != nil {
			t.Fatal(err)
		}
		if mode == frame.SecurityNone {
			return fr
		}
		fk, err := security.NewFrameKey(mode, k)
		if err != nil {
			t.Fatal(err)
		}
		out, err := fk.Protect(nil, fr)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	tokenNative := []byte{0x00, 0x81, 0x02, 0x05} // cl100k, tokens 257 and 5
	cases := []struct {
		session frame.Security
		name    string
		frame   func(t *testing.T, a *rawAgent, ch transport.ChannelID) []byte
	}{
		{frame.SecurityHMAC, "plain frame", func(t *testing.T, a *rawAgent, ch transport.ChannelID) []byte {
			return protectWith(t, frame.SecurityNone, nil, 1, ch)
		}},
		{frame.SecurityHMAC, "aead frame with the session key", func(t *testing.T, a *rawAgent, ch transport.ChannelID) []byte {
			return protectWith(t, frame.SecurityAEAD, a.sess.SendKey(), 1, ch)
		}},
		{frame.SecurityHMAC, "TokenNative", func(*testing.T, *rawAgent, transport.ChannelID) []byte { return tokenNative }},
		{frame.SecurityAEAD, "plain frame", func(t *testing.T, a *rawAgent, ch transport.ChannelID) []byte {
			return protectWith(t, frame.SecurityNone, nil, 1, ch)
		}},
		{frame.SecurityAEAD, "hmac frame with the session key", func(t *testing.T, a *rawAgent, ch transport.ChannelID) []byte {
			return protectWith(t, frame.SecurityHMAC, a.sess.SendKey(), 1, ch)
		}},
		{frame.SecurityAEAD, "TokenNative", func(*testing.T, *rawAgent, transport.ChannelID) []byte { return tokenNative }},
		{frame.SecurityNone, "hmac frame", func(t *testing.T, a *rawAgent, ch transport.ChannelID) []byte {
			return protectWith(t, frame.SecurityHMAC, key, 1, ch)
		}},
		{frame.SecurityNone, "aead frame", func(t *testing.T, a *rawAgent, ch transport.ChannelID) []byte {
			return protectWith(t, frame.SecurityAEAD, key, 1, ch)
		}},
	}
	for _, tr := range transports {
		for i, c := range cases {
			t.Run(fmt.Sprintf("%s/%s-session/%s", tr, c.session, c.name), func(t *testing.T) {
				suffix := fmt.Sprintf("%s-%d", tr, i)
				prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "wprov-" + suffix, Security: c.session, Models: []string{"gpt-4o"}})
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "wreq-" + suffix, Security: c.session})
				before := metric(t, d, "m2md_frames_refused_total", "reason=bad_tag")
				ch := req.channel()
				req.mustSend(ch, 0, 1, prov.sess.AgentID, c.frame(t, req, ch))
				req.expectError(5*time.Second, 1, "bad_tag", false)
				waitMetric(t, d, before+1, "m2md_frames_refused_total", "reason=bad_tag")
				roundTrip(t, req, prov) // would meet the refused frame first had it been forwarded
			})
		}
	}
}

// TestRefusedReplies: a provider's tampered or replayed reply is refused
// with a NOTICE (flags REPLY|END|NOTICE, the delivery id), and the
// requester's request ends at once with the same error, after the chunks
// that did get through: nobody waits for an END that cannot come, and the
// request id is free again (security review finding 4).
func TestRefusedReplies(t *testing.T) {
	d := startDaemon(t, nil)
	resp := corpus(t, "resp-chat-06.json")
	for _, mode := range protectedModes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				suffix := mode.String() + "-" + tr
				prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "rrprov-" + suffix, Security: mode, Models: []string{"gpt-4o"}})
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "rrreq-" + suffix, Security: mode})
				reqBody := corpus(t, "req-chat-1k-01.json")
				_, id := req.request("", reqBody)
				dl := prov.recvData(5 * time.Second)
				did := dl.hdr.RequestID

				// Three chunks reach the requester.
				for i := range 3 {
					prov.reply(dl.ch, did, false, chunk("x", i))
					if r := req.recvData(5 * time.Second); r.hdr.RequestID != id || r.hdr.IsEnd() || !bytes.Equal(r.body, chunk("x", i)) {
						t.Fatalf("chunk %d: id %d flags %v code %q", i, r.hdr.RequestID, r.hdr.Flags, r.code)
					}
				}
				// A tampered fourth chunk: NOTICE to the provider, and the
				// requester's request ends with bad_tag.
				bad := prov.protectAt(dl.ch, encode(t, chunk("x", 3)), 4)
				bad[len(bad)/2] ^= 1
				prov.mustSend(dl.ch, negotiate.FlagReply, did, "", bad)
				prov.expectError(5*time.Second, did, "bad_tag", true)
				end := req.expectError(5*time.Second, id, "bad_tag", false)
				if end.peer != prov.sess.AgentID {
					t.Fatalf("requester's error names peer %q", end.peer)
				}
				// The delivery is over: a late reply to it reaches nobody,
				// and the request id can be used again at once.
				prov.reply(dl.ch, did, true, resp)
				req.expectSilence(100 * time.Millisecond)
				ch := req.channel()
				req.mustSend(ch, 0, id, "", req.protect(ch, encode(t, reqBody)))
				dl2 := prov.recvData(5 * time.Second)
				if dl2.hdr.IsReply() {
					t.Fatalf("the re-sent request id did not reach the provider: flags %v code %q", dl2.hdr.Flags, dl2.code)
				}

				// A replayed final reply (sequence 1 again on the new
				// channel's second frame) ends the request the same way.
				prov.reply(dl2.ch, dl2.hdr.RequestID, false, chunk("y", 0))
				if r := req.recvData(5 * time.Second); r.hdr.RequestID != id || r.hdr.IsEnd() {
					t.Fatalf("chunk: id %d flags %v code %q", r.hdr.RequestID, r.hdr.Flags, r.code)
				}
				fin := prov.protectAt(dl2.ch, encode(t, resp), 1)
				prov.mustSend(dl2.ch, negotiate.FlagReply|negotiate.FlagEnd, dl2.hdr.RequestID, "", fin)
				prov.expectError(5*time.Second, dl2.hdr.RequestID, "replay", true)
				req.expectError(5*time.Second, id, "replay", false)
				roundTrip(t, req, prov)
			})
		}
	}
}

// corruptPayload returns a copy of fr whose payload bytes are garbage while
// its header still reads: the daemon routes by header and must deliver it.
func corruptPayload(t *testing.T, fr []byte, fixCRC bool) []byte {
	t.Helper()
	out := append([]byte(nil), fr...)
	var h frame.Header
	if err := frame.ReadHeader(out, &h); err != nil {
		t.Fatal(err)
	}
	lenAt := frame.PrefixLen + h.HeaderLen
	payload := out[lenAt+8:]
	for i := range payload {
		if i%3 == 0 {
			payload[i] ^= 0xa5
		}
	}
	if fixCRC {
		binary.LittleEndian.PutUint32(out[lenAt+4:], crc32.ChecksumIEEE(payload))
	}
	if err := frame.ReadHeader(out, &h); err != nil {
		t.Fatalf("corrupted frame's header no longer reads: %v", err)
	}
	if _, err := frame.AppendDecode(nil, out, frame.Limits{}); err == nil {
		t.Fatal("corrupted frame still decodes")
	}
	return out
}

// TestUndecodablePayloadIsRouted: the daemon reads headers only, so a frame
// with a valid header and a garbage payload (a broken Brotli stream, or
// uncompressed non-JSON with a matching CRC) reaches the provider byte for
// byte, request and reply alike; judging it is the receiver's business.
func TestUndecodablePayloadIsRouted(t *testing.T) {
	d := startDaemon(t, nil)
	variants := []struct {
		name   string
		req    []byte
		resp   []byte
		fixCRC bool
	}{
		{"compressed", corpus(t, "req-chat-1k-01.json"), corpus(t, "resp-chat-06.json"), false},
		{"uncompressed with CRC", corpus(t, "req-chat-tiny-08.json"), []byte(`{"id":"chatcmpl-9","object":"chat.completion","model":"gpt-4o","choices":[]}`), true},
	}
	for _, mode := range modes {
		for _, tr := range transports {
			for _, v := range variants {
				t.Run(fmt.Sprintf("%s/%s/%s", mode, tr, v.name), func(t *testing.T) {
					suffix := fmt.Sprintf("%s-%s-%t", mode, tr, v.fixCRC)
					prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "uprov-" + suffix, Security: mode, Models: []string{"gpt-4o", "gpt-4o-mini"}})
					req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "ureq-" + suffix, Security: mode})

					badReq := corruptPayload(t, encode(t, v.req), v.fixCRC)
					ch := req.channel()
					req.mustSend(ch, 0, 1, "", req.protect(ch, badReq))
					got := prov.recvData(5 * time.Second)
					if got.err == nil || got.peer != req.sess.AgentID {
						t.Fatalf("provider decoded it (err %v) or peer %q", got.err, got.peer)
					}
					checkSameFrame(t, got, badReq)

					badResp := corruptPayload(t, encode(t, v.resp), v.fixCRC)
					prov.mustSend(got.ch, negotiate.FlagReply|negotiate.FlagEnd, got.hdr.RequestID, "", prov.protect(got.ch, badResp))
					back := req.recvData(5 * time.Second)
					if back.hdr.RequestID != 1 || !back.hdr.IsEnd() || back.err == nil || back.code != "" {
						t.Fatalf("requester got id %d flags %v err %v code %q", back.hdr.RequestID, back.hdr.Flags, back.err, back.code)
					}
					checkSameFrame(t, back, badResp)
				})
			}
		}
	}
}

// checkSameFrame compares a received plain frame with what was sent: equal
// byte for byte except the sequence and channel the daemon restamps.
func checkSameFrame(t *testing.T, got *received, sent []byte) {
	t.Helper()
	seq, ch, err := frame.Sequence(got.frame)
	if err != nil {
		t.Fatal(err)
	}
	if seq == 0 || ch != uint32(got.ch) {
		t.Fatalf("restamped sequence %d channel %d (arrived on %d)", seq, ch, got.ch)
	}
	want := append([]byte(nil), sent...)
	if err := frame.SetSequence(want, seq, ch); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.frame, want) {
		t.Fatalf("frame changed in transit: %d bytes, sent %d", len(got.frame), len(want))
	}
}
