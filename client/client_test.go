package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/daemontest"
	"github.com/m2md/m2md/internal/leakcheck"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// leakCheck makes t fail if client or transport goroutines outlive it: it
// runs after every other cleanup (clients closed, fake daemon stopped).
func leakCheck(t *testing.T) {
	leakcheck.Check(t, "m2md/m2md/client.", "m2md/m2md/transport.")
}

var modes = []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD}

func TestHandshakeAndEcho(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	for _, tr := range transports {
		for _, mode := range modes {
			t.Run(tr+"/"+mode.String(), func(t *testing.T) {
				c := dial(t, d, tr, Options{Security: mode})
				info := c.Session()
				if !negotiate.ValidSessionID(info.ID) || info.Transport != tr || info.Params.SecurityMode != mode {
					t.Fatalf("session %+v", info)
				}
				if info.Params.Authenticated {
					t.Fatal("authenticated without an org")
				}
				// A small body (stored) and a large one (Brotli) both come
				// back byte for byte.
				large := chatRequest("echo", strings.Repeat("the quick brown fox ", 5000))
				for _, body := range [][]byte{chatRequest("echo", "hi"), large} {
					resp, err := c.Do(testCtx(t), body)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(resp.Body, body) || resp.Chunks != nil || resp.From != "models" {
						t.Fatalf("echo: got %d bytes from %q, want %d", len(resp.Body), resp.From, len(body))
					}
				}
				st := c.Stats()
				if st.Requests != 2 || st.Replies != 2 || st.FramesSent != 2 || st.FramesReceived != 2 {
					t.Fatalf("stats %+v", st)
				}
				if st.SendRatio() < 10 || st.ReceiveRatio() < 10 {
					t.Fatalf("compression: send %.2f, receive %.2f; the repetitive body should shrink >10x", st.SendRatio(), st.ReceiveRatio())
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func TestAuthentication(t *testing.T) {
	leakCheck(t)
	master := bytes.Repeat([]byte{7}, 32)
	d := startDaemonWith(t, func(c *daemon.Config) { c.OrgSecrets = map[string]security.Secret{"acme": master} },
		Options{Org: "acme", OrgSecret: master})
	key, err := security.AgentKey(master, "acme", "alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"agent key", Options{AgentID: "alice", Org: "acme", AgentKey: key[:], Security: frame.SecurityAEAD}},
		{"org secret", Options{AgentID: "alice", Org: "acme", OrgSecret: master, Security: frame.SecurityHMAC}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, d, "quic", tc.opts)
			if !c.Session().Params.Authenticated {
				t.Fatal("session not authenticated")
			}
			if _, err := c.Do(testCtx(t), chatRequest("echo", "x")); err != nil {
				t.Fatal(err)
			}
			c.Close()
		})
	}
	t.Run("wrong key", func(t *testing.T) {
		_, err := Dial(testCtx(t), d.url("quic"), Options{AgentID: "alice", Org: "acme", AgentKey: make([]byte, 32), PinSHA256: d.fingerprint()})
		if !errors.Is(err, negotiate.ErrSecurityPolicy) {
			t.Fatalf("got %v, want SECURITY_POLICY", err)
		}
	})
	t.Run("no key", func(t *testing.T) {
		_, err := Dial(testCtx(t), d.url("ws"), Options{PinSHA256: d.fingerprint()})
		if !errors.Is(err, negotiate.ErrSecurityPolicy) {
			t.Fatalf("got %v, want SECURITY_POLICY", err)
		}
	})
}

func TestDialErrors(t *testing.T) {
	leakCheck(t)
	d := startDaemonWith(t, func(c *daemon.Config) { c.MinSecurity = frame.SecurityHMAC }, Options{})
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		url  string
		opts Options
		want error
	}{
		{"policy", d.url("quic"), Options{PinSHA256: d.fingerprint()}, negotiate.ErrSecurityPolicy},
		{"wrong pin", d.url("quic"), Options{PinSHA256: strings.Repeat("ab", 32), Security: frame.SecurityAEAD}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dial(ctx, tc.url, tc.opts)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		url  string
		opts Options
	}{
		{"http://x:1", Options{}},
		{"quic://", Options{}},
		{"quic://x:1/path", Options{}},
		{"ws://x:1/m2m", Options{AgentID: "bad id"}},
		{"ws://x:1/m2m", Options{AgentKey: make([]byte, 32)}},
		{"ws://x:1/m2m", Options{Org: "acme"}},
		{"ws://x:1/m2m", Options{Org: "acme", AgentKey: make([]byte, 5)}},
		{"ws://x:1/m2m", Options{Org: "acme", AgentKey: make([]byte, 32), OrgSecret: make([]byte, 32)}},
		{"ws://x:1/m2m", Options{Models: []string{""}}},
		{"ws://x:1/m2m", Options{MaxPayload: 10}},
		{"wss://x:1/m2m", Options{PinSHA256: "zz"}},
	} {
		if _, err := Dial(ctx, tc.url, tc.opts); err == nil {
			t.Errorf("Dial(%q, %+v) succeeded", tc.url, tc.opts)
		}
	}
}

func TestStreamOrder(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := dial(t, d, tr, Options{Security: frame.SecurityAEAD})
			const n = 200
			body := []byte(fmt.Sprintf(`{"model":"stream","max_tokens":%d,"messages":[]}`, n))
			st, err := c.Stream(testCtx(t), body)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				got, err := st.Recv()
				if err != nil {
					t.Fatalf("chunk %d: %v", i, err)
				}
				if want := fmt.Sprintf(`{"i":%d}`, i); string(got) != want {
					t.Fatalf("chunk %d = %s, want %s", i, got, want)
				}
			}
			for range 2 {
				if _, err := st.Recv(); err != io.EOF {
					t.Fatalf("after the last chunk: %v, want io.EOF", err)
				}
			}
			st.Close()

			// Do collects the chunks.
			resp, err := c.Do(testCtx(t), body)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Chunks) != n-1 || string(resp.Body) != fmt.Sprintf(`{"i":%d}`, n-1) || string(resp.Chunks[7]) != `{"i":7}` {
				t.Fatalf("Do: %d chunks, final %s", len(resp.Chunks), resp.Body)
			}
		})
	}
}

