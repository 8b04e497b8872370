package ingress

import (
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/m2md/m2md/openai"
)

// capListener admits at most max connections at once, and perIP of one
// client IP, an IPv6 client's /64 (0: no bound). A connection over a cap is answered with a
// plain HTTP refusal and closed, so the client learns why at once and
// when to retry, instead of waiting in the accept queue.
type capListener struct {
	net.Listener
	max, perIP int

	mu   sync.Mutex
	open int
	byIP map[netip.Addr]int
}

func newCapListener(ln net.Listener, max, perIP int) *capListener {
	return &capListener{Listener: ln, max: max, perIP: perIP, byIP: map[netip.Addr]int{}}
}

// Refusals of a connection over a cap: the request on it is never read.
const (
	refuseGlobal = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: "
	refusePerIP  = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: "
)

var (
	refuseGlobalBody = openai.ErrorJSON("the endpoint holds its maximum of connections; retry", "server_error", "too_many_connections")
	refusePerIPBody  = openai.ErrorJSON("this address holds its maximum of connections to the endpoint; reuse them or retry", "rate_limit_error", "too_many_connections")
)

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		global, ok := l.admit(ip)
		if ok {
			return &capConn{Conn: c, l: l, ip: ip}, nil
		}
		// Answered in the background: a client that does not read must
		// not stall Accept.
		go refuse(c, global)
	}
}

func (l *capListener) admit(ip netip.Addr) (global, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.open >= l.max {
		return true, false
	}
	if l.perIP > 0 && l.byIP[ip] >= l.perIP {
		return false, false
	}
	l.open++
	l.byIP[ip]++
	return false, true
}

func (l *capListener) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

func refuse(c net.Conn, global bool) {
	head, body := refusePerIP, refusePerIPBody
	if global {
		head, body = refuseGlobal, refuseGlobalBody
	}
	c.SetDeadline(time.Now().Add(time.Second))
	c.Write([]byte(head + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body)))
	// Closed with the client's request unread, the connection would be
	// reset, and the reset can destroy the answer before the client reads
	// it: end our side, and drain what the client sent (bounded, within
	// the deadline) before closing.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		io.Copy(io.Discard, io.LimitReader(c, maxRefusedDrain))
	}
	c.Close()
}

// maxRefusedDrain bounds what is read from a refused connection.
const maxRefusedDrain = 256 << 10

// remoteIP is the client address a connection counts against: its IPv4
// address, or its IPv6 /64 (one host commonly holds a whole /64, and
// would otherwise have 2^64 allowances).
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return clientKey(ip.Unmap())
	}
	return netip.Addr{}
}

func clientKey(ip netip.Addr) netip.Addr {
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return ip
}

// capConn gives its slot back once, on the first Close.
type capConn struct {
	net.Conn
	l    *capListener
	ip   netip.Addr
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}
