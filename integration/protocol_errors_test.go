package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// bigRequest is a gpt-4o chat request whose binary frame is frameLen bytes
// or a little more: incompressible content, so the size is predictable.
func bigRequest(t testing.TB, frameLen int) (body, fr []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(frameLen), 7))
	n := frameLen
	for range 20 {
		raw := make([]byte, n*3/4)
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		body = fmt.Appendf(nil, `{"model":"gpt-4o","messages":[{"role":"user","content":"%s"}]}`, base64.StdEncoding.EncodeToString(raw))
		fr = encode(t, body)
		switch {
		case len(fr) < frameLen:
			n += frameLen - len(fr) + 8
		case len(fr) > frameLen+256:
			n -= (len(fr) - frameLen) / 2
		default:
			return body, fr
		}
	}
	t.Fatalf("no request of frame size ≈ %d", frameLen)
	return nil, nil
}

// TestProtocolErrorsCloseSession: a message an established session must not
// carry (unknown kind, malformed DATA header, DATA on the control stream,
// control on a data stream, a control message of another session, a second
// HELLO, broken JSON) gets CLOSE ERROR and the session ends; a concurrent
// session is not disturbed.
func TestProtocolErrorsCloseSession(t *testing.T) {
	d := startDaemon(t, nil)
	fr := encode(t, corpus(t, "req-chat-tiny-07.json"))
	data := func(hdr ...byte) func(*rawAgent) []byte {
		return func(*rawAgent) []byte { return append(append([]byte(nil), hdr...), fr...) }
	}
	type tc struct {
		name   string
		onData bool // send on a data channel (QUIC) instead of the control stream
		msg    func(a *rawAgent) []byte
		quic   bool // QUIC only (channels)
	}
	cases := []tc{
		{name: "unknown kind", msg: func(*rawAgent) []byte { return []byte{0x07, 0x01} }},
		{name: "unknown kind on a data channel", onData: true, msg: func(*rawAgent) []byte { return []byte{0x00} }},
		{name: "DATA unknown flag bit", onData: true, msg: data(0x02, 0x08, 0x01, 0x00)},
		{name: "DATA END without REPLY", onData: true, msg: data(0x02, 0x02, 0x01, 0x00)},
		{name: "DATA NOTICE without END", onData: true, msg: data(0x02, 0x05, 0x01, 0x00)},
		{name: "DATA request id 0", onData: true, msg: data(0x02, 0x00, 0x00, 0x00)},
		{name: "DATA request id not minimal", onData: true, msg: data(0x02, 0x00, 0x81, 0x00, 0x00)},
		{name: "DATA request id 11 bytes", onData: true, msg: data(0x02, 0x00, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00)},
		{name: "DATA peer not an agent id", onData: true, msg: data(0x02, 0x00, 0x01, 0x03, 'a', ' ', 'b')},
		{name: "DATA peer longer than 128", onData: true, msg: func(*rawAgent) []byte {
			return append(append([]byte{0x02, 0x00, 0x01, 129}, bytes.Repeat([]byte{'a'}, 129)...), fr...)
		}},
		{name: "DATA without frame", onData: true, msg: func(*rawAgent) []byte { return []byte{0x02, 0x00, 0x01, 0x00} }},
		{name: "DATA truncated header", onData: true, msg: func(*rawAgent) []byte { return []byte{0x02, 0x00} }},
		{name: "DATA on the control stream", quic: true, msg: func(a *rawAgent) []byte {
			m, _ := negotiate.AppendData(nil, 0, 1, "", a.protect(transport.ControlChannel, fr))
			return m
		}},
		{name: "PING on a data stream", quic: true, onData: true, msg: func(a *rawAgent) []byte {
			return negotiate.AppendPing(nil, a.sess.ID, time.Now())
		}},
		{name: "PING of another session", msg: func(a *rawAgent) []byte {
			return negotiate.AppendPing(nil, "sess_AAAAAAAAAAAAAAAAAAAA", time.Now())
		}},
		{name: "PING without session id", msg: func(a *rawAgent) []byte {
			return []byte("\x01" + `{"type":"PING","payload":{},"timestamp":1}`)
		}},
		{name: "second HELLO", msg: func(a *rawAgent) []byte {
			return helloBytes(a.t, negotiate.ClientConfig{AgentID: a.sess.AgentID}, time.Now())
		}},
		{name: "ACCEPT from the agent", msg: func(a *rawAgent) []byte {
			return []byte("\x01" + `{"type":"ACCEPT","session_id":"` + a.sess.ID + `","payload":{},"timestamp":1}`)
		}},
		{name: "broken JSON", msg: func(a *rawAgent) []byte {
			return []byte("\x01" + `{"type":"PING","session_id":"` + a.sess.ID + `","timestamp":1`)
		}},
		{name: "control message over 64 KiB", msg: func(a *rawAgent) []byte {
			return []byte("\x01" + `{"type":"PING","session_id":"` + a.sess.ID + `","timestamp":1,"pad":"` + string(bytes.Repeat([]byte{'x'}, 70000)) + `"}`)
		}},
	}
	for _, tr := range transports {
		// The bystanders: a pair that keeps working throughout. The
		// provider serves no model the breakers use, so a message the
		// daemon wrongly routed could not land there and hide.
		byProv := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "bystander-prov-" + tr, Models: []string{"bystander-model"}})
		byReq := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "bystander-req-" + tr})
		for i, c := range cases {
			if c.quic && tr != "quic" {
				continue
			}
			t.Run(tr+"/"+c.name, func(t *testing.T) {
				before := metric(t, d, "m2md_sessions_closed_total", "reason=error")
				a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: fmt.Sprintf("breaker-%s-%d", tr, i)})
				ch := transport.ControlChannel
				if c.onData {
					ch = a.channel()
				}
				msg := c.msg(a)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := a.conn.Send(ctx, ch, msg)
				cancel()
				// An oversized message is refused from its length prefix
				// (QUIC) or frame headers (WebSocket). On QUIC the daemon
				// stops the stream, maybe while it is still being written.
				_, refused := errors.AsType[*transport.ChannelError](err)
				oversized := len(msg) > transport.DefaultReadLimit
				stopped := tr == "quic" && oversized
				switch {
				case err == nil && !oversized:
					a.expectClose(5*time.Second, negotiate.ReasonError)
				case err == nil || refused && stopped:
					// The daemon closes right after its CLOSE, without
					// waiting for an acknowledgement (docs/protocol.md §1;
					// on QUIC the agent's control stream is stopped and
					// could not carry one): on WebSocket an acknowledgement
					// raced the daemon's close.
					if cm := a.expectControl(5*time.Second, negotiate.TypeClose); cm.Close == nil || cm.Close.Reason != negotiate.ReasonError {
						t.Fatalf("CLOSE %+v, want reason ERROR", cm.Close)
					}
					expectConnClosed(t, a.conn, 10*time.Second)
				default:
					t.Fatalf("send: %v", err)
				}
				waitMetric(t, d, before+1, "m2md_sessions_closed_total", "reason=error")
				byProv.t, byReq.t = t, t
				roundTrip(t, byReq, byProv)
			})
		}
	}
}

