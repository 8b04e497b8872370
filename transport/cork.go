package transport

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/m2md/m2md/internal/bufpool"
)

// corkMax is the most a corked connection holds before it writes: a batch
// larger than this goes out in corkMax pieces, one system call each. 64 KiB
// is 64 one-kilobyte messages per call, where the call's fixed cost is
// long amortised, and it keeps what a session pins while writing small.
const corkMax = 64 << 10

// corkConn is the net.Conn under a WebSocket connection. coder/websocket
// flushes its buffered writer at the end of every message, which is one
// write system call per message; corkConn lets the messages of a batch
// collect instead and leave in one call when the batch ends (Conn.Uncork).
//
// It never waits for more messages to arrive: bytes are held only while a
// Cork or a Send is under way, and the one that ends last writes them. A
// Write with nothing under way (the library's PONG and close frames
// outside any batch) goes straight through, behind whatever is held.
//
// Writes come from one goroutine at a time (the library serialises its
// frame writes, and TLS its records); flush may run concurrently with them
// from the goroutine that ends a batch. wmu orders the system calls; mu
// guards only the held bytes, so a batch keeps collecting while the
// previous one is being written (group commit: senders that arrive during
// a write leave together in the next).
type corkConn struct {
	net.Conn

	// corks counts the Corks and Sends under way.
	corks atomic.Int32
	// through makes every Write go straight out: set once the connection
	// is closing, so that the closing handshake never waits on a batch
	// (Close may be called from inside one).
	through atomic.Bool
	// writes counts the write system calls made (the metric batching
	// lowers; tests read it).
	writes atomic.Uint64
	// written counts the bytes the connection took.
	written atomic.Uint64

	wmu sync.Mutex // held while writing to Conn; taken before mu

	mu   sync.Mutex
	held *[]byte // from bufpool while bytes are held; nil otherwise
	err  error   // the first write error: the stream is broken after it
}

func newCorkConn(nc net.Conn) *corkConn { return &corkConn{Conn: nc} }

func (c *corkConn) Write(p []byte) (int, error) {
	if c.corks.Load() > 0 && !c.through.Load() && len(p) < corkMax {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		if c.held == nil {
			c.held = bufpool.Get(corkMax)
			*c.held = (*c.held)[:0]
		}
		if len(*c.held)+len(p) <= cap(*c.held) {
			*c.held = append(*c.held, p...)
			c.mu.Unlock()
			return len(p), nil
		}
		c.mu.Unlock()
		// Full: write what is held, then hold p in a fresh buffer. Only
		// this goroutine appends, so nothing can come between.
		if err := c.flush(); err != nil {
			return 0, err
		}
		c.mu.Lock()
		c.held = bufpool.Get(corkMax)
		*c.held = append((*c.held)[:0], p...)
		c.mu.Unlock()
		return len(p), nil
	}
	// Nothing under way, closing, or a frame as large as the cork: write
	// it straight out, behind whatever is held.
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writeHeldLocked(); err != nil {
		return 0, err
	}
	return c.writeLocked(p)
}

// flush writes what is held.
func (c *corkConn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeHeldLocked()
}

// writeHeldLocked writes the held bytes, if any, and returns their buffer
// to the pool: an idle connection pins none. The caller holds wmu.
func (c *corkConn) writeHeldLocked() error {
	c.mu.Lock()
	b, err := c.held, c.err
	c.held = nil
	c.mu.Unlock()
	if err != nil || b == nil {
		bufpool.Put(b)
		return err
	}
	if len(*b) > 0 {
		_, err = c.writeLocked(*b)
	}
	bufpool.Put(b)
	return err
}

// writeLocked writes p to the connection; the caller holds wmu.
func (c *corkConn) writeLocked(p []byte) (int, error) {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	// In corkMax pieces, so that written shows a large frame going out as
	// the peer takes it (transport.WriteProgress).
	var n int
	for err == nil && n < len(p) {
		var k int
		c.writes.Add(1)
		k, err = c.Conn.Write(p[n:min(n+corkMax, len(p))])
		n += k
		c.written.Add(uint64(k))
	}
	if err != nil {
		c.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
	}
	return n, err
}

// cork and uncork bracket a batch; uncork of the last one writes what is
// held.
func (c *corkConn) cork() { c.corks.Add(1) }

func (c *corkConn) uncork() error {
	if n := c.corks.Add(-1); n > 0 {
		return nil
	} else if n < 0 {
		panic("transport: Uncork without Cork")
	}
	return c.flush()
}

// closing sends everything held and makes later writes go straight out.
func (c *corkConn) closing() error {
	c.through.Store(true)
	return c.flush()
}

// corkingResponseWriter hands coder/websocket a hijacked connection wrapped
// in a corkConn. The library takes the connection and its buffered writer
// from Hijack, so this is the one place to slip the cork under it on the
// daemon's side.
type corkingResponseWriter struct {
	http.ResponseWriter
	cork *corkConn
}

func (w *corkingResponseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.cork = newCorkConn(nc)
	// net/http gives a fresh writer over the raw connection, with nothing
	// buffered (the 101 response went out before Hijack returned); aim it
	// at the cork instead, keeping its buffer.
	brw.Writer.Reset(w.cork)
	return w.cork, brw, nil
}

func (w *corkingResponseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
