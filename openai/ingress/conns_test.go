package ingress

import (
	"io"
	"net"
	"testing"
)

// pipeListener hands out one end of a pipe per address, as if a client at
// that address had connected.
type pipeListener struct {
	addrs []string
	peers []net.Conn
}

type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

func (l *pipeListener) Accept() (net.Conn, error) {
	if len(l.addrs) == 0 {
		return nil, io.EOF
	}
	a := l.addrs[0]
	l.addrs = l.addrs[1:]
	ours, theirs := net.Pipe()
	l.peers = append(l.peers, theirs)
	// The refusal is read and dropped, as a client would.
	go io.Copy(io.Discard, theirs)
	return addrConn{Conn: ours, remote: &net.TCPAddr{IP: net.ParseIP(a), Port: 1}}, nil
}
func (l *pipeListener) Close() error   { return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// The per-IP cap counts an IPv6 client by its /64: a second address of
// the same /64 is over a cap of one, one of another /64 is not; IPv4
// addresses count one by one.
func TestCapPerIPv6Prefix(t *testing.T) {
	pl := &pipeListener{addrs: []string{"2001:db8::1", "2001:db8::2", "2001:db8:0:1::1", "192.0.2.1", "192.0.2.2"}}
	l := newCapListener(pl, 0, 1)
	var got []string
	for range 4 {
		c, err := l.Accept()
		if err != nil {
			break
		}
		got = append(got, c.RemoteAddr().(*net.TCPAddr).IP.String())
		defer c.Close()
	}
	want := []string{"2001:db8::1", "2001:db8:0:1::1", "192.0.2.1", "192.0.2.2"}
	if len(got) != len(want) {
		t.Fatalf("admitted %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("admitted %v, want %v", got, want)
		}
	}
	for _, p := range pl.peers {
		p.Close()
	}
}
