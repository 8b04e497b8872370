package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/daemontest"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
	"github.com/m2md/m2md/transport"
)

// transports every end-to-end test runs over.
var transports = []string{"quic", "ws"}

// testDaemon is the real daemon, in-process.
type testDaemon struct {
	*daemontest.Daemon
}

// startDaemon runs a real daemon on ephemeral loopback ports with a fresh
// development certificate. mutate adjusts the configuration.
func startDaemon(t testing.TB, mutate func(*daemon.Config)) *testDaemon {
	t.Helper()
	return &testDaemon{daemontest.Start(t, mutate)}
}

func (d *testDaemon) url(tr string) string { return d.URL(tr) }

func (d *testDaemon) clientTLS(t testing.TB) *tls.Config {
	t.Helper()
	conf, err := certs.ClientTLSConfig(certs.ClientOptions{PinSHA256: d.Fingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func testLogger(t testing.TB) zerolog.Logger { return daemontest.Logger(t) }

// rawAgent speaks the session protocol by hand, so tests can also break it.
type rawAgent struct {
	t    testing.TB
	conn transport.Conn
	sess *negotiate.Session
	// sealer and opener seal and open frames as an agent must; sendKey
	// protects frames the test forges (protectAt), nil in mode none.
	sealer, opener *negotiate.Sealer
	sendKey        *security.FrameKey

	mu      sync.Mutex
	nextReq uint64
}

// dialRaw connects and completes the handshake with cc. tc, if given, is
// the agent's own transport configuration (e.g. a small
// MaxIncomingChannels: how many deliveries a QUIC provider can have in
// flight).
func dialRaw(t testing.TB, d *testDaemon, tr string, cc negotiate.ClientConfig, tc ...transport.Config) (*rawAgent, error) {
	t.Helper()
	var cfg transport.Config
	if len(tc) > 0 {
		cfg = tc[0]
	}
	conn, err := dialTransport(t, d, tr, cfg)
	if err != nil {
		return nil, err
	}
	return handshakeRaw(t, d, conn, cc)
}

// handshakeRaw completes the handshake with cc on conn, a connection to d.
func handshakeRaw(t testing.TB, d *testDaemon, conn transport.Conn, cc negotiate.ClientConfig) (*rawAgent, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs, err := negotiate.NewHello(cc, time.Now())
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := conn.Send(ctx, transport.ControlChannel, hs.Message()); err != nil {
		conn.Close()
		return nil, err
	}
	msg, err := conn.Receive(ctx)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("no ACCEPT: %w", err)
	}
	sess, err := hs.Accept(msg.Data)
	msg.Release()
	if err != nil {
		conn.Close()
		return nil, err
	}
	a := newRawAgent(t, conn, sess)
	closeAtEnd(t, func() {
		conn.Close()
		if d == nil { // a daemon of another process (cluster_docs_test.go)
			return
		}
		// Subtests share a daemon and route by model: wait until this agent
		// is gone from its routing table, so the next subtest's requests
		// cannot be routed to it while it is leaving.
		deadline := time.Now().Add(5 * time.Second)
		for d.SessionOpen(sess.ID) && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
	})
	return a, nil
}

// rawClosers holds, per test, the closes of its agents still open (raw
// agents and Go clients).
var rawClosers sync.Map // testing.TB → *closeSet

type closeSet struct {
	mu   sync.Mutex
	open []func()
}

// closeAtEnd runs closeFn when the test ends, together with the closes of
// the test's other agents: the first of their cleanups to run closes them
// all at once. A QUIC Close waits for the peer's streams to end (at
// least 25 ms, far more under the race detector); one after the other,
// the 33 agents of a load test took 7 s to leave.
func closeAtEnd(t testing.TB, closeFn func()) {
	v, _ := rawClosers.LoadOrStore(t, new(closeSet))
	set := v.(*closeSet)
	set.mu.Lock()
	set.open = append(set.open, closeFn)
	set.mu.Unlock()
	t.Cleanup(func() {
		rawClosers.Delete(t)
		set.mu.Lock()
		fns := set.open
		set.open = nil
		set.mu.Unlock()
		var wg sync.WaitGroup
		for _, fn := range fns {
			wg.Go(fn)
		}
		wg.Wait()
	})
}

func mustDialRaw(t testing.TB, d *testDaemon, tr string, cc negotiate.ClientConfig, tc ...transport.Config) *rawAgent {
	t.Helper()
	a, err := dialRaw(t, d, tr, cc, tc...)
	if err != nil {
		t.Fatalf("dial %s: %v", tr, err)
	}
	return a
}

// newRawAgent is the agent of an established session.
func newRawAgent(t testing.TB, conn transport.Conn, sess *negotiate.Session) *rawAgent {
	t.Helper()
	a := &rawAgent{t: t, conn: conn, sess: sess}
	var err error
	if a.sealer, a.opener, err = sess.Sealers(4096); err != nil {
		t.Fatal(err)
	}
	if mode := sess.Params.SecurityMode; mode != frame.SecurityNone {
		if a.sendKey, err = security.NewFrameKey(mode, sess.SendKey()); err != nil {
			t.Fatal(err)
		}
	}
	conn.SetReadLimit(int64(sess.Params.MaxPayload) + 512)
	if sess.Params.Has(negotiate.FeatureSharedStream) {
		transport.ShareDataChannel(conn)
	}
	return a
}

// protect seals a copy of fr with the channel's next sequence number.
func (a *rawAgent) protect(ch transport.ChannelID, fr []byte) []byte {
	a.t.Helper()
	out, err := a.sealer.Seal(uint32(ch), bytes.Clone(fr))
	if err != nil {
		a.t.Fatal(err)
	}
	return out
}

// send writes a DATA message carrying fr as is (already protected or not).
func (a *rawAgent) send(ch transport.ChannelID, flags negotiate.DataFlags, id uint64, peer string, fr []byte) error {
	msg, err := negotiate.AppendData(nil, flags, id, peer, fr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.conn.Send(ctx, ch, msg)
}

// frames remembers the M2M v1 frame of each body request has encoded (the
// encoding is deterministic): the tests send the same corpus bodies
// thousands of times, and Brotli under the race detector made encoding
// them the larger part of some tests' time. Bodies over a MiB, and
// bodies past the 4,096th, are not kept.
var frames struct {
	sync.Mutex
	m map[string][]byte
}

func encodeFrame(body []byte) ([]byte, error) {
	frames.Lock()
	fr, ok := frames.m[string(body)]
	frames.Unlock()
	if ok {
		return fr, nil
	}
	fr, err := frame.AppendEncode(nil, body, frame.Limits{})
	if err != nil || len(body) > 1<<20 {
		return fr, err
	}
	frames.Lock()
	if frames.m == nil {
		frames.m = map[string][]byte{}
	}
	if len(frames.m) < 4096 {
		frames.m[string(body)] = fr
	}
	frames.Unlock()
	return fr, nil
}

// request encodes body as an M2M v1 frame and sends it as a request on a
// fresh channel; it returns the channel and request id.
func (a *rawAgent) request(peer string, body []byte) (transport.ChannelID, uint64) {
	a.t.Helper()
	fr, err := encodeFrame(body)
	if err != nil {
		a.t.Fatal(err)
	}
	ch := a.channel()
	id := a.newID()
	if err := a.send(ch, 0, id, peer, a.protect(ch, fr)); err != nil {
		a.t.Fatalf("send request: %v", err)
	}
	return ch, id
}

func (a *rawAgent) channel() transport.ChannelID {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ch, err := a.conn.AcquireChannel(ctx)
	if err != nil {
		a.t.Fatalf("acquire channel: %v", err)
	}
	return ch
}

func (a *rawAgent) newID() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nextReq++
	return a.nextReq
}

// reply encodes body and sends it as a reply to delivery id on ch.
func (a *rawAgent) reply(ch transport.ChannelID, id uint64, end bool, body []byte) {
	a.t.Helper()
	fr, err := frame.AppendEncode(nil, body, frame.Limits{})
	if err != nil {
		a.t.Fatal(err)
	}
	flags := negotiate.FlagReply
	if end {
		flags |= negotiate.FlagEnd
	}
	if err := a.send(ch, flags, id, "", a.protect(ch, fr)); err != nil {
		a.t.Fatalf("send reply: %v", err)
	}
}

// received is one DATA message as the agent sees it after opening.
type received struct {
	ch    transport.ChannelID
	hdr   negotiate.DataHeader
	peer  string
	frame []byte // plain frame
	first byte   // the frame's first byte as it travelled ('#', frame.CompactMarker, …)
	body  []byte // decoded JSON, nil if it did not decode
	err   error  // decode error
	code  string // error code for schema-10 frames
	// cancel marks a CANCEL message (hdr.RequestID is its request id).
	cancel bool
}

var errControl = errors.New("control message")

// recv returns the next DATA message within timeout. Control messages are
// returned as errControl with the parsed message.
func (a *rawAgent) recv(timeout time.Duration) (*received, *negotiate.ControlMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msg, err := a.conn.Receive(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer msg.Release()
	kind, err := negotiate.MessageKind(msg.Data)
	if err != nil {
		return nil, nil, err
	}
	if kind == negotiate.KindControl {
		cm, err := negotiate.ParseControl(msg.Data)
		if err != nil {
			return nil, nil, err
		}
		return nil, cm, errControl
	}
	if kind == negotiate.KindCancel {
		id, err := negotiate.ParseCancel(msg.Data)
		if err != nil {
			return nil, nil, err
		}
		return &received{ch: msg.Channel, hdr: negotiate.DataHeader{RequestID: id}, cancel: true}, nil, nil
	}
	dh, fr, err := negotiate.ParseData(msg.Data)
	if err != nil {
		return nil, nil, err
	}
	r := &received{ch: msg.Channel, hdr: dh, peer: string(dh.Peer)}
	fr = append([]byte(nil), fr...)
	r.first = fr[0]
	if fr[0] == '#' || fr[0] == frame.CompactMarker {
		if fr, err = a.opener.Open(uint32(msg.Channel), fr); err != nil {
			return nil, nil, fmt.Errorf("open: %w", err)
		}
		var h frame.Header
		if err := frame.ReadHeader(fr, &h); err == nil && h.Schema == frame.SchemaError {
			r.code = "?"
		}
		r.body, r.err = frame.AppendDecode(nil, fr, frame.Limits{})
		if r.code != "" && r.err == nil {
			r.code = errorCode(r.body)
		}
	}
	r.frame = fr
	r.hdr.Peer = nil
	return r, nil, nil
}

// recvData skips control messages (answering PINGs is the daemon's
// business here: the tests' timers are long) and returns the next DATA.
func (a *rawAgent) recvData(timeout time.Duration) *received {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r, cm, err := a.recv(time.Until(deadline))
		if errors.Is(err, errControl) {
			a.t.Logf("control message while waiting for DATA: %s", cm.Type)
			continue
		}
		if err != nil {
			a.t.Fatalf("waiting for DATA: %v", err)
		}
		return r
	}
}
