package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// TestMaxSessionsConcurrentHellos: 200 connections (half QUIC, half
// WebSocket) send HELLO at the same moment to a daemon allowing 50
// sessions: exactly 50 are accepted, the rest get REJECT SERVER_BUSY, and
// the daemon never holds more than 50.
func TestMaxSessionsConcurrentHellos(t *testing.T) {
	const max, n = 50, 200
	d := startDaemon(t, func(c *daemon.Config) { c.MaxSessions = max })
	conns := make([]transport.Conn, n)
	for i := range conns {
		conns[i] = dialConn(t, d, transports[i%2])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		wg             sync.WaitGroup
		start          = make(chan struct{})
		mu             sync.Mutex
		accepted, busy int
		in             []transport.Conn
		other          []error
	)
	for i, c := range conns {
		wg.Go(func() {
			hs, err := negotiate.NewHello(negotiate.ClientConfig{AgentID: fmt.Sprintf("cap-%d", i)}, time.Now())
			if err != nil {
				t.Error(err)
				return
			}
			<-start
			err = c.Send(ctx, transport.ControlChannel, hs.Message())
			if err == nil {
				var msg transport.Message
				if msg, err = c.Receive(ctx); err == nil {
					_, err = hs.Accept(msg.Data)
					msg.Release()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted++
				in = append(in, c)
			case errors.Is(err, negotiate.ErrServerBusy):
				busy++
			default:
				other = append(other, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("%d handshakes failed otherwise, first: %v", len(other), other[0])
	}
	if accepted != max || busy != n-max {
		t.Fatalf("%d accepted, %d SERVER_BUSY; want %d and %d", accepted, busy, max, n-max)
	}
	waitSessions(t, d, max)
	// A session that leaves frees its place for the next.
	in[0].Close()
	in[1].Close()
	waitSessions(t, d, max-2)
	for _, tr := range transports {
		mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "cap-late-" + tr})
	}
	if _, err := dialRaw(t, d, "ws", negotiate.ClientConfig{AgentID: "cap-over"}); !errors.Is(err, negotiate.ErrServerBusy) {
		t.Fatalf("session %d: %v, want SERVER_BUSY", max+1, err)
	}
}

// TestRejectWaitsForSlowReader: a QUIC client that reads its REJECT only
// 3 s after sending HELLO (a loaded machine, a busy agent) still gets
// SERVER_BUSY. QUIC discards what the peer has not read when a connection
// closes, so the daemon must linger for its close timeout (5 s) before
// closing; it lingered only the transport's 2 s, and such a client saw
// its connection drop instead (TestMaxSessionsConcurrentHellos under
// load).
func TestRejectWaitsForSlowReader(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(c *daemon.Config) { c.MaxSessions = 1 })
	mustDialRaw(t, d, "quic", negotiate.ClientConfig{AgentID: "slow-reject-holder"})
	_, ctl := rawQUICControl(t, d)
	writeFramed(t, ctl, helloBytes(t, negotiate.ClientConfig{AgentID: "slow-reject"}, time.Now()))
	time.Sleep(3 * time.Second) // the REJECT waits unread in quic-go's buffer
	ctl.SetReadDeadline(time.Now().Add(5 * time.Second))
	cm := readControl(t, ctl)
	if cm.Type != negotiate.TypeReject || cm.Reject.Code != negotiate.RejectServerBusy {
		t.Fatalf("got %s %+v, want REJECT SERVER_BUSY", cm.Type, cm.Reject)
	}
}
