package daemon

import (
	"net"
	"net/netip"
	"sync"
)

// Limit names of connections refused at accept (m2md_limited_total).
const (
	limitHandshakes      = "handshakes"
	limitHandshakesPerIP = "handshakes_per_ip"
)

// handshakes bounds the TCP connections that have not completed HELLO, in
// total and per source address, at accept: before net/http reads a byte of
// them, so that connections that never upgrade (or never say HELLO) cannot
// spend the daemon's descriptors and memory. A connection counts from
// accept until its session is established or it closes. The admin listener
// is not counted, so /metrics answers while the cap is hit, and established
// sessions are not either.
type handshakes struct {
	max, perIP int // <= 0: unlimited

	mu      sync.Mutex
	total   int
	byIP    map[netip.Addr]int
	pending map[string]*pendingConn // by remote address, to find at HELLO
}

func newHandshakes(max, perIP int) *handshakes {
	return &handshakes{max: max, perIP: perIP, byIP: make(map[netip.Addr]int), pending: make(map[string]*pendingConn)}
}

// take counts a new connection from addr, or names the limit it exceeds.
func (h *handshakes) take(c net.Conn) (*pendingConn, string) {
	ip := addrIP(c.RemoteAddr())
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.max > 0 && h.total >= h.max {
		return nil, limitHandshakes
	}
	if h.perIP > 0 && h.byIP[ip] >= h.perIP {
		return nil, limitHandshakesPerIP
	}
	h.total++
	h.byIP[ip]++
	p := &pendingConn{Conn: c, h: h, ip: ip, key: c.RemoteAddr().String()}
	h.pending[p.key] = p
	return p, ""
}

// established ends the count of the connection with this remote address:
// its session has completed HELLO. Unknown addresses (QUIC) are ignored.
func (h *handshakes) established(remote net.Addr) {
	h.mu.Lock()
	p := h.pending[remote.String()]
	h.mu.Unlock()
	if p != nil {
		p.done()
	}
}

func (h *handshakes) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// pendingConn is an accepted connection counted by handshakes until its
// session is established or it is closed.
type pendingConn struct {
	net.Conn
	h    *handshakes
	ip   netip.Addr
	key  string
	once sync.Once
}

func (p *pendingConn) done() {
	p.once.Do(func() {
		h := p.h
		h.mu.Lock()
		h.total--
		if h.byIP[p.ip]--; h.byIP[p.ip] <= 0 {
			delete(h.byIP, p.ip)
		}
		if h.pending[p.key] == p {
			delete(h.pending, p.key)
		}
		h.mu.Unlock()
	})
}

func (p *pendingConn) Close() error {
	p.done()
	return p.Conn.Close()
}

// limitedListener refuses, by closing them at once, the connections
// handshakes does not take.
type limitedListener struct {
	net.Listener
	h       *handshakes
	refused func(limit string, remote net.Addr)
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, limit := l.h.take(c)
		if limit == "" {
			return p, nil
		}
		// Closed before anything is read: the peer sees the connection
		// reset or closed, which is all a connection that may be an
		// attacker's can be told cheaply.
		l.refused(limit, c.RemoteAddr())
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
}
