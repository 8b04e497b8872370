package negotiate

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var defaultParams = Negotiated{SessionTimeout: DefaultSessionTimeout, PingInterval: DefaultPingInterval, PongTimeout: DefaultPongTimeout}

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestKeepaliveMissedPongs(t *testing.T) {
	k := newKeepalive(defaultParams, t0)
	steps := []struct {
		at   time.Duration
		want Action
	}{
		{59 * time.Second, ActionNone},
		{60 * time.Second, ActionPing}, // silent for the ping interval
		{65 * time.Second, ActionNone},
		{70 * time.Second, ActionPing}, // missed 1, repeated
		{79 * time.Second, ActionNone},
		{80 * time.Second, ActionPing}, // missed 2, repeated
		{90 * time.Second, ActionClose},
	}
	for _, s := range steps {
		if got := k.Tick(at(s.at)); got != s.want {
			t.Fatalf("at %v: %v, want %v (missed %d)", s.at, got, s.want, k.missedPongs())
		}
	}
	if k.missedPongs() != MaxMissedPongs {
		t.Fatalf("missed %d", k.missedPongs())
	}
}

func TestKeepaliveDeadlines(t *testing.T) {
	k := newKeepalive(defaultParams, t0)
	if d := k.Deadline(); !d.Equal(at(60 * time.Second)) {
		t.Fatalf("first deadline %v", d.Sub(t0))
	}
	k.OnReceive(at(30 * time.Second))
	if d := k.Deadline(); !d.Equal(at(90 * time.Second)) {
		t.Fatalf("after receive %v", d.Sub(t0))
	}
	if a := k.Tick(at(90 * time.Second)); a != ActionPing {
		t.Fatal(a)
	}
	if d := k.Deadline(); !d.Equal(at(100 * time.Second)) {
		t.Fatalf("pong deadline %v", d.Sub(t0))
	}
	// Any message answers the PING and resets the count.
	k.OnReceive(at(95 * time.Second))
	if k.missedPongs() != 0 || !k.Deadline().Equal(at(155*time.Second)) {
		t.Fatalf("after answer: missed %d, deadline %v", k.missedPongs(), k.Deadline().Sub(t0))
	}
	// A clock going backwards does not move the last receive time back.
	k.OnReceive(at(10 * time.Second))
	if !k.Deadline().Equal(at(155 * time.Second)) {
		t.Fatal("clock step back moved the deadline")
	}
}

// The session timeout acts on its own: with a ping interval longer than
// the silence allowed, the session closes before three PINGs are missed.
func TestKeepaliveSessionTimeout(t *testing.T) {
	p := Negotiated{SessionTimeout: time.Minute, PingInterval: 50 * time.Second, PongTimeout: 20 * time.Second}
	k := newKeepalive(p, t0)
	if a := k.Tick(at(50 * time.Second)); a != ActionPing {
		t.Fatal(a)
	}
	if d := k.Deadline(); !d.Equal(at(time.Minute)) {
		t.Fatalf("deadline %v", d.Sub(t0))
	}
	if a := k.Tick(at(time.Minute)); a != ActionClose {
		t.Fatalf("at 60 s: %v", a)
	}
}