// TestStreamBuffered checks that Buffered counts the replies that have
// arrived and not been read: what a relay may write before it flushes.
func TestStreamBuffered(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := dial(t, d, tr, Options{Security: frame.SecurityAEAD})
			const n = 20
			st, err := c.Stream(testCtx(t), []byte(fmt.Sprintf(`{"model":"stream","max_tokens":%d,"messages":[]}`, n)))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for deadline := time.Now().Add(10 * time.Second); st.Buffered() < n; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("Buffered = %d after 10 s, want %d", st.Buffered(), n)
				}
			}
			for i := range n {
				if got := st.Buffered(); got != n-i {
					t.Fatalf("before reply %d: Buffered = %d, want %d", i, got, n-i)
				}
				if _, final, err := st.Next(); err != nil || final != (i == n-1) {
					t.Fatalf("reply %d: final %v, %v", i, final, err)
				}
			}
			if got := st.Buffered(); got != 0 {
				t.Fatalf("after the final reply: Buffered = %d", got)
			}
		})
	}
}

func TestConcurrentRequests(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := dial(t, d, tr, Options{Security: frame.SecurityHMAC})
			const workers, each = 32, 20
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						body := chatRequest("echo", fmt.Sprintf("worker %d request %d %s", w, i, strings.Repeat("x", (w*each+i)%300)))
						resp, err := c.Do(testCtx(t), body)
						if err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(resp.Body, body) {
							errs <- fmt.Errorf("worker %d request %d: reply is another request's", w, i)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if st := c.Stats(); st.Requests != workers*each || st.BadFrames != 0 || st.LateReplies != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestContextCancel(t *testing.T) {
	leakCheck(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			d := startDaemon(t)
			c := dial(t, d, tr, Options{Security: frame.SecurityAEAD})
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := c.Do(ctx, chatRequest("hang", "x"))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want DeadlineExceeded", err)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("Do returned %v after its deadline", el)
			}
			// A Stream abandoned by Close.
			st, err := c.Stream(testCtx(t), chatRequest("hang", "y"))
			if err != nil {
				t.Fatal(err)
			}
			st.Close()
			if _, err := st.Recv(); err == nil {
				t.Fatal("Recv after Close succeeded")
			}
			d.waitHeld(t, 2)
			d.releaseHeld()
			// The late replies are dropped and counted; the channels they
			// held are reusable and the sequence numbers still line up.
			deadline := time.Now().Add(testTimeout)
			for c.Stats().LateReplies < 2 {
				if time.Now().After(deadline) {
					t.Fatalf("late replies not counted: %+v", c.Stats())
				}
				time.Sleep(5 * time.Millisecond)
			}
			for range 5 {
				if _, err := c.Do(testCtx(t), chatRequest("echo", "after")); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestRemoteErrors(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	c := dial(t, d, "quic", Options{Security: frame.SecurityHMAC})
	for _, tc := range []struct {
		body     []byte
		opts     []CallOption
		code     negotiate.ErrorCode
		fromPeer string
	}{
		{chatRequest("error", "x"), nil, "test_error", "models"},
		{chatRequest("nobody-serves-this", "x"), nil, negotiate.CodeNoRoute, ""},
		{chatRequest("echo", "x"), []CallOption{To("ghost")}, negotiate.CodeUnknownAgent, ""},
	} {
		_, err := c.Do(testCtx(t), tc.body, tc.opts...)
		var re *RemoteError
		if !errors.As(err, &re) || re.Code != tc.code || re.From != tc.fromPeer || re.Type != "m2md_error" {
			t.Fatalf("got %v, want RemoteError %s", err, tc.code)
		}
	}
	var re *RemoteError
	_, err := c.Do(testCtx(t), chatRequest("error", "x"))
	if !errors.As(err, &re) || re.Message != "boom" || !strings.Contains(err.Error(), "test_error: boom") {
		t.Fatalf("got %v", err)
	}
}

func TestBadFrames(t *testing.T) {
	leakCheck(t)
	d := newFakeDaemon(t, fakeConfig{})
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			c := dial(t, d, "ws", Options{Security: mode})
			_, err := c.Do(testCtx(t), chatRequest("garbage", "x"))
			if !errors.Is(err, ErrBadFrame) || !errors.Is(err, frame.ErrChecksum) {
				t.Fatalf("got %v, want ErrBadFrame wrapping frame.ErrChecksum", err)
			}
			// A frame of no known form is refused as the daemon refuses
			// one (docs/protocol.md §4), not taken for TokenNative.
			if _, err := c.Do(testCtx(t), chatRequest("unknown-form", "x")); !errors.Is(err, ErrBadFrame) || !errors.Is(err, negotiate.ErrUnknownFrame) {
				t.Fatalf("got %v, want ErrBadFrame wrapping negotiate.ErrUnknownFrame", err)
			}
			// The session carries on.
			if _, err := c.Do(testCtx(t), chatRequest("echo", "x")); err != nil {
				t.Fatal(err)
			}
			if c.Stats().BadFrames != 2 {
				t.Fatalf("stats %+v", c.Stats())
			}
		})
	}
}

func TestRequestErrors(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	c := dial(t, d, "quic", Options{Security: frame.SecurityAEAD, MaxPayload: 4096})
	if got := c.Session().Params.MaxPayload; got != 4096 {
		t.Fatalf("max payload %d", got)
	}
	if _, err := c.Do(testCtx(t), []byte(`{"model":`)); !errors.Is(err, frame.ErrInvalidJSON) {
		t.Fatalf("invalid JSON: %v", err)
	}
	// Incompressible: Brotli cannot bring it under the limit.
	big := make([]byte, 0, 8000)
	big = append(big, `{"model":"echo","messages":[{"role":"user","content":"`...)
	x := uint32(1)
	for range 10000 {
		x = x*1664525 + 1013904223
		big = append(big, "abcdefghijklmnopqrstuvwxyz0123456789"[x>>24%36])
	}
	big = append(big, `"}]}`...)
	if _, err := c.Do(testCtx(t), big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("large request: %v", err)
	}
	if _, err := c.Do(testCtx(t), chatRequest("echo", "x"), To("not an id")); err == nil {
		t.Fatal("bad To accepted")
	}
	if st := c.Stats(); st.Requests != 0 || st.FramesSent != 0 {
		t.Fatalf("refused requests were sent: %+v", st)
	}
	// Nothing was numbered for them: the next request verifies.
	if _, err := c.Do(testCtx(t), chatRequest("echo", "x")); err != nil {
		t.Fatal(err)
	}
}

func TestPingAnswered(t *testing.T) {
	leakCheck(t)
	d := newFakeDaemon(t, fakeConfig{})
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			c := dial(t, d, tr, Options{AgentID: "pinged-" + tr})
			fs := d.session(c.AgentID())
			for range 3 {
				fs.sendControl(negotiate.AppendPing(nil, fs.id, time.Now()))
				select {
				case <-d.pongs:
				case <-time.After(testTimeout):
					t.Fatal("no PONG")
				}
			}
		})
	}
}

