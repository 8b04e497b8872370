package daemon

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// TestMinimumSessionTimeout runs the real daemon over loopback with the
// protocol's minimum session timeout, 60 s, and pings at 50 s with 20 s
// for each PONG, on a clock 30 times faster (timeScale; the client sees
// the negotiated values). A client that sends nothing at all is closed
// with CLOSE TIMEOUT by the session timeout (60 s, 2 s here), before the
// keepalive would close it (50 + 3 × 20 s); one that answers every PING
// stays open past both, since a PONG counts as received.
func TestMinimumSessionTimeout(t *testing.T) {
	const scale = 30
	srv := runServer(t, Config{
		QUICAddr: "-", AdminAddr: "-", WSAddr: "127.0.0.1:0",
		CertDir:        t.TempDir(),
		SessionTimeout: time.Minute, PingInterval: 50 * time.Second, PongTimeout: 20 * time.Second,
		Logger:    zerolog.New(io.Discard),
		timeScale: scale,
	})

	dial := func(t *testing.T, id string) (transport.Conn, *negotiate.Session) {
		t.Helper()
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		conn, err := transport.DialWS(dctx, "ws://"+srv.WSAddr().String()+DefaultWSPath, nil, transport.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		hs, err := negotiate.NewHello(negotiate.ClientConfig{AgentID: id}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Send(dctx, transport.ControlChannel, hs.Message()); err != nil {
			t.Fatal(err)
		}
		msg, err := conn.Receive(dctx)
		if err != nil {
			t.Fatal(err)
		}
		defer msg.Release()
		sess, err := hs.Accept(msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		if p := sess.Params; p.SessionTimeout != time.Minute || p.PingInterval != 50*time.Second || p.PongTimeout != 20*time.Second {
			t.Fatalf("negotiated timers %v %v %v, want the configured ones", p.SessionTimeout, p.PingInterval, p.PongTimeout)
		}
		return conn, sess
	}
	// next returns the next control message, or nil when the connection
	// ends or nothing comes before the deadline.
	next := func(conn transport.Conn, deadline time.Time) *negotiate.ControlMessage {
		rctx, rcancel := context.WithDeadline(context.Background(), deadline)
		defer rcancel()
		for {
			msg, err := conn.Receive(rctx)
			if err != nil {
				return nil
			}
			cm, err := negotiate.ParseControl(msg.Data)
			msg.Release()
			if err == nil {
				return cm
			}
		}
	}

	t.Run("silent client", func(t *testing.T) {
		conn, _ := dial(t, "silent")
		start := time.Now()
		deadline := start.Add(10 * time.Second)
		for {
			cm := next(conn, deadline)
			if cm == nil {
				t.Fatalf("no CLOSE within %v", time.Since(start))
			}
			if cm.Type != negotiate.TypeClose {
				continue // PINGs, unanswered
			}
			el := time.Since(start) * scale
			if cm.Close.Reason != negotiate.ReasonTimeout {
				t.Fatalf("CLOSE %s, want TIMEOUT", cm.Close.Reason)
			}
			// The session timeout (60 s) acts, not the keepalive (110 s).
			if el < 55*time.Second || el > 90*time.Second {
				t.Fatalf("CLOSE TIMEOUT after %v (scaled), want about 60 s", el.Round(time.Second))
			}
			return
		}
	})

	t.Run("client answering PINGs", func(t *testing.T) {
		conn, sess := dial(t, "answering")
		start := time.Now()
		stay := 150 * time.Second / scale // past the session timeout and the keepalive's close
		pings := 0
		for time.Since(start) < stay {
			cm := next(conn, start.Add(stay))
			if cm == nil {
				break
			}
			switch cm.Type {
			case negotiate.TypePing:
				pings++
				pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := conn.Send(pctx, transport.ControlChannel, negotiate.AppendPong(nil, sess.ID, time.Now()))
				pcancel()
				if err != nil && !errors.Is(err, transport.ErrClosed) {
					t.Fatal(err)
				}
			case negotiate.TypeClose:
				t.Fatalf("CLOSE %s after %v (scaled) although every PING was answered", cm.Close.Reason, (time.Since(start) * scale).Round(time.Second))
			}
		}
		if pings < 2 {
			t.Fatalf("%d PINGs in %v (scaled), want at least 2", pings, stay*scale)
		}
	})
}
