package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/leakcheck"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// Most tests run against the real daemon (startDaemon). This fake daemon
// serves only the tests that need a daemon the real one cannot be:
//
//   - one that misbehaves: leaves PINGs unanswered (TestTimers keepalive
//     missed), leaves CLOSE unacknowledged (TestTimers close not
//     acknowledged), sends a reply whose payload does not decode or whose
//     frame is of no known form (TestBadFrames), sends control messages
//     that break the protocol (TestProtocolViolation);
//   - one that shows what the client sent, which the real daemon does not
//     record: the request frame (TestCompressionQuality), PINGs counted (TestTimers keepalive answered), PONGs
//     (TestPingAnswered), the reason of the client's CLOSE acknowledgement
//     (TestServerShutdownReconnects);
//   - one that drops a client's connection while staying silent
//     (TestReconnect: the real daemon, even crashing, may answer the
//     client's request in flight with agent_gone first).
//
// It is built only from the lower-level packages (transport,
// negotiate.Server, Sealer, frame) and runs over real loopback sockets:
// the handshake, verified and re-protected frames, PING/PONG, CLOSE in both
// directions, and its own test models (it routes nothing to other agents):
//
//	echo      the request frame comes back as the final reply (not decoded)
//	garbage   a reply whose payload does not decode (CRC broken), properly protected
//	unknown-form  a reply frame whose first byte is no form's (0x99)
//	hang      no reply until the test drops the connection
//
// Any other model gets no_route.

const testTimeout = 20 * time.Second

var (
	tlsOnce   sync.Once
	serverTLS *tls.Config
	certPin   string
	tlsErr    error
	certDir   string
)

// TestMain fails the run if goroutines of m2md or its network libraries
// outlive the tests, then removes the tests' certificates.
func TestMain(m *testing.M) {
	code := leakcheck.Main(m)
	if certDir != "" {
		os.RemoveAll(certDir)
	}
	os.Exit(code)
}

func testTLS(t testing.TB) (*tls.Config, string) {
	t.Helper()
	tlsOnce.Do(func() {
		if certDir, tlsErr = os.MkdirTemp("", "m2md-client-test-*"); tlsErr != nil {
			return
		}
		var cert tls.Certificate
		cert, certPin, tlsErr = certs.EnsureDevCert(certDir)
		serverTLS = certs.ServerTLSConfig(cert)
	})
	if tlsErr != nil {
		t.Fatal(tlsErr)
	}
	return serverTLS, certPin
}

type fakeConfig struct {
	server     negotiate.ServerConfig
	noPong     bool // leave PINGs unanswered
	noCloseAck bool // leave CLOSE unacknowledged
	// holdAfterAck, when set, keeps a session that sent CLOSE open after
	// the agent's acknowledgement until it is closed: what the test sends
	// meanwhile arrives as replies overtaken by the CLOSE would
	// (TestRepliesOvertakenByClose).
	holdAfterAck chan struct{}
}

type fakeDaemon struct {
	t       testing.TB
	cfg     fakeConfig
	srv     *negotiate.Server
	qln     *transport.QUICListener
	hs      *httptest.Server
	quicURL string
	wsURL   string
	pin     string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	pings atomic.Int64 // PINGs received
	pongs chan struct{}

	mu      sync.Mutex
	byAgent map[string]*fakeSession
	all     map[*fakeSession]struct{}
	hellos  map[string]int
	closes  map[string][]negotiate.CloseReason // CLOSE reasons received, per agent
	hangs   []hang
	echoed  []byte        // the last request frame the echo model answered, opened
	changed chan struct{} // closed and replaced on every session change
}

func (d *fakeDaemon) fingerprint() string { return d.pin }

type hang struct {
	fs *fakeSession
	id uint64
	ch transport.ChannelID
}

type fakeSession struct {
	d      *fakeDaemon
	conn   transport.Conn
	id     string
	agent  string
	models []string
	mode   frame.Security
	send   *negotiate.Sealer
	recv   *negotiate.Sealer

	chMu    sync.Mutex
	chLocks map[transport.ChannelID]*sync.Mutex

	ready chan struct{} // closed once ACCEPT is sent

	mu        sync.Mutex
	closeSent bool
	ended     bool
}