// TestTimers covers what takes the protocol's real seconds (timers are at
// least 1 s, the CLOSE acknowledgement 5 s), in parallel.
func TestTimers(t *testing.T) {
	leakCheck(t)
	timers := negotiate.ServerConfig{SessionTimeout: time.Minute, PingInterval: time.Second, PongTimeout: time.Second}
	t.Run("keepalive answered", func(t *testing.T) {
		t.Parallel()
		d := newFakeDaemon(t, fakeConfig{server: timers})
		c := dial(t, d, "quic", Options{})
		deadline := time.Now().Add(testTimeout)
		for d.pings.Load() < 2 {
			if time.Now().After(deadline) {
				t.Fatal("client did not PING a silent daemon")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := c.Do(testCtx(t), chatRequest("echo", "x")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("keepalive missed", func(t *testing.T) {
		t.Parallel()
		d := newFakeDaemon(t, fakeConfig{server: timers, noPong: true})
		c := dial(t, d, "ws", Options{AgentID: "lonely"})
		select {
		case <-c.Done():
		case <-time.After(testTimeout):
			t.Fatal("session survived three missed PONGs")
		}
		// PINGs at 1, 2 and 3 s of silence, CLOSE TIMEOUT at 4 s.
		if n := d.pings.Load(); n != negotiate.MaxMissedPongs {
			t.Errorf("%d PINGs, want %d", n, negotiate.MaxMissedPongs)
		}
		d.waitFor(func() bool { return len(d.closes["lonely"]) > 0 }, "CLOSE")
		if r := d.closeReasons("lonely"); r[0] != negotiate.ReasonTimeout {
			t.Errorf("CLOSE reasons %v", r)
		}
		if err := c.Err(); !errors.Is(err, ErrClosed) || !errors.Is(err, errKeepalive) {
			t.Errorf("Err() = %v", err)
		}
	})
	t.Run("close not acknowledged", func(t *testing.T) {
		t.Parallel()
		d := newFakeDaemon(t, fakeConfig{noCloseAck: true})
		c := dial(t, d, "quic", Options{})
		start := time.Now()
		err := c.Close()
		el := time.Since(start)
		if !errors.Is(err, errNoAck) {
			t.Fatalf("Close: %v, want no-ack error", err)
		}
		if el < negotiate.CloseTimeout-100*time.Millisecond || el > negotiate.CloseTimeout+3*time.Second {
			t.Fatalf("Close took %v, want about %v", el, negotiate.CloseTimeout)
		}
	})
}

func TestClose(t *testing.T) {
	leakCheck(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			d := startDaemon(t)
			c := dial(t, d, tr, Options{})
			st, err := c.Stream(testCtx(t), chatRequest("hang", "x"))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			// The daemon got CLOSE CLIENT_SHUTDOWN (and nothing else ended).
			d.WaitMetric(t, 1, "m2md_sessions_closed_total", "reason=client_shutdown")
			if n := d.Metric(t, "m2md_sessions_closed_total"); n != 1 {
				t.Fatalf("%v sessions closed, want 1", n)
			}
			if _, err := st.Recv(); !errors.Is(err, ErrClosed) {
				t.Fatalf("in-flight request: %v, want ErrClosed", err)
			}
			if _, err := c.Do(testCtx(t), chatRequest("echo", "x")); !errors.Is(err, ErrClosed) {
				t.Fatalf("Do after Close: %v", err)
			}
			select {
			case <-c.Done():
			default:
				t.Fatal("Done not closed")
			}
			if err := c.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if c.Session().ID != "" {
				t.Fatal("session after Close")
			}
		})
	}
}

// TestReconnect runs on the fake daemon: it needs the client's connection
// dropped while the daemon stays silent. The real daemon, even crashing,
// may tell the requester agent_gone before the connection goes.
// TestProviderReconnects covers a provider's comeback on the real daemon.
func TestReconnect(t *testing.T) {
	leakCheck(t)
	d := newFakeDaemon(t, fakeConfig{})
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			agent := "prov-" + tr
			prov := dial(t, d, tr, Options{
				AgentID: agent, Models: []string{"model-" + tr}, Security: frame.SecurityAEAD,
				Reconnect: true, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
			})
			firstID := prov.Session().ID

			inflight := make(chan error, 1)
			go func() {
				_, err := prov.Do(testCtx(t), chatRequest("hang", "x"))
				inflight <- err
			}()
			d.waitHangs(1)
			d.mu.Lock()
			d.hangs = nil
			d.mu.Unlock()
			d.session(agent).conn.Close()

			select {
			case err := <-inflight:
				if !errors.Is(err, ErrConnectionLost) {
					t.Fatalf("in-flight request: %v, want ErrConnectionLost", err)
				}
			case <-time.After(testTimeout):
				t.Fatal("in-flight request hangs after the connection dropped")
			}
			// The second HELLO announces the models again.
			d.waitFor(func() bool { return d.hellos[agent] == 2 && d.byAgent[agent] != nil }, "second HELLO")
			if m := d.session(agent).models; !slices.Equal(m, []string{"model-" + tr}) {
				t.Fatalf("models after reconnecting: %q", m)
			}
			if _, err := prov.Do(testCtx(t), chatRequest("echo", "z")); err != nil {
				t.Fatal(err)
			}
			if id := prov.Session().ID; id == "" || id == firstID {
				t.Fatalf("session id %q after reconnecting (was %q)", id, firstID)
			}
			if n := prov.Stats().Reconnects; n != 1 {
				t.Fatalf("%d reconnects", n)
			}
		})
	}
}

