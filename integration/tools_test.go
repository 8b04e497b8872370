package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// Helpers shared by the end-to-end tests, beside the harness: bare
// connections for hand-made handshakes, control messages, the admin
// endpoints, and frames protected with a chosen sequence number.

// dialTransport opens a transport connection to d over tr with tc, within
// 10 s.
func dialTransport(t testing.TB, d *testDaemon, tr string, tc transport.Config) (transport.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if tr == "quic" {
		return transport.DialQUIC(ctx, d.QUICAddr().String(), d.clientTLS(t), tc)
	}
	return transport.DialWS(ctx, d.url("ws"), nil, tc)
}

// dialConn opens a transport connection to d without any handshake.
func dialConn(t testing.TB, d *testDaemon, tr string) transport.Conn {
	t.Helper()
	conn, err := dialTransport(t, d, tr, transport.Config{})
	if err != nil {
		t.Fatalf("dial %s: %v", tr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// dialQuick tries to connect within timeout and returns the error.
func dialQuick(d *testDaemon, tr string, timeout time.Duration) (transport.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if tr == "quic" {
		tc, err := certs.ClientTLSConfig(certs.ClientOptions{PinSHA256: d.Fingerprint()})
		if err != nil {
			return nil, err
		}
		return transport.DialQUIC(ctx, d.QUICAddr().String(), tc, transport.Config{HandshakeTimeout: timeout})
	}
	return transport.DialWS(ctx, d.url("ws"), nil, transport.Config{HandshakeTimeout: timeout})
}

// exchange sends msg on the control channel and returns the daemon's
// parsed answer (ACCEPT or REJECT).
func exchange(t testing.TB, conn transport.Conn, msg []byte) *negotiate.ControlMessage {
	t.Helper()
	cm, err := negotiate.ParseControl(rawExchange(t, conn, msg))
	if err != nil {
		t.Fatalf("answer is not a control message: %v", err)
	}
	return cm
}

// rawExchange sends msg on the control channel and returns the daemon's
// answer as received.
func rawExchange(t testing.TB, conn transport.Conn, msg []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := conn.Send(ctx, transport.ControlChannel, msg); err != nil {
		t.Fatalf("send first message: %v", err)
	}
	reply, err := conn.Receive(ctx)
	if err != nil {
		t.Fatalf("no answer to the first message: %v", err)
	}
	defer reply.Release()
	return bytes.Clone(reply.Data)
}

// expectReject checks that cm is a REJECT with code and no session id, and
// that the daemon then closes the connection.
func expectReject(t testing.TB, conn transport.Conn, cm *negotiate.ControlMessage, code negotiate.RejectCode) {
	t.Helper()
	if cm.Type != negotiate.TypeReject || cm.Reject == nil {
		t.Fatalf("got %s, want REJECT %s", cm.Type, code)
	}
	if cm.Reject.Code != code {
		t.Fatalf("REJECT %s (%q), want %s", cm.Reject.Code, cm.Reject.Message, code)
	}
	if cm.SessionID != "" {
		t.Fatalf("REJECT of a HELLO carries session id %q", cm.SessionID)
	}
	expectConnClosed(t, conn, 5*time.Second)
}

// expectConnClosed waits for the connection to end (any Receive error but a
// timeout), failing on any message that arrives first.
func expectConnClosed(t testing.TB, conn transport.Conn, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msg, err := conn.Receive(ctx)
	if err == nil {
		kind, _ := negotiate.MessageKind(msg.Data)
		msg.Release()
		t.Fatalf("got a %s message, want the connection closed", kind)
	}
	if ctx.Err() != nil {
		t.Fatalf("connection still open after %v", timeout)
	}
	// Close our end too, as an agent does: the daemon's QUIC close waits
	// for it (up to the transport's linger) before the session is over.
	conn.Close()
}

// helloBytes builds the HELLO of cc.
func helloBytes(t testing.TB, cc negotiate.ClientConfig, now time.Time) []byte {
	t.Helper()
	hs, err := negotiate.NewHello(cc, now)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	return append([]byte(nil), hs.Message()...)
}

// replaceOnce replaces old by new in msg, failing if old does not occur.
func replaceOnce(t testing.TB, msg []byte, old, new string) []byte {
	t.Helper()
	s := string(msg)
	if !strings.Contains(s, old) {
		t.Fatalf("%q not found in %s", old, s)
	}
	return []byte(strings.Replace(s, old, new, 1))
}

// sendControl writes a control message on the control channel.
func (a *rawAgent) sendControl(msg []byte) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.conn.Send(ctx, transport.ControlChannel, msg); err != nil {
		a.t.Fatalf("send control: %v", err)
	}
}

// expectControl returns the next message, which must be the control
// message typ; PINGs are answered and skipped unless typ is PING.
func (a *rawAgent) expectControl(timeout time.Duration, typ negotiate.MessageType) *negotiate.ControlMessage {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r, cm, err := a.recv(time.Until(deadline))
		if err == nil {
			a.t.Fatalf("got DATA (flags %v, id %d, code %q) while waiting for %s", r.hdr.Flags, r.hdr.RequestID, r.code, typ)
		}
		if !errors.Is(err, errControl) {
			a.t.Fatalf("waiting for %s: %v", typ, err)
		}
		if cm.SessionID != a.sess.ID {
			a.t.Fatalf("%s names session %q, want %q", cm.Type, cm.SessionID, a.sess.ID)
		}
		if cm.Type == negotiate.TypePing && typ != negotiate.TypePing {
			a.sendControl(negotiate.AppendPong(nil, a.sess.ID, time.Now()))
			continue
		}
		if cm.Type != typ {
			a.t.Fatalf("got %s, want %s", cm.Type, typ)
		}
		return cm
	}
}

// expectClose waits for CLOSE with reason, acknowledges it and checks that
// the daemon then closes the connection.
func (a *rawAgent) expectClose(timeout time.Duration, reason negotiate.CloseReason) {
	a.t.Helper()
	cm := a.expectControl(timeout, negotiate.TypeClose)
	if cm.Close == nil || cm.Close.Reason != reason {
		a.t.Fatalf("CLOSE %+v, want reason %s", cm.Close, reason)
	}
	a.sendControl(negotiate.AppendClose(nil, a.sess.ID, time.Now(), reason, "ack"))
	expectConnClosed(a.t, a.conn, 5*time.Second)
}

// recvDataThenClose is recvData n times and then expectClose, for DATA the
// daemon wrote before its CLOSE. On WebSocket order is total: the CLOSE
// must come last. On QUIC the CLOSE travels on the control stream and may
// overtake DATA written before it on data streams (docs/protocol.md §1), so
// it may come anywhere among them, as a client sees it; the DATA must still
// all come, and the CLOSE is acknowledged only after them.
func (a *rawAgent) recvDataThenClose(tr string, n int, reason negotiate.CloseReason) []*received {
	a.t.Helper()
	var got []*received
	closeAt := -1
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n || closeAt < 0 {
		r, cm, err := a.recv(time.Until(deadline))
		switch {
		case err == nil:
			got = append(got, r)
		case !errors.Is(err, errControl):
			a.t.Fatalf("after %d of %d DATA (CLOSE after %d): %v", len(got), n, closeAt, err)
		case cm.Type == negotiate.TypeClose && closeAt < 0:
			if cm.Close == nil || cm.Close.Reason != reason {
				a.t.Fatalf("CLOSE %+v, want reason %s", cm.Close, reason)
			}
			if tr != "quic" && len(got) < n {
				a.t.Fatalf("CLOSE after %d of %d DATA on %s", len(got), n, tr)
			}
			closeAt = len(got)
		case cm.Type == negotiate.TypePing:
			a.sendControl(negotiate.AppendPong(nil, a.sess.ID, time.Now()))
		default:
			a.t.Fatalf("got %s while waiting for DATA and CLOSE", cm.Type)
		}
	}
	if closeAt < n {
		a.t.Logf("%s: CLOSE overtook %d of %d DATA", tr, n-closeAt, n)
	}
	a.sendControl(negotiate.AppendClose(nil, a.sess.ID, time.Now(), reason, "ack"))
	expectConnClosed(a.t, a.conn, 5*time.Second)
	return got
}

// ackSizeClose acknowledges the CLOSE ERROR the daemon sent after refusing
// a message for its size. The daemon does not wait for this
// acknowledgement: it sends CLOSE ERROR and closes (docs/protocol.md §1,
// WebSocket status 1009), so the connection may be gone already; that, and
// only that, is no failure.
func (a *rawAgent) ackSizeClose() {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := a.conn.Send(ctx, transport.ControlChannel, negotiate.AppendClose(nil, a.sess.ID, time.Now(), negotiate.ReasonError, "ack"))
	if err != nil && !errors.Is(err, transport.ErrClosed) {
		a.t.Fatalf("acknowledging CLOSE: %v", err)
	}
}

// ackCloseAsync is expectClose on a goroutine of its own, for an agent the
// test does not read while it reads another: the agent answers its CLOSE as
// soon as it comes, as a real agent does whatever else it is busy with (the
// daemon closes the connection CloseTimeout after its CLOSE leaves). Nothing
// else may read the agent meanwhile; the result comes once the daemon has
// closed the connection.
func (a *rawAgent) ackCloseAsync(timeout time.Duration, reason negotiate.CloseReason) <-chan error {
	done := make(chan error, 1)
	send := func(msg []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return a.conn.Send(ctx, transport.ControlChannel, msg)
	}
	go func() {
		done <- func() error {
			deadline := time.Now().Add(timeout)
			for {
				r, cm, err := a.recv(time.Until(deadline))
				switch {
				case err == nil:
					return fmt.Errorf("got DATA (flags %v, id %d) while waiting for CLOSE", r.hdr.Flags, r.hdr.RequestID)
				case !errors.Is(err, errControl):
					return fmt.Errorf("waiting for CLOSE: %w", err)
				case cm.Type == negotiate.TypePing:
					if err := send(negotiate.AppendPong(nil, a.sess.ID, time.Now())); err != nil {
						return err
					}
					continue
				case cm.Type != negotiate.TypeClose || cm.Close == nil || cm.Close.Reason != reason:
					return fmt.Errorf("got %s %+v, want CLOSE %s", cm.Type, cm.Close, reason)
				}
				if err := send(negotiate.AppendClose(nil, a.sess.ID, time.Now(), reason, "ack")); err != nil {
					return fmt.Errorf("acknowledging CLOSE: %w", err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if msg, err := a.conn.Receive(ctx); err == nil {
					msg.Release()
					return errors.New("a message after the CLOSE acknowledgement, want the connection closed")
				} else if ctx.Err() != nil {
					return errors.New("connection still open 5 s after the CLOSE acknowledgement")
				}
				a.conn.Close()
				return nil
			}
		}()
	}()
	return done
}

// expectSilence fails if any DATA arrives within d (control messages other
// than PING fail too).
func (a *rawAgent) expectSilence(d time.Duration) {
	a.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		r, cm, err := a.recv(time.Until(deadline))
		switch {
		case err == nil:
			a.t.Fatalf("unexpected DATA: flags %v id %d code %q", r.hdr.Flags, r.hdr.RequestID, r.code)
		case errors.Is(err, errControl) && cm.Type == negotiate.TypePing:
			a.sendControl(negotiate.AppendPong(nil, a.sess.ID, time.Now()))
		case errors.Is(err, errControl):
			a.t.Fatalf("unexpected %s", cm.Type)
		case errors.Is(err, context.DeadlineExceeded):
			return
		default:
			a.t.Fatalf("connection failed: %v", err)
		}
	}
}

// recvDataAnswering is recvData for sessions with short keepalive timers:
// it answers the daemon's PINGs while it waits.
func (a *rawAgent) recvDataAnswering(timeout time.Duration) *received {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r, cm, err := a.recv(time.Until(deadline))
		if errors.Is(err, errControl) && cm.Type == negotiate.TypePing {
			a.sendControl(negotiate.AppendPong(nil, a.sess.ID, time.Now()))
			continue
		}
		if err != nil {
			a.t.Fatalf("waiting for DATA: %v (control %v)", err, cm)
		}
		return r
	}
}

// expectError waits for an error reply (REPLY|END, plus notice when set)
// with code for request id.
func (a *rawAgent) expectError(timeout time.Duration, id uint64, code string, notice bool) *received {
	a.t.Helper()
	r := a.recvData(timeout)
	want := negotiate.FlagReply | negotiate.FlagEnd
	if notice {
		want |= negotiate.FlagNotice
	}
	if r.code != code || r.hdr.RequestID != id || r.hdr.Flags != want {
		a.t.Fatalf("got code %q id %d flags %v, want %q id %d flags %v", r.code, r.hdr.RequestID, r.hdr.Flags, code, id, want)
	}
	return r
}

// encode makes the binary M2M v1 frame of body (unprotected, sequence 0).
func encode(t testing.TB, body []byte) []byte {
	t.Helper()
	fr, err := frame.AppendEncode(nil, body, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

// protectAt stamps fr with sequence seq on channel ch and protects it with
// the agent's send key, without touching the agent's own counters: for
// frames the daemon is expected to refuse.
func (a *rawAgent) protectAt(ch transport.ChannelID, fr []byte, seq uint64) []byte {
	a.t.Helper()
	out := make([]byte, len(fr), len(fr)+64)
	copy(out, fr)
	if err := frame.SetSequence(out, seq, uint32(ch)); err != nil {
		a.t.Fatal(err)
	}
	if a.sendKey == nil {
		return out
	}
	out, err := a.sendKey.Protect(out[:0], out)
	if err != nil {
		a.t.Fatal(err)
	}
	return out
}

// mustSend is send that fails the test on error.
func (a *rawAgent) mustSend(ch transport.ChannelID, flags negotiate.DataFlags, id uint64, peer string, fr []byte) {
	a.t.Helper()
	if err := a.send(ch, flags, id, peer, fr); err != nil {
		a.t.Fatalf("send: %v", err)
	}
}

// sendRaw writes msg as is on ch.
func (a *rawAgent) sendRaw(ch transport.ChannelID, msg []byte) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.conn.Send(ctx, ch, msg); err != nil {
		a.t.Fatalf("send: %v", err)
	}
}

// roundTrip checks that req can reach prov by agent id and get an answer
// back: the proof that both sessions still work.
func roundTrip(t testing.TB, req, prov *rawAgent) {
	t.Helper()
	body := corpus(t, "req-chat-tiny-07.json")
	_, id := req.request(prov.sess.AgentID, body)
	got := prov.recvData(5 * time.Second)
	if got.hdr.IsReply() || string(got.body) != string(body) {
		t.Fatalf("provider got flags %v err %v", got.hdr.Flags, got.err)
	}
	resp := corpus(t, "resp-chat-01.json")
	prov.reply(got.ch, got.hdr.RequestID, true, resp)
	back := req.recvData(5 * time.Second)
	if back.hdr.RequestID != id || !back.hdr.IsEnd() || string(back.body) != string(resp) {
		t.Fatalf("requester got id %d flags %v code %q", back.hdr.RequestID, back.hdr.Flags, back.code)
	}
}

// stopAndWait cancels the daemon and returns Run's result, leaving the
// harness's cleanup satisfied.
func stopAndWait(t testing.TB, d *testDaemon, timeout time.Duration) error {
	t.Helper()
	d.Cancel()
	return waitRun(t, d, timeout)
}

// waitRun waits for Run to return (after a cancel made elsewhere).
func waitRun(t testing.TB, d *testDaemon, timeout time.Duration) error {
	t.Helper()
	returned, err := d.Wait(timeout)
	if !returned {
		t.Fatalf("Run did not return within %v", timeout)
	}
	return err
}

// adminGet fetches path from the daemon's admin endpoint.
func adminGet(t testing.TB, d *testDaemon, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.AdminAddr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metric returns the sum of the series of name whose labels include every
// "key=value" pair in labels (0 when none exists yet).
func metric(t testing.TB, d *testDaemon, name string, labels ...string) float64 {
	t.Helper()
	return d.Metric(t, name, labels...)
}

// waitMetric polls until the metric reaches at least want.
func waitMetric(t testing.TB, d *testDaemon, want float64, name string, labels ...string) {
	t.Helper()
	d.WaitMetric(t, want, name, labels...)
}
