package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// FuzzRemoteError: any error reply body gives a *RemoteError or ErrBadFrame,
// and bodies m2md writes come back with their code and message.
func FuzzRemoteError(f *testing.F) {
	f.Add([]byte(frame.AppendErrorBody(nil, "no_route", "no agent serves gpt-4o")))
	f.Add([]byte(`{"error":{"message":"Rate limit","type":"requests","param":null,"code":"rate_limit_exceeded"}}`))
	f.Add([]byte(`{"error":{"message":null,"code":429}}`))
	f.Add([]byte(`{"error":"flat"}`))
	f.Add([]byte(`{"error":{"code":"\ud83d\ude00"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		re, err := parseRemoteError("p", body)
		if (re == nil) == (err == nil) {
			t.Fatalf("re %v, err %v", re, err)
		}
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		_ = re.Error()
		// Round trip through the writer m2md uses.
		again, err := parseRemoteError("p", frame.AppendErrorBody(nil, string(re.Code), re.Message))
		if err != nil {
			t.Fatal(err)
		}
		if string(again.Code) != toValidUTF8(string(re.Code)) || again.Message != toValidUTF8(re.Message) {
			t.Fatalf("round trip: %+v, want %+v", again, re)
		}
	})
}

func toValidUTF8(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		out = append(out, r)
	}
	return string(out)
}

// FuzzReceiveData drives the client's receive path (DATA header, frame
// verification and sequence check, dispatch to a waiting request or to the
// handler, decoding, error replies) with arbitrary DATA messages, in each
// security mode. Frames the fuzzer marks are protected with the daemon's
// key first, so the decoding behind verification is reached too. Nothing
// may panic, every reply must reach the request or be counted as dropped,
// and a refused frame must be reported as ErrBadFrame.
func FuzzReceiveData(f *testing.F) {
	echo, _ := frame.AppendEncode(nil, chatRequest("echo", "hello"), frame.Limits{})
	resp, _ := frame.AppendEncode(nil, []byte(`{"id":"chatcmpl-1","choices":[{"finish_reason":"stop","message":{"content":"hi there, this reply is long enough to be compressed by brotli, which starts at 100 bytes"}}]}`), frame.Limits{})
	errFr, _ := frame.AppendErrorFrame(nil, "no_route", "nobody")
	withBlock, _ := frame.AppendEncodeExt(nil, chatRequest("echo", "hello"), frame.Extension{DocID: 3, BaseID: 2}, frame.Limits{})
	replyDelta, _ := frame.AppendEncodeReplyDelta(nil, []byte(`{"id":"chatcmpl-1","choices":[{"finish_reason":"stop"}]}`), []byte{0x20, 0x05, 1, 2}, frame.Limits{})
	for _, fr := range [][]byte{echo, resp, errFr, withBlock, replyDelta, {frame.CompactMarker, 0x08, 0x01, 0, 0, 0, 0, 0x20}, {0x00, 0x81, 0x01}, []byte("#M2M|1|"), []byte("#M2M|1|\x14\x00\x01")} {
		for mode := range byte(3) {
			for _, flags := range []byte{0x00, 0x01, 0x03, 0x07} {
				f.Add(mode, flags, uint64(1), true, fr)
			}
		}
	}
	f.Add(byte(2), byte(3), uint64(1), false, echo)
	f.Fuzz(func(t *testing.T, mode, flags byte, id uint64, protect bool, fr []byte) {
		fs := newFuzzSession(t, modes[int(mode)%len(modes)])
		defer fs.s.end(ErrClosed)
		cl := newCall(fs.s, 1, 0)
		if err := fs.s.addCall(cl); err != nil {
			t.Fatal(err)
		}
		fr = append([]byte(nil), fr...)
		if protect && fs.daemon.Protected() && isM2M(fr) {
			if p, err := fs.daemon.Seal(0, fr); err == nil {
				fr = p
			}
		}
		msg, err := negotiate.AppendData(nil, negotiate.DataFlags(flags), id, "", fr)
		if err != nil {
			msg = append([]byte{byte(negotiate.KindData), flags}, fr...)
		}
		fs.s.handleData(transport.Message{Data: msg})
		fs.s.c.handlers.Wait()

		cl.mu.Lock()
		queued := len(cl.queue)
		cl.mu.Unlock()
		st := fs.s.c.Stats()
		if queued > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			stream := &Stream{ctx: ctx, cl: cl}
			body, err := stream.Recv()
			var re *RemoteError
			switch {
			case err == nil:
				if len(body) == 0 {
					t.Fatal("empty body without error")
				}
			case errors.As(err, &re), errors.Is(err, ErrBadFrame), errors.Is(err, ErrUnsupportedFrame):
			default:
				t.Fatalf("unexpected error %v", err)
			}
		}
		if st.Replies+st.LateReplies+st.Deliveries+st.Notices > 1 {
			t.Fatalf("one message counted more than once: %+v", st)
		}
	})
}

type fuzzSession struct {
	s      *session
	daemon *negotiate.Sealer // seals frames as the daemon would
}

var (
	fuzzSessionsOnce sync.Once
	fuzzSessions     [3][2]*negotiate.Session // per mode: the client's session, the daemon's
	fuzzSessionsErr  error
)

// newFuzzSession builds an established session over a connection that
// swallows what is sent, with frame keys from a real handshake.
func newFuzzSession(t *testing.T, mode frame.Security) *fuzzSession {
	fuzzSessionsOnce.Do(func() {
		srv, err := negotiate.NewServer(negotiate.ServerConfig{})
		if err != nil {
			fuzzSessionsErr = err
			return
		}
		for _, m := range modes {
			now := time.Now()
			hs, err := negotiate.NewHello(negotiate.ClientConfig{AgentID: "fuzz", Security: m}, now)
			if err != nil {
				fuzzSessionsErr = err
				return
			}
			daemon, accept, err := srv.Accept(now, hs.Message(), false)
			if err != nil {
				fuzzSessionsErr = err
				return
			}
			cs, err := hs.Accept(accept)
			if err != nil {
				fuzzSessionsErr = err
				return
			}
			fuzzSessions[m] = [2]*negotiate.Session{cs, daemon}
		}
	})
	if fuzzSessionsErr != nil {
		t.Fatal(fuzzSessionsErr)
	}
	c := &Client{
		cfg: &config{Options: Options{
			AgentID: "fuzz", MaxConcurrentHandlers: 4, StreamBuffer: DefaultStreamBuffer, MaxResponseSize: DefaultMaxResponseSize,
			Handler: HandlerFunc(func(ctx context.Context, req *Request, w ResponseWriter) { w.Respond(req.Body) }),
		}},
		sem:     make(chan struct{}, 4),
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
	c.life, c.lifeCancel = context.WithCancel(context.Background())
	t.Cleanup(c.lifeCancel)
	now := time.Now()
	params := negotiate.Negotiated{
		Algorithms: []negotiate.Algorithm{negotiate.AlgorithmM2M}, MaxPayload: 1 << 20, SecurityMode: mode,
		SessionTimeout: negotiate.DefaultSessionTimeout, PingInterval: negotiate.DefaultPingInterval, PongTimeout: negotiate.DefaultPongTimeout,
	}
	m := negotiate.NewMachine(negotiate.RoleClient, now)
	if err := m.HelloSent(now); err != nil {
		t.Fatal(err)
	}
	if err := m.Established(params, now); err != nil {
		t.Fatal(err)
	}
	s := &session{
		c: c, conn: &sinkConn{}, m: m, mode: mode, maxPayload: params.MaxPayload,
		poke:  make(chan struct{}, 1),
		chans: make(map[transport.ChannelID]*channel), calls: make(map[uint64]*call),
		deliveries: make(map[uint64]*delivery), done: make(chan struct{}),
		info:   SessionInfo{ID: "sess_fuzzfuzzfuzzfuzzfuzz", Params: params},
		encLim: frame.Limits{MaxMessage: params.MaxPayload - 64}, decLim: frame.Limits{MaxMessage: params.MaxPayload},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	fs := &fuzzSession{s: s}
	var err error
	if s.send, s.recv, err = fuzzSessions[mode][0].Sealers(16); err != nil {
		t.Fatal(err)
	}
	if fs.daemon, _, err = fuzzSessions[mode][1].Sealers(16); err != nil {
		t.Fatal(err)
	}
	// Feature compact on both ends: what the daemon seals with a block
	// reaches the client in the compact form (docs/protocol.md §4.5).
	s.recv.EnableCompact()
	fs.daemon.EnableCompact()
	return fs
}

// sinkConn is a connection that accepts every Send and never receives.
type sinkConn struct{ sent atomic.Int64 }

func (c *sinkConn) Receive(ctx context.Context) (transport.Message, error) {
	<-ctx.Done()
	return transport.Message{}, ctx.Err()
}
func (c *sinkConn) Send(ctx context.Context, ch transport.ChannelID, msg []byte) error {
	c.sent.Add(1)
	return nil
}
func (c *sinkConn) AcquireChannel(context.Context) (transport.ChannelID, error) { return 0, nil }
func (c *sinkConn) Cork()                                                       {}
func (c *sinkConn) Uncork() error                                               { return nil }
func (c *sinkConn) ReleaseChannel(transport.ChannelID)                          {}
func (c *sinkConn) SetReadLimit(int64)                                          {}
func (c *sinkConn) Transport() string                                           { return "sink" }
func (c *sinkConn) RemoteAddr() net.Addr                                        { return nil }
func (c *sinkConn) Close() error                                                { return nil }

func (c *sinkConn) Abort() { c.Close() }
