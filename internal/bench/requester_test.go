package bench

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/transport"
)

// heldEcho is a transport.Conn whose peer echoes every request, but only
// when the test releases the echoes, all at once: they are then all
// "already received" together, as replies that arrive in one read are.
type heldEcho struct {
	mu      sync.Mutex
	corks   int
	inBatch int   // messages sent under the current outermost Cork
	batches []int // messages per outermost Cork that sent any
	sent    [][]byte
	ready   [][]byte // released echoes, not yet received
	signal  chan struct{}
	sentSig chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func newHeldEcho() *heldEcho {
	return &heldEcho{signal: make(chan struct{}, 1), sentSig: make(chan struct{}, 1), closed: make(chan struct{})}
}

func (c *heldEcho) Receive(ctx context.Context) (transport.Message, error) {
	for {
		c.mu.Lock()
		if len(c.ready) > 0 {
			m := c.ready[0]
			c.ready = c.ready[1:]
			c.mu.Unlock()
			return transport.Message{Data: m}, nil
		}
		c.mu.Unlock()
		select {
		case <-c.signal:
		case <-ctx.Done():
			return transport.Message{}, ctx.Err()
		case <-c.closed:
			return transport.Message{}, transport.ErrClosed
		}
	}
}

func (c *heldEcho) Send(_ context.Context, _ transport.ChannelID, msg []byte) error {
	c.mu.Lock()
	c.sent = append(c.sent, append([]byte(nil), msg...))
	if c.corks == 0 {
		c.batches = append(c.batches, 1) // a write of its own
	} else {
		c.inBatch++
	}
	c.mu.Unlock()
	select {
	case c.sentSig <- struct{}{}:
	default:
	}
	return nil
}

func (c *heldEcho) Cork() {
	c.mu.Lock()
	c.corks++
	c.mu.Unlock()
}

func (c *heldEcho) Uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corks--; c.corks == 0 && c.inBatch > 0 {
		c.batches = append(c.batches, c.inBatch)
		c.inBatch = 0
	}
	return nil
}

// release echoes every request sent so far, at once, and returns the
// batches recorded until then.
func (c *heldEcho) release() []int {
	c.mu.Lock()
	c.ready = append(c.ready, c.sent...)
	c.sent = nil
	b := c.batches
	c.batches = nil
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
	return b
}

// waitSent waits until n requests have been sent since the last release
// and no Cork is open, so that every batch they were sent in is recorded.
func (c *heldEcho) waitSent(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		got, open := len(c.sent), c.corks > 0
		c.mu.Unlock()
		if got >= n && !open {
			return
		}
		select {
		case <-c.sentSig:
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d of %d requests sent", got, n)
		}
	}
}

func (c *heldEcho) AcquireChannel(context.Context) (transport.ChannelID, error) { return 0, nil }
func (c *heldEcho) ReleaseChannel(transport.ChannelID)                          {}
func (c *heldEcho) SetReadLimit(int64)                                          {}
func (c *heldEcho) Transport() string                                           { return TransportWS }
func (c *heldEcho) RemoteAddr() net.Addr                                        { return &net.TCPAddr{} }
func (c *heldEcho) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// TestClosedLoopNextRequestsInOneBatch: in a closed loop, the replies that
// arrive together are answered with the workers' next requests in one
// batch (one system call), sent by the reader inside its Cork, not by each
// worker woken in turn.
func TestClosedLoopNextRequestsInOneBatch(t *testing.T) {
	const workers = 8
	conn := newHeldEcho()
	clk := newClock()
	ps := []prepared{{name: "p", frame: []byte("payload")}}
	r := newRequester(conn, &tagWire{conn: conn}, nil, ps, newRecorder(clk), clk, workers, 10*time.Second)
	r.start(false)
	ctx, cancel := context.WithCancel(context.Background())
	stop := clk.now() + int64(time.Hour)
	r.chain.Store(&closedChain{ctx: ctx, stop: stop, payload: func() int { return 0 }})
	dones := make([]chan string, workers)
	loop := make(chan struct{})
	go func() {
		defer close(loop)
		closedLoop(ctx, clk, workers, stop, func(ctx context.Context, w int, at int64) bool {
			if dones[w] == nil {
				dones[w] = make(chan string, 1)
			}
			return r.roundTrip(ctx, at, 0, dones[w])
		})
	}()
	conn.waitSent(t, workers) // the workers' first requests
	conn.release()
	for round := range 3 {
		conn.waitSent(t, workers)
		batches := conn.release()
		if len(batches) != 1 || batches[0] != workers {
			t.Errorf("round %d: %d next requests left in batches %v, want one batch", round, workers, batches)
		}
	}
	cancel()
	r.stop(reasonConnectionLost)
	<-loop
}

func (c *heldEcho) Abort() { c.Close() }

// TestRequestAfterCloseFailsAsClosed: once the reader has ended the
// requests in flight because the daemon sent CLOSE, and closed the
// connection, a worker's next request (woken by a reply read before the
// CLOSE) fails as session_closed too, not as connection_lost: the
// generator closed that connection itself.
func TestRequestAfterCloseFailsAsClosed(t *testing.T) {
	conn := newHeldEcho()
	clk := newClock()
	rec := newRecorder(clk)
	rec.setWindow(0, int64(time.Hour), time.Second)
	ps := []prepared{{name: "p", frame: []byte("payload")}}
	r := newRequester(conn, &tagWire{conn: conn}, nil, ps, rec, clk, 2, 10*time.Second)
	done := make(chan string, 1)
	// What readLoop does on CLOSE.
	r.failAll(reasonSessionClosed)
	conn.Close()
	if r.send(clk.now(), 0, done, noChannel) {
		t.Fatal("a request went out after the session was closed")
	}
	if reason := <-done; reason != reasonSessionClosed {
		t.Errorf("the request after CLOSE failed with %q, want %q", reason, reasonSessionClosed)
	}
	if res := rec.result(); res.ErrorsByReason[reasonSessionClosed] != 1 || res.Errors != 1 {
		t.Errorf("errors %d %v, want one %s", res.Errors, res.ErrorsByReason, reasonSessionClosed)
	}
	if n := r.inFlight(); n != 0 {
		t.Errorf("%d requests in flight after the session closed", n)
	}
}
