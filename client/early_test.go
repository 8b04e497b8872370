package client

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// scriptConn is a connection whose daemon side is a script: onHello turns
// the client's HELLO into the messages the client then receives, in that
// order, which is how a test can make DATA overtake ACCEPT as QUIC streams
// may. Everything else the client sends is collected in sent.
type scriptConn struct {
	onHello func(hello []byte) []transport.Message
	inbox   chan transport.Message
	sent    chan transport.Message
	done    chan struct{}
	once    sync.Once

	// Cork bookkeeping: the depth now, how often it went back to zero (a
	// batch written), and how many DATA Sends were made outside any Cork.
	corkMu     sync.Mutex
	corks      int
	batches    int
	uncorkedTx int
	batchEnded chan struct{} // a token each time the depth goes back to zero
}

func newScriptConn(onHello func([]byte) []transport.Message) *scriptConn {
	return &scriptConn{onHello: onHello, inbox: make(chan transport.Message, 64), sent: make(chan transport.Message, 64), done: make(chan struct{}), batchEnded: make(chan struct{}, 1)}
}

func (c *scriptConn) Receive(ctx context.Context) (transport.Message, error) {
	// As the transports do, a message already there wins over an ended
	// context (which is how the reader polls).
	select {
	case m := <-c.inbox:
		return m, nil
	default:
	}
	select {
	case m := <-c.inbox:
		return m, nil
	case <-c.done:
		return transport.Message{}, transport.ErrClosed
	case <-ctx.Done():
		return transport.Message{}, ctx.Err()
	}
}

func (c *scriptConn) Send(ctx context.Context, ch transport.ChannelID, msg []byte) error {
	msg = bytes.Clone(msg)
	if k, _ := negotiate.MessageKind(msg); k == negotiate.KindData {
		c.corkMu.Lock()
		if c.corks == 0 {
			c.uncorkedTx++
		}
		c.corkMu.Unlock()
	}
	if k, _ := negotiate.MessageKind(msg); k == negotiate.KindControl {
		cm, err := negotiate.ParseControl(msg)
		switch {
		case err != nil:
		case cm.Type == negotiate.TypeHello:
			for _, m := range c.onHello(msg) {
				c.inbox <- m
			}
			return nil
		case cm.Type == negotiate.TypeClose: // acknowledge
			c.inbox <- transport.Message{Data: negotiate.AppendClose(nil, cm.SessionID, time.Now(), cm.Close.Reason, "")}
			return nil
		}
	}
	select {
	case c.sent <- transport.Message{Channel: ch, Data: msg}:
		return nil
	case <-c.done:
		return transport.ErrClosed
	}
}

func (c *scriptConn) AcquireChannel(context.Context) (transport.ChannelID, error) { return 4, nil }
func (c *scriptConn) Cork() {
	c.corkMu.Lock()
	c.corks++
	c.corkMu.Unlock()
}

func (c *scriptConn) Uncork() error {
	c.corkMu.Lock()
	defer c.corkMu.Unlock()
	if c.corks--; c.corks == 0 {
		c.batches++
		select {
		case c.batchEnded <- struct{}{}:
		default: // a token is already waiting
		}
	}
	if c.corks < 0 {
		panic("Uncork without Cork")
	}
	return nil
}

func (c *scriptConn) ReleaseChannel(transport.ChannelID) {}
func (c *scriptConn) SetReadLimit(int64)                 {}
func (c *scriptConn) Transport() string                  { return "quic" }
func (c *scriptConn) RemoteAddr() net.Addr               { return nil }
func (c *scriptConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}