// TestOversizedMessage: a message longer than the negotiated max_payload +
// 512 ends the session (the transport refuses to buffer it) and is counted
// as too_large; a concurrent session is not disturbed.
func TestOversizedMessage(t *testing.T) {
	d := startDaemon(t, nil)
	_, big := bigRequest(t, 4096)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			byProv := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "osz-prov-" + tr, Models: []string{"gpt-4o"}})
			byReq := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "osz-req-" + tr})
			before := metric(t, d, "m2md_frames_refused_total", "reason=too_large")
			a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "oversized-" + tr, MaxPayload: 1024})
			if a.sess.Params.MaxPayload != 1024 {
				t.Fatalf("negotiated max_payload %d", a.sess.Params.MaxPayload)
			}
			ch := a.channel()
			a.mustSend(ch, 0, 1, "", a.protect(ch, big))
			// The session ends with CLOSE ERROR (acknowledged here), and
			// nothing is routed.
			closed := false
			for {
				r, cm, err := a.recv(10 * time.Second)
				if err == nil {
					t.Fatalf("got DATA flags %v code %q", r.hdr.Flags, r.code)
				}
				if cm != nil {
					if cm.Type != negotiate.TypeClose || cm.Close.Reason != negotiate.ReasonError {
						t.Fatalf("got %s %+v", cm.Type, cm.Close)
					}
					a.ackSizeClose()
					closed = true
					continue
				}
				if errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("connection still open 10 s after the oversized message (CLOSE received: %v)", closed)
				}
				break
			}
			if !closed {
				t.Fatal("session ended without CLOSE ERROR")
			}
			byProv.expectSilence(50 * time.Millisecond)
			waitMetric(t, d, before+1, "m2md_frames_refused_total", "reason=too_large")
			roundTrip(t, byReq, byProv)
		})
	}
}

