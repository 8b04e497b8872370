package integration

import (
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
// byte, and cut closes every relayed connection at once.
// A black-holed chunk is read and dropped, so neither side's TCP sees
// anything but silence.
type tcpRelay struct {
	ln       net.Listener
	target   string
	darkUp   atomic.Bool
	darkDown atomic.Bool
	// hold stops the relay reading either side: bytes wait in the
	// kernels' buffers and flow on, whole and in order, when it is
	// cleared (a stalled path or process; dark loses them instead).
	hold atomic.Bool

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
			go r.pump(back, front, &r.darkUp)
			go r.pump(front, back, &r.darkDown)
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
// dark is set.
func (r *tcpRelay) pump(dst, src net.Conn, dark *atomic.Bool) {
	defer r.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		for r.hold.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		n, err := src.Read(buf)
		if n > 0 && !dark.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
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