// TestProviderReconnects: a provider whose daemon went away serves its
// model again on the daemon that comes back.
func TestProviderReconnects(t *testing.T) {
	leakCheck(t)
	cert := sameCert(t)
	d := startDaemonWith(t, cert, Options{})
	reconnect := Options{Reconnect: true, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond, Security: frame.SecurityAEAD}
	provOpts := reconnect
	provOpts.AgentID, provOpts.Models = "comeback", []string{"comeback-model"}
	provOpts.Handler = HandlerFunc(func(ctx context.Context, req *Request, w ResponseWriter) {
		w.Respond([]byte(`{"id":"chatcmpl-1","choices":[]}`))
	})
	prov := dial(t, d, "quic", provOpts)
	req := dial(t, d, "ws", reconnect)
	if _, err := req.Do(testCtx(t), chatRequest("comeback-model", "x")); err != nil {
		t.Fatal(err)
	}
	provFirst, reqFirst := prov.Session().ID, req.Session().ID

	d.crash(t)
	d2 := restart(t, d, cert)
	waitSession(t, prov, d2, provFirst)
	waitSession(t, req, d2, reqFirst)
	if _, err := req.Do(testCtx(t), chatRequest("comeback-model", "y")); err != nil {
		t.Fatal(err)
	}
	if n := prov.Stats().Reconnects; n != 1 {
		t.Fatalf("%d reconnects", n)
	}
}