// TestFrameOverMaxPayload: max_payload bounds the frame in both directions
// (docs/protocol.md §3.2 step 4). A frame above the sender's limit but
// within the transport's slack, or above the receiver's limit, is refused
// with too_large; no session is hurt, the receiver least of all.
func TestFrameOverMaxPayload(t *testing.T) {
	d := startDaemon(t, nil)
	body1300, fr1300 := bigRequest(t, 1300)
	body4k, _ := bigRequest(t, 4096)
	for _, mode := range modes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				suffix := mode.String() + "-" + tr
				small := negotiate.ClientConfig{Security: mode, MaxPayload: 1024}
				t.Run("sender's limit", func(t *testing.T) {
					before := metric(t, d, "m2md_frames_refused_total", "reason=too_large")
					prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "mp1-prov-" + suffix, Security: mode, Models: []string{"gpt-4o"}})
					cc := small
					cc.AgentID = "mp1-req-" + suffix
					req := mustDialRaw(t, d, tr, cc)
					ch := req.channel()
					req.mustSend(ch, 0, 1, "", req.protect(ch, fr1300))
					req.expectError(5*time.Second, 1, "too_large", false)
					waitMetric(t, d, before+1, "m2md_frames_refused_total", "reason=too_large")
					roundTrip(t, req, prov)
				})
				t.Run("receiver's limit, request", func(t *testing.T) {
					cc := small
					cc.AgentID, cc.Models = "mp2-prov-"+suffix, []string{"gpt-4o"}
					prov := mustDialRaw(t, d, tr, cc)
					req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "mp2-req-" + suffix, Security: mode})
					_, id := req.request("", body4k)
					req.expectError(5*time.Second, id, "too_large", false)
					_, id = req.request("", body1300)
					req.expectError(5*time.Second, id, "too_large", false)
					roundTrip(t, req, prov) // the provider's session is intact, and got nothing before
				})
				t.Run("receiver's limit, reply", func(t *testing.T) {
					prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "mp3-prov-" + suffix, Security: mode, Models: []string{"gpt-4o"}})
					cc := small
					cc.AgentID = "mp3-req-" + suffix
					req := mustDialRaw(t, d, tr, cc)
					_, id := req.request("", corpus(t, "req-chat-1k-01.json"))
					dl := prov.recvData(5 * time.Second)
					// A chunk too large for the requester: the provider is told
					// (NOTICE), the requester's request ends with too_large.
					prov.reply(dl.ch, dl.hdr.RequestID, false, body4k)
					prov.expectError(5*time.Second, dl.hdr.RequestID, "too_large", true)
					req.expectError(5*time.Second, id, "too_large", false)
					// Later chunks of that delivery go nowhere.
					prov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
					roundTrip(t, req, prov) // meets nothing of that delivery first
				})
			})
		}
	}
}