func newFakeDaemon(t testing.TB, cfg fakeConfig) *fakeDaemon {
	t.Helper()
	stls, pin := testTLS(t)
	srv, err := negotiate.NewServer(cfg.server)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDaemon{
		t: t, cfg: cfg, srv: srv, pin: pin,
		pongs:   make(chan struct{}, 16),
		byAgent: make(map[string]*fakeSession),
		all:     make(map[*fakeSession]struct{}),
		hellos:  make(map[string]int),
		closes:  make(map[string][]negotiate.CloseReason),
		changed: make(chan struct{}),
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	if d.qln, err = transport.ListenQUIC("127.0.0.1:0", stls, transport.Config{}); err != nil {
		t.Fatal(err)
	}
	d.quicURL = "quic://" + d.qln.Addr().String()
	d.wg.Go(func() {
		for {
			conn, err := d.qln.Accept(d.ctx)
			if err != nil {
				return
			}
			d.wg.Go(func() { d.serve(conn) })
		}
	})
	d.hs = httptest.NewUnstartedServer(transport.NewWSHandler(transport.Config{}, d.serve))
	d.hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	d.hs.Start()
	d.wsURL = "ws" + strings.TrimPrefix(d.hs.URL, "http") + "/m2m"
	t.Cleanup(d.close)
	return d
}

// url returns the daemon's URL for transport "quic" or "ws".
func (d *fakeDaemon) url(tr string) string {
	if tr == "quic" {
		return d.quicURL
	}
	return d.wsURL
}

func (d *fakeDaemon) close() {
	d.cancel()
	d.qln.Close()
	d.dropAll()
	d.hs.CloseClientConnections()
	d.hs.Close()
	d.wg.Wait()
	d.srv.Close()
	d.qln.Unbind()
}

func (d *fakeDaemon) notify() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// serve runs one connection: handshake, then the session until it ends.
func (d *fakeDaemon) serve(conn transport.Conn) {
	defer conn.Close()
	ctx, cancel := context.WithTimeout(d.ctx, testTimeout)
	msg, err := conn.Receive(ctx)
	cancel()
	if err != nil {
		return
	}
	ns, reply, err := d.srv.Accept(time.Now(), msg.Data, false)
	msg.Release()
	if ns == nil {
		conn.Send(d.ctx, transport.ControlChannel, reply)
		return
	}
	conn.SetReadLimit(int64(ns.Params.MaxPayload) + 512)
	fs := &fakeSession{
		d: d, conn: conn, id: ns.ID, agent: ns.AgentID, mode: ns.Params.SecurityMode,
		chLocks: make(map[transport.ChannelID]*sync.Mutex),
		ready:   make(chan struct{}),
	}
	if ns.Peer != nil {
		fs.models = ns.Peer.Models
	}
	if fs.send, fs.recv, err = ns.Sealers(4096); err != nil {
		d.t.Error(err)
		return
	}
	ns.Wipe()

	// Registered before ACCEPT goes out, so that the agent is routable by
	// the time its Dial returns; nothing is sent to it before ACCEPT (ready).
	d.mu.Lock()
	old := d.byAgent[fs.agent]
	d.byAgent[fs.agent] = fs
	d.all[fs] = struct{}{}
	d.hellos[fs.agent]++
	d.notify()
	d.mu.Unlock()
	if old != nil {
		old.sendClose(negotiate.ReasonReplaced)
	}
	err = conn.Send(d.ctx, transport.ControlChannel, reply)
	close(fs.ready)
	if err == nil {
		fs.readLoop()
	}

	fs.mu.Lock()
	fs.ended = true
	fs.mu.Unlock()
	d.mu.Lock()
	if d.byAgent[fs.agent] == fs {
		delete(d.byAgent, fs.agent)
	}
	delete(d.all, fs)
	d.notify()
	d.mu.Unlock()
}

func (fs *fakeSession) readLoop() {
	d := fs.d
	for {
		msg, err := fs.conn.Receive(d.ctx)
		if err != nil {
			return
		}
		kind, err := negotiate.MessageKind(msg.Data)
		if err != nil {
			msg.Release()
			return
		}
		if kind == negotiate.KindControl {
			cm, err := negotiate.ParseControl(msg.Data)
			msg.Release()
			if err != nil {
				d.t.Errorf("fake daemon: bad control message from %s: %v", fs.agent, err)
				return
			}
			if cm.SessionID != fs.id {
				d.t.Errorf("fake daemon: %s names session %q, want %q", cm.Type, cm.SessionID, fs.id)
				return
			}
			switch cm.Type {
			case negotiate.TypePing:
				d.pings.Add(1)
				if !d.cfg.noPong {
					fs.sendControl(negotiate.AppendPong(nil, fs.id, time.Now()))
				}
			case negotiate.TypePong:
				select {
				case d.pongs <- struct{}{}:
				default:
				}
			case negotiate.TypeClose:
				d.mu.Lock()
				d.closes[fs.agent] = append(d.closes[fs.agent], cm.Close.Reason)
				d.notify()
				d.mu.Unlock()
				fs.mu.Lock()
				wasSent := fs.closeSent
				fs.closeSent = true
				fs.mu.Unlock()
				if !wasSent && !d.cfg.noCloseAck {
					fs.sendControl(negotiate.AppendClose(nil, fs.id, time.Now(), cm.Close.Reason, ""))
				}
				if wasSent && d.cfg.holdAfterAck != nil {
					<-d.cfg.holdAfterAck
				}
				if !d.cfg.noCloseAck || wasSent {
					return
				}
			default:
				d.t.Errorf("fake daemon: unexpected %s", cm.Type)
				return
			}
			continue
		}
		fs.handleData(msg)
	}
}

// open verifies a frame and checks its sequence, as the daemon must.
func (fs *fakeSession) open(ch transport.ChannelID, fr []byte) ([]byte, error) {
	if !isM2M(fr) {
		return fr, nil
	}
	return fs.recv.Open(uint32(ch), fr)
}

func (fs *fakeSession) handleData(msg transport.Message) {
	defer msg.Release()
	d := fs.d
	hdr, fr, err := negotiate.ParseData(msg.Data)
	if err != nil {
		d.t.Errorf("fake daemon: bad DATA from %s: %v", fs.agent, err)
		return
	}
	ch := msg.Channel
	plain, err := fs.open(ch, fr)
	if err != nil {
		if !hdr.IsReply() {
			fs.sendError(ch, negotiate.FlagReply|negotiate.FlagEnd, hdr.RequestID, "", negotiate.RefusalCode(err), err.Error())
		} else {
			d.t.Errorf("fake daemon: reply from %s refused: %v", fs.agent, err)
		}
		return
	}
	if hdr.IsReply() || len(hdr.Peer) > 0 {
		d.t.Errorf("fake daemon: %s sent a reply or addressed an agent; the fake routes nothing", fs.agent)
		return
	}
	var h frame.Header
	if err := frame.ReadHeader(plain, &h); err != nil {
		fs.sendError(ch, negotiate.FlagReply|negotiate.FlagEnd, hdr.RequestID, "", negotiate.CodeBadFrame, err.Error())
		return
	}
	id := hdr.RequestID
	const end = negotiate.FlagReply | negotiate.FlagEnd
	switch model := string(h.Model); model {
	case "echo":
		// The request's own frame goes back, re-stamped and re-protected,
		// without decoding: a daemon never touches payloads.
		d.mu.Lock()
		d.echoed = slices.Clone(plain)
		d.mu.Unlock()
		fs.sendFrame(ch, end, id, "", slices.Clone(plain))
	case "garbage":
		reply, err := frame.AppendEncode(nil, []byte(`{"id":"chatcmpl-x","choices":[{"message":{"content":"ok"}}]}`), frame.Limits{})
		if err != nil {
			d.t.Error(err)
			return
		}
		reply[len(reply)-2] ^= 0x01 // a payload byte, still UTF-8: the CRC no longer matches
		fs.sendFrame(ch, end, id, "", reply)
	case "unknown-form":
		// A frame whose first byte begins no form DATA carries: the
		// real daemon refuses it and never delivers one.
		fs.sendFrame(ch, end, id, "", []byte{0x99, 0x81, 0x01})
	case "hang":
		d.mu.Lock()
		d.hangs = append(d.hangs, hang{fs, id, ch})
		d.notify()
		d.mu.Unlock()
	default:
		fs.sendError(ch, end, id, "", negotiate.CodeNoRoute, "the fake daemon has no model "+model)
	}
}

func (fs *fakeSession) chLock(ch transport.ChannelID) *sync.Mutex {
	fs.chMu.Lock()
	defer fs.chMu.Unlock()
	m := fs.chLocks[ch]
	if m == nil {
		m = new(sync.Mutex)
		fs.chLocks[ch] = m
	}
	return m
}

// sendFrame stamps, protects and sends a plain frame (which it may modify).
func (fs *fakeSession) sendFrame(ch transport.ChannelID, flags negotiate.DataFlags, id uint64, peer string, plain []byte) error {
	<-fs.ready
	m := fs.chLock(ch)
	m.Lock()
	defer m.Unlock()
	if isM2M(plain) {
		var err error
		if plain, err = fs.send.Seal(uint32(ch), plain); err != nil {
			return err
		}
	}
	msg, err := negotiate.AppendData(nil, flags, id, peer, plain)
	if err != nil {
		return err
	}
	return fs.conn.Send(fs.d.ctx, ch, msg)
}

func (fs *fakeSession) sendError(ch transport.ChannelID, flags negotiate.DataFlags, id uint64, peer string, code negotiate.ErrorCode, text string) error {
	fr, err := frame.AppendErrorFrame(nil, string(code), text)
	if err != nil {
		return err
	}
	return fs.sendFrame(ch, flags, id, peer, fr)
}

func (fs *fakeSession) sendControl(msg []byte) error {
	<-fs.ready
	return fs.conn.Send(fs.d.ctx, transport.ControlChannel, msg)
}

// sendClose sends CLOSE with reason; the session ends with the ack.
func (fs *fakeSession) sendClose(reason negotiate.CloseReason) {
	fs.mu.Lock()
	already := fs.closeSent
	fs.closeSent = true
	fs.mu.Unlock()
	if !already {
		fs.sendControl(negotiate.AppendClose(nil, fs.id, time.Now(), reason, "test"))
	}
}

// Hooks for tests.

// session waits for agent's current session.
func (d *fakeDaemon) session(agent string) *fakeSession {
	d.t.Helper()
	var fs *fakeSession
	d.waitFor(func() bool { fs = d.byAgent[agent]; return fs != nil }, "session of "+agent)
	return fs
}

// waitFor waits until cond (called with d.mu held) holds.
func (d *fakeDaemon) waitFor(cond func() bool, what string) {
	d.t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	for {
		d.mu.Lock()
		ok, ch := cond(), d.changed
		d.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			d.t.Fatalf("fake daemon: timed out waiting for %s", what)
		}
	}
}

func (d *fakeDaemon) closeReasons(agent string) []negotiate.CloseReason {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.closes[agent])
}

func (d *fakeDaemon) sessions() []*fakeSession {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*fakeSession, 0, len(d.all))
	for fs := range d.all {
		out = append(out, fs)
	}
	return out
}

// dropAll cuts every connection without CLOSE.
func (d *fakeDaemon) dropAll() {
	for _, fs := range d.sessions() {
		fs.conn.Close()
	}
}

// waitHangs waits until n "hang" requests are pending.
func (d *fakeDaemon) waitHangs(n int) {
	d.t.Helper()
	d.waitFor(func() bool { return len(d.hangs) >= n }, fmt.Sprintf("%d hanging requests", n))
}
