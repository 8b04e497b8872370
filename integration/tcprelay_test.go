package integration

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// tcpRelay stands between WebSocket agents and the daemon on loopback, as
// a network path does, and can fail as one: darkUp black-holes what the
// agents send, darkDown what the daemon sends (both: a machine that
// vanished without a FIN or RST), hold stalls both ways without losing a
// byte, delay makes the path long, cutUpAfter and cutDownAfter close it
// in the middle of whatever is passing, and cut closes every relayed
// connection at once. A black-holed chunk is read and dropped, so neither
// side's TCP sees anything but silence.
type tcpRelay struct {
	ln       net.Listener
	target   string
	darkUp   atomic.Bool
	darkDown atomic.Bool
	// hold stops the relay reading either side: bytes wait in the
	// kernels' buffers and flow on, whole and in order, when it is
	// cleared (a stalled path or process; dark loses them instead).
	hold atomic.Bool
	// delay holds each chunk this long after it was read before passing
	// it on, in order (nanoseconds).
	delay atomic.Int64
	// cutUpAfter and cutDownAfter, when positive, are the bytes still
	// passed that way (up: from the agents) before every relayed
	// connection is closed: a connection lost mid-message.
	cutUpAfter, cutDownAfter atomic.Int64

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newTCPRelay(t testing.TB, target net.Addr) *tcpRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &tcpRelay{ln: ln, target: target.String()}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			front, err := ln.Accept()
			if err != nil {
				return
			}
			back, err := net.Dial("tcp", r.target)
			if err != nil {
				front.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, front, back)
			r.mu.Unlock()
			r.wg.Add(2)
			go r.pump(back, front, &r.darkUp, &r.cutUpAfter)
			go r.pump(front, back, &r.darkDown, &r.cutDownAfter)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		r.hold.Store(false)
		r.cut()
		r.wg.Wait()
	})
	return r
}

// pump copies src to dst until either fails, dropping what arrives while
// dark is set; a writer passes on what it reads after the relay's delay,
// and closes every relayed connection once cutAfter is spent.
func (r *tcpRelay) pump(dst, src net.Conn, dark *atomic.Bool, cutAfter *atomic.Int64) {
	defer r.wg.Done()
	defer dst.Close()
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 64)
	stopped := make(chan struct{}) // the writer has given up
	go func() {
		defer close(stopped)
		for c := range q {
			time.Sleep(time.Until(c.at.Add(time.Duration(r.delay.Load()))))
			if left := cutAfter.Load(); left > 0 {
				if int64(len(c.b)) >= left && cutAfter.CompareAndSwap(left, 0) {
					_, _ = dst.Write(c.b[:left])
					r.cut()
					return
				}
				cutAfter.Add(-int64(len(c.b)))
			}
			if _, err := dst.Write(c.b); err != nil {
				src.Close()
				return
			}
		}
	}()
	defer func() {
		close(q)
		<-stopped
	}()
	buf := make([]byte, 32<<10)
	for {
		for r.hold.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		n, err := src.Read(buf)
		if n > 0 && !dark.Load() {
			select {
			case q <- chunk{bytes.Clone(buf[:n]), time.Now()}:
			case <-stopped:
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			return
		}
	}
}

// dark black-holes both directions (or lets them through again).
func (r *tcpRelay) dark(on bool) {
	r.darkUp.Store(on)
	r.darkDown.Store(on)
}

// cut closes every relayed connection.
func (r *tcpRelay) cut() {
	r.mu.Lock()
	conns := r.conns
	r.conns = nil
	r.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// faultPath is the relay a test's agent reaches the daemon through, for
// either transport: the UDP relay for QUIC, the TCP relay for WebSocket.
type faultPath struct {
	tr  string
	udp *udpRelay
	tcp *tcpRelay
}

func newFaultPath(t testing.TB, d *testDaemon, tr string) *faultPath {
	t.Helper()
	if tr == "quic" {
		return &faultPath{tr: tr, udp: newUDPRelay(t, d.QUICAddr(), 0)}
	}
	return &faultPath{tr: tr, tcp: newTCPRelay(t, d.WSAddr())}
}

// dark black-holes both directions.
func (p *faultPath) dark(on bool) {
	if p.udp != nil {
		p.udp.dark.Store(on)
		return
	}
	p.tcp.dark(on)
}

// darkWay black-holes one direction: up, what the agent sends.
func (p *faultPath) darkWay(up, on bool) {
	switch {
	case p.udp != nil && up:
		p.udp.darkUp.Store(on)
	case p.udp != nil:
		p.udp.darkDown.Store(on)
	case up:
		p.tcp.darkUp.Store(on)
	default:
		p.tcp.darkDown.Store(on)
	}
}

// setDelay holds everything passing either way for d.
func (p *faultPath) setDelay(d time.Duration) {
	if p.udp != nil {
		p.udp.delay.Store(int64(d))
		return
	}
	p.tcp.delay.Store(int64(d))
}

// cutAfter loses the path after n more bytes one way (up: from the
// agent): TCP closes both connections, QUIC's datagrams stop both ways.
func (p *faultPath) cutAfter(up bool, n int64) {
	switch {
	case p.udp != nil && up:
		p.udp.cutUpAfter.Store(n)
	case p.udp != nil:
		p.udp.cutDownAfter.Store(n)
	case up:
		p.tcp.cutUpAfter.Store(n)
	default:
		p.tcp.cutDownAfter.Store(n)
	}
}

// url is the daemon's URL through the relay.
func (p *faultPath) url() string {
	if p.udp != nil {
		return "quic://" + p.udp.addr()
	}
	return "ws://" + p.tcp.ln.Addr().String() + daemon.DefaultWSPath
}

// dialRaw is a raw agent of d whose connection goes through the relay.
func (p *faultPath) dialRaw(t testing.TB, d *testDaemon, cc negotiate.ClientConfig) *rawAgent {
	t.Helper()
	if p.udp != nil {
		return dialRelayedQUIC(t, d, p.udp, cc, transport.Config{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := transport.DialWS(ctx, p.url(), nil, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := handshakeRaw(t, d, conn, cc)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