// A request delivered on a daemon stream that arrives before ACCEPT is kept
// and served once the session exists, not taken for a broken handshake.
func TestDataBeforeAccept(t *testing.T) {
	leakCheck(t)
	srv, err := negotiate.NewServer(negotiate.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	body := chatRequest("m", "early bird")
	var daemonSend, daemonRecv *negotiate.Sealer
	conn := newScriptConn(func(hello []byte) []transport.Message {
		ns, accept, err := srv.Accept(time.Now(), hello, false)
		if err != nil {
			t.Error(err)
			return nil
		}
		if daemonSend, daemonRecv, err = ns.Sealers(0); err != nil {
			t.Error(err)
			return nil
		}
		fr, _ := frame.AppendEncode(nil, body, frame.Limits{})
		fr, _ = daemonSend.Seal(1, fr)
		data, _ := negotiate.AppendData(nil, 0, 77, "someone", fr)
		return []transport.Message{{Channel: 1, Data: data}, {Channel: transport.ControlChannel, Data: accept}}
	})

	cfg, err := newConfig("quic://127.0.0.1:1", Options{Security: frame.SecurityAEAD, InsecureSkipVerifyDevOnly: true,
		Handler: HandlerFunc(func(ctx context.Context, req *Request, w ResponseWriter) {
			if req.From != "someone" || req.ID != 77 {
				t.Errorf("request %+v", req)
			}
			w.Respond(req.Body)
		})})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(cfg)
	c.dialer = func(context.Context) (transport.Conn, error) { return conn, nil }
	if err := c.run(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()

	select {
	case m := <-conn.sent:
		hdr, fr, err := negotiate.ParseData(m.Data)
		if err != nil || m.Channel != 1 || hdr.RequestID != 77 || hdr.Flags != negotiate.FlagReply|negotiate.FlagEnd {
			t.Fatalf("reply %+v on %d: %v", hdr, m.Channel, err)
		}
		plain, err := daemonRecv.Open(1, fr) // the reply is the channel's first frame
		if err != nil {
			t.Fatal(err)
		}
		got, err := frame.AppendDecode(nil, plain, frame.Limits{})
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("reply %s, %v", got, err)
		}
	case <-time.After(testTimeout):
		t.Fatal("the early request was not served")
	}
}

// Deliveries that have already arrived are answered inside one Cork of the
// reader: a burst of refusals is one batch (one system call on WebSocket),
// and no DATA is sent outside a Cork.
func TestReaderAnswersBurstInOneBatch(t *testing.T) {
	leakCheck(t)
	srv, err := negotiate.NewServer(negotiate.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const n = 20
	conn := newScriptConn(func(hello []byte) []transport.Message {
		_, accept, err := srv.Accept(time.Now(), hello, false)
		if err != nil {
			t.Error(err)
			return nil
		}
		msgs := []transport.Message{{Channel: transport.ControlChannel, Data: accept}}
		for i := range n {
			fr, _ := frame.AppendEncode(nil, chatRequest("m", "burst"), frame.Limits{})
			frame.SetSequence(fr, 1, uint32(i+1))
			data, _ := negotiate.AppendData(nil, 0, uint64(100+i), "someone", fr)
			msgs = append(msgs, transport.Message{Channel: transport.ChannelID(i + 1), Data: data})
		}
		return msgs
	})
	// No handler: every delivery is refused, by the reader itself.
	cfg, err := newConfig("quic://127.0.0.1:1", Options{InsecureSkipVerifyDevOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(cfg)
	c.dialer = func(context.Context) (transport.Conn, error) { return conn, nil }
	if err := c.run(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range n {
		select {
		case m := <-conn.sent:
			hdr, _, err := negotiate.ParseData(m.Data)
			if err != nil || hdr.RequestID != uint64(100+i) {
				t.Fatalf("refusal %d: %+v, %v", i, hdr, err)
			}
		case <-time.After(testTimeout):
			t.Fatalf("refusal %d not sent", i)
		}
	}
	// A Send is seen before the Uncork that ends its batch: wait until no
	// Cork is open, so that the last batch has been counted. Every refusal
	// was sent inside a Cork (checked below), so the depth is back to zero
	// only once the batch holding the last one has ended.
	for {
		conn.corkMu.Lock()
		open := conn.corks
		conn.corkMu.Unlock()
		if open == 0 {
			break
		}
		select {
		case <-conn.batchEnded: // buffered: an Uncork since the check is not missed
		case <-time.After(testTimeout):
			t.Fatal("the batch holding the refusals never ended (Cork without Uncork)")
		}
	}
	conn.corkMu.Lock()
	defer conn.corkMu.Unlock()
	if conn.uncorkedTx != 0 {
		t.Fatalf("%d DATA messages sent outside a Cork", conn.uncorkedTx)
	}
	if conn.batches != 1 {
		t.Fatalf("%d refusals went out in %d batches, want 1", n, conn.batches)
	}
}

func (c *scriptConn) Abort() { c.Close() }
