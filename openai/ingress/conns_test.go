package ingress

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
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

// A refused connection is answered, not reset: a client whose request
// was in the socket when the refusal was written reads the 429 whole.
func TestCapRefusalNotReset(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newCapListener(tl, 0, 1)
	defer l.Close()
	held, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	c, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The request is in the endpoint's socket before either is accepted:
	// the refusal is written with it unread.
	if _, err := c.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n" + strings.Repeat("x", 65536))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	// Accept returns only admitted connections; it answers the refused
	// while it waits for the next.
	accepted := make(chan net.Conn, 2)
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	time.Sleep(100 * time.Millisecond) // the refusal arrives before the client reads
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 429") {
		t.Fatalf("refused connection: %q, %v", got, err)
	}
	l.Close()
	for c := range accepted {
		c.Close()
	}
}