func TestServerShutdownReconnects(t *testing.T) {
	leakCheck(t)
	d := newFakeDaemon(t, fakeConfig{})
	c := dial(t, d, "ws", Options{AgentID: "survivor", Reconnect: true, ReconnectMin: 10 * time.Millisecond})
	d.session("survivor").sendClose(negotiate.ReasonServerShutdown)
	// The client acknowledges with the same reason, then comes back.
	d.waitFor(func() bool { return len(d.closes["survivor"]) == 1 }, "CLOSE ack")
	if r := d.closeReasons("survivor"); r[0] != negotiate.ReasonServerShutdown {
		t.Fatalf("ack reason %v", r)
	}
	d.waitFor(func() bool { return d.hellos["survivor"] == 2 }, "reconnection")
	if _, err := c.Do(testCtx(t), chatRequest("echo", "x")); err != nil {
		t.Fatal(err)
	}
}

func TestReplacedDoesNotReconnect(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	opts := Options{AgentID: "twin", Reconnect: true, ReconnectMin: 5 * time.Millisecond, ReconnectMax: 10 * time.Millisecond}
	first := dial(t, d, "quic", opts)
	second := dial(t, d, "ws", opts)
	select {
	case <-first.Done():
	case <-time.After(testTimeout):
		t.Fatal("replaced client still running")
	}
	var ce *negotiate.CloseError
	if err := first.Err(); !errors.Is(err, ErrClosed) || !errors.As(err, &ce) || ce.Reason != negotiate.ReasonReplaced {
		t.Fatalf("Err() = %v", err)
	}
	if _, err := first.Do(testCtx(t), chatRequest("echo", "x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do on a replaced client: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // many backoff periods
	// Had it reconnected, it would have replaced the second in turn.
	if n := first.Stats().Reconnects; n != 0 || !d.SessionOpen(second.Session().ID) {
		t.Fatalf("the replaced client reconnected (%d times)", n)
	}
	if n := d.Metric(t, "m2md_sessions_total"); n != 3 { // with "models"
		t.Fatalf("%v sessions, want 3", n)
	}
	if _, err := second.Do(testCtx(t), chatRequest("echo", "x")); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNoReconnectByDefault(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	c := dial(t, d, "quic", Options{AgentID: "once"})
	d.crash(t)
	select {
	case <-c.Done():
	case <-time.After(testTimeout):
		t.Fatal("client did not notice the dropped connection")
	}
	if _, err := c.Do(testCtx(t), chatRequest("echo", "x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do: %v", err)
	}
	if c.Session().ID != "" {
		t.Fatal("session still reported")
	}
}

func TestWaitsWhileReconnecting(t *testing.T) {
	leakCheck(t)
	cert := sameCert(t)
	d := startDaemonWith(t, cert, Options{})
	c := dial(t, d, "ws", Options{AgentID: "patient", Reconnect: true, ReconnectMin: 200 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	first := c.Session().ID
	d.crash(t)
	for deadline := time.Now().Add(testTimeout); c.Session().ID == first; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("client did not notice the dropped connection")
		}
	}
	d2 := restart(t, d, cert)
	// Issued during the backoff, served by the next session.
	if _, err := c.Do(testCtx(t), chatRequest("echo", "x")); err != nil {
		t.Fatal(err)
	}
	if id := c.Session().ID; id == "" || id == first || !d2.SessionOpen(id) {
		t.Fatal("no second session")
	}
	// Bounded by the context when the daemon does not come back.
	d2.Cancel()
	for deadline := time.Now().Add(testTimeout); c.Session().ID != ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("client did not notice the daemon stopping")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Do(ctx, chatRequest("echo", "x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do without a daemon: %v", err)
	}
}

func TestProtocolViolation(t *testing.T) {
	leakCheck(t)
	d := newFakeDaemon(t, fakeConfig{})
	for name, msg := range map[string]security.Secret{
		"unknown kind": {0x07, 1, 2},
		"bad control":  append([]byte{0x01}, `{"type":"PING"}`...),
		"hello again":  append([]byte{0x01}, `{"type":"HELLO","payload":{},"timestamp":1}`...),
	} {
		t.Run(name, func(t *testing.T) {
			agent := "victim-" + strings.ReplaceAll(name, " ", "-")
			c := dial(t, d, "quic", Options{AgentID: agent})
			d.session(agent).sendControl(msg)
			select {
			case <-c.Done():
			case <-time.After(testTimeout):
				t.Fatal("client ignored a protocol violation")
			}
			if r := d.closeReasons(agent); len(r) != 1 || r[0] != negotiate.ReasonError {
				t.Fatalf("CLOSE reasons %v, want [ERROR]", r)
			}
		})
	}
}

func TestBoundedBuffers(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	const n = 100
	body := []byte(fmt.Sprintf(`{"model":"stream","max_tokens":%d,"messages":[]}`, n))
	t.Run("slow stream reader", func(t *testing.T) {
		c := dial(t, d, "quic", Options{StreamBuffer: 1000})
		st, err := c.Stream(testCtx(t), body)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		// Read nothing until every chunk has arrived.
		for deadline := time.Now().Add(testTimeout); ; time.Sleep(time.Millisecond) {
			if s := c.Stats(); s.Replies == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replies did not arrive: %+v", c.Stats())
			}
		}
		got := 0
		for {
			b, err := st.Recv()
			if err != nil {
				if !errors.Is(err, ErrSlowConsumer) {
					t.Fatalf("after %d chunks: %v, want ErrSlowConsumer", got, err)
				}
				break
			}
			if want := fmt.Sprintf(`{"i":%d}`, got); string(b) != want {
				t.Fatalf("chunk %s, want %s", b, want)
			}
			got++
		}
		if got == 0 || got >= n || c.Stats().LateReplies != uint64(n-got) {
			t.Fatalf("%d chunks kept, stats %+v", got, c.Stats())
		}
		// The channel went back to the pool with the END: the next request works.
		if _, err := c.Do(testCtx(t), chatRequest("echo", "x")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Do response size", func(t *testing.T) {
		c := dial(t, d, "ws", Options{MaxResponseSize: 200})
		if _, err := c.Do(testCtx(t), body); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("got %v, want ErrTooLarge", err)
		}
		if _, err := c.Do(testCtx(t), chatRequest("echo", "x")); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSeveralURLs: a client given several daemon URLs (a cluster's nodes)
// skips one that is down at Dial, and when its daemon goes away reconnects
// to the next one in the list.
func TestSeveralURLs(t *testing.T) {
	leakCheck(t)
	// The same certificate on both, as a cluster's nodes would have.
	cert := sameCert(t)
	d1 := daemontest.Start(t, cert)
	d2 := startDaemonWith(t, cert, Options{})
	dead := "ws://127.0.0.1:1/m2m" // nothing listens: refused at once
	c, err := Dial(testCtx(t), dead+","+d1.URL("ws")+", "+d2.URL("ws"), Options{
		AgentID: "roamer", PinSHA256: d1.Fingerprint(),
		Reconnect: true, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !d1.SessionOpen(c.Session().ID) {
		t.Fatal("no session on the second URL")
	}
	d1.Cancel()
	if ok, err := d1.Wait(testTimeout); !ok || err != nil {
		t.Fatalf("daemon stopped: %v %v", ok, err)
	}
	for deadline := time.Now().Add(testTimeout); !d2.SessionOpen(c.Session().ID); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("session did not move to the third URL")
		}
	}
	if _, err := c.Do(testCtx(t), chatRequest("echo", "after the move")); err != nil {
		t.Fatal(err)
	}
	if n := c.Stats().Reconnects; n != 1 {
		t.Fatalf("%d reconnects, want 1", n)
	}

	// Every URL down: Dial reports each failure.
	_, err = Dial(testCtx(t), dead+","+dead, Options{})
	if err == nil || !strings.Contains(err.Error(), "none of 2 daemon URLs") {
		t.Fatalf("Dial with no daemon: %v", err)
	}
	if _, err := Dial(testCtx(t), d2.URL("ws")+",ftp://x", Options{}); err == nil {
		t.Fatal("a bad URL in the list was accepted")
	}
}

// TestRepliesOvertakenByClose: over QUIC the daemon's last replies travel
// on their own streams and can arrive after its CLOSE (a graceful
// shutdown sends CLOSE right behind them). The client acknowledges the
// CLOSE and still hands such a reply to its request; the session ends with
// the CLOSE's reason once the daemon closes the connection. The fake
// daemon sends the reply only after the acknowledgement, so the overtaking
// is certain.
func TestRepliesOvertakenByClose(t *testing.T) {
	leakCheck(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			hold := make(chan struct{})
			d := newFakeDaemon(t, fakeConfig{holdAfterAck: hold})
			var once sync.Once
			release := func() { once.Do(func() { close(hold) }) }
			defer release()
			c := dial(t, d, tr, Options{AgentID: "overtaken"})
			done := make(chan error, 1)
			go func() {
				_, err := c.Do(testCtx(t), chatRequest("hang", "x"))
				done <- err
			}()
			d.waitHangs(1)
			h := d.hangs[0]
			h.fs.sendClose(negotiate.ReasonServerShutdown)
			d.waitFor(func() bool { return len(d.closes["overtaken"]) == 1 }, "CLOSE ack")
			reply, err := frame.AppendEncode(nil, []byte(`{"id":"chatcmpl-x","choices":[{"message":{"content":"ok"}}]}`), frame.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.fs.sendFrame(h.ch, negotiate.FlagReply|negotiate.FlagEnd, h.id, "", reply); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("a reply sent before the daemon's CLOSE (arriving after it): %v", err)
			}
			release()
			select {
			case <-c.Done():
			case <-time.After(testTimeout):
				t.Fatal("session still open after the daemon closed")
			}
			var ce *negotiate.CloseError
			if err := c.Err(); !errors.As(err, &ce) || ce.Reason != negotiate.ReasonServerShutdown {
				t.Fatalf("Err() = %v, want CLOSE SERVER_SHUTDOWN", err)
			}
		})
	}
}