func TestMachineClientLifecycle(t *testing.T) {
	m := NewMachine(RoleClient, t0)
	if !m.Deadline().IsZero() {
		t.Fatal("client has a deadline before HELLO")
	}
	if _, err := m.Received(t0, KindData, ""); !errors.Is(err, ErrUnexpectedMessage) {
		t.Fatalf("DATA before HELLO: %v", err)
	}
	if err := m.CanSend(KindData, ""); !errors.Is(err, ErrUnexpectedMessage) {
		t.Fatalf("sending DATA before handshake: %v", err)
	}
	must(t, m.CanSend(KindControl, TypeHello))
	must(t, m.HelloSent(t0))
	if err := m.CanSend(KindControl, TypeHello); err == nil {
		t.Fatal("second HELLO allowed")
	}
	// The error names the message: its type for a control message, its
	// kind otherwise.
	if _, err := m.Received(t0, KindControl, TypePing); !errors.Is(err, ErrUnexpectedMessage) || !strings.Contains(err.Error(), "PING") {
		t.Fatalf("PING before ACCEPT: %v", err)
	}
	if _, err := m.Received(t0, KindData, ""); !errors.Is(err, ErrUnexpectedMessage) || !strings.Contains(err.Error(), "DATA") {
		t.Fatalf("DATA before ACCEPT: %v", err)
	}
	if a, err := m.Received(at(time.Second), KindControl, TypeAccept); a != ActionNone || err != nil {
		t.Fatal(a, err)
	}
	must(t, m.Established(defaultParams, at(time.Second)))
	if m.State() != StateEstablished {
		t.Fatal(m.State())
	}
	for _, typ := range []MessageType{TypePing, TypePong, TypeClose} {
		must(t, m.CanSend(KindControl, typ))
	}
	must(t, m.CanSend(KindData, ""))
	if err := m.CanSend(KindControl, TypeHello); err == nil {
		t.Fatal("HELLO allowed when established")
	}
	if a, err := m.Received(at(2*time.Second), KindControl, TypePing); a != ActionPong || err != nil {
		t.Fatal("PING → PONG:", a, err)
	}
	if _, err := m.Received(at(2*time.Second), KindControl, TypeAccept); !errors.Is(err, ErrUnexpectedMessage) {
		t.Fatalf("second ACCEPT: %v", err)
	}
	// CLOSE: the sender is Closing, the receiver acks and is Closed.
	must(t, m.CloseSent(ReasonClientShutdown, at(3*time.Second)))
	if m.State() != StateClosing || m.CloseReason() != ReasonClientShutdown || !m.Deadline().Equal(at(8*time.Second)) {
		t.Fatal(m.State(), m.CloseReason(), m.Deadline().Sub(t0))
	}
	if err := m.CanSend(KindData, ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("DATA after CLOSE: %v", err)
	}
	if _, err := m.Received(at(4*time.Second), KindData, ""); !errors.Is(err, ErrAfterClose) {
		t.Fatalf("DATA arriving after CLOSE: %v", err)
	}
	if _, err := m.Received(at(4*time.Second), KindControl, TypePing); !errors.Is(err, ErrAfterClose) {
		t.Fatalf("PING arriving after CLOSE: %v", err)
	}
	if a, err := m.Received(at(4*time.Second), KindControl, TypeClose); a != ActionDisconnect || err != nil {
		t.Fatal("ack:", a, err)
	}
	if m.State() != StateClosed || !m.Deadline().IsZero() {
		t.Fatal(m.State())
	}
	if _, err := m.Received(at(5*time.Second), KindData, ""); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

func TestMachineReceiverOfClose(t *testing.T) {
	m := established(t, RoleServer)
	if a, err := m.Received(at(time.Second), KindControl, TypeClose); a != ActionCloseAck || err != nil {
		t.Fatal(a, err)
	}
	if m.State() != StateClosed {
		t.Fatal(m.State())
	}
	if err := m.CloseSent(ReasonNormal, at(time.Second)); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
}

// Both sides send CLOSE at once: each takes the other's as the ack.
func TestMachineCrossingCloses(t *testing.T) {
	a, b := established(t, RoleClient), established(t, RoleServer)
	must(t, a.CloseSent(ReasonNormal, t0))
	must(t, b.CloseSent(ReasonServerShutdown, t0))
	for _, m := range []*Machine{a, b} {
		if act, err := m.Received(t0, KindControl, TypeClose); act != ActionDisconnect || err != nil {
			t.Fatal(act, err)
		}
	}
}

func TestMachineCloseAckTimeout(t *testing.T) {
	m := established(t, RoleClient)
	must(t, m.CloseSent(ReasonNormal, t0))
	if a := m.Tick(at(4999 * time.Millisecond)); a != ActionNone {
		t.Fatal(a)
	}
	if a := m.Tick(at(CloseTimeout)); a != ActionDisconnect || m.State() != StateClosed {
		t.Fatal(a, m.State())
	}
}

func TestMachineHelloDeadline(t *testing.T) {
	m := NewMachine(RoleServer, t0)
	if !m.Deadline().Equal(at(HelloTimeout)) {
		t.Fatal(m.Deadline())
	}
	if _, err := m.Received(t0, KindData, ""); !errors.Is(err, ErrUnexpectedMessage) {
		t.Fatalf("DATA first: %v", err)
	}
	if a := m.Tick(at(29 * time.Second)); a != ActionNone {
		t.Fatal(a)
	}
	if a := m.Tick(at(30 * time.Second)); a != ActionDisconnect || m.State() != StateClosed {
		t.Fatal(a, m.State())
	}

	c := NewMachine(RoleClient, t0)
	must(t, c.HelloSent(t0))
	if a := c.Tick(at(HelloTimeout)); a != ActionDisconnect {
		t.Fatal("client waits forever for ACCEPT:", a)
	}
}

func TestMachineServerHandshake(t *testing.T) {
	m := NewMachine(RoleServer, t0)
	if a, err := m.Received(t0, KindControl, TypeHello); a != ActionNone || err != nil {
		t.Fatal(a, err)
	}
	must(t, m.CanSend(KindControl, TypeAccept))
	must(t, m.CanSend(KindControl, TypeReject))
	if err := m.CanSend(KindData, ""); err == nil {
		t.Fatal("DATA before ACCEPT")
	}
	if err := m.HelloSent(t0); err == nil {
		t.Fatal("daemon sent HELLO")
	}
	m.Rejected()
	if m.State() != StateClosed {
		t.Fatal(m.State())
	}
	if err := m.Established(defaultParams, t0); err == nil {
		t.Fatal("established after REJECT")
	}
}

// A whole keepalive cycle through the machine: three missed PONGs close
// with TIMEOUT, then the ack deadline disconnects.
func TestMachineKeepaliveTimeout(t *testing.T) {
	m := established(t, RoleServer)
	var got []Action
	now := t0
	for range 10 {
		d := m.Deadline()
		if d.IsZero() {
			break
		}
		now = d
		got = append(got, m.Tick(now))
	}
	want := []Action{ActionPing, ActionPing, ActionPing, ActionClose, ActionDisconnect}
	if len(got) != len(want) {
		t.Fatalf("actions %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("actions %v, want %v", got, want)
		}
	}
	if m.CloseReason() != ReasonTimeout || !now.Equal(at(95*time.Second)) {
		t.Fatalf("reason %s at %v", m.CloseReason(), now.Sub(t0))
	}
}

func TestMachineDataKeepsSessionAlive(t *testing.T) {
	m := established(t, RoleServer)
	for i := 1; i <= 100; i++ {
		now := at(time.Duration(i) * 30 * time.Second)
		if a := m.Tick(now); a != ActionNone {
			t.Fatalf("at %v: %v", now.Sub(t0), a)
		}
		if _, err := m.Received(now, KindData, ""); err != nil {
			t.Fatal(err)
		}
	}
}

func established(t *testing.T, role Role) *Machine {
	t.Helper()
	m := NewMachine(role, t0)
	if role == RoleClient {
		must(t, m.HelloSent(t0))
	}
	must(t, m.Established(defaultParams, t0))
	return m
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A CLOSE from the peer becomes a *CloseError that callers can match as
// ErrClosed and inspect (REPLACED means: do not reconnect).
func TestCloseError(t *testing.T) {
	m, err := ParseControl(AppendClose(nil, testSID, t0, ReasonReplaced, "newer session"))
	if err != nil {
		t.Fatal(err)
	}
	var e error = &CloseError{Reason: m.Close.Reason, Message: m.Close.Message}
	var ce *CloseError
	if !errors.Is(e, ErrClosed) || !errors.As(e, &ce) || ce.Reason != ReasonReplaced {
		t.Fatal(e)
	}
}

// CloseLeft restarts the wait for CLOSE's acknowledgement when the CLOSE
// actually leaves; in any other state it changes no deadline.
func TestCloseLeft(t *testing.T) {
	m := NewMachine(RoleClient, t0)
	must(t, m.HelloSent(t0))
	hello := m.Deadline()
	m.CloseLeft(at(time.Second))
	if !m.Deadline().Equal(hello) {
		t.Fatalf("CloseLeft before CLOSE moved the HELLO deadline from %v to %v", hello.Sub(t0), m.Deadline().Sub(t0))
	}
	must(t, m.Established(defaultParams, at(time.Second)))
	must(t, m.CloseSent(ReasonNormal, at(3*time.Second)))
	m.CloseLeft(at(6 * time.Second))
	if want := at(6*time.Second + CloseTimeout); !m.Deadline().Equal(want) {
		t.Fatalf("deadline %v after CloseLeft at 6 s, want %v", m.Deadline().Sub(t0), want.Sub(t0))
	}
	if a := m.Tick(at(3*time.Second + CloseTimeout)); a != ActionNone {
		t.Fatalf("CLOSE's first deadline still ran: %v", a)
	}
	if a := m.Tick(at(6*time.Second + CloseTimeout)); a != ActionDisconnect {
		t.Fatalf("at the restarted deadline: %v", a)
	}
}
