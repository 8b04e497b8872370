package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// wsFrameHeader is a masked client frame header for opcode with payload
// length n (mask key zero, so the payload goes as is).
func wsFrameHeader(fin bool, opcode byte, n uint64) []byte {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	h := []byte{b0, 0}
	switch {
	case n < 126:
		h[1] = byte(n)
	case n <= 0xFFFF:
		h[1] = 126
		h = binary.BigEndian.AppendUint16(h, uint16(n))
	default:
		h[1] = 127
		h = binary.BigEndian.AppendUint64(h, n)
	}
	h[1] |= 0x80
	return append(h, 0, 0, 0, 0)
}

// rawWSServer upgrades a hand-made TCP connection to the handler and
// returns it with the server's Conn.
func rawWSServer(t *testing.T, cfg Config) (net.Conn, Conn) {
	t.Helper()
	accepted := make(chan Conn, 1)
	stop := make(chan struct{})
	srv := httptest.NewServer(NewWSHandler(cfg, func(c Conn) {
		accepted <- c
		<-stop
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	nc, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	req := "GET /m2m HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: m2m.v1\r\n\r\n"
	if _, err := nc.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	select {
	case c := <-accepted:
		t.Cleanup(func() { c.Close() })
		t.Cleanup(func() { nc.Close() }) // first: Close need not wait for this peer
		return nc, c
	case <-time.After(testTimeout):
		t.Fatal("no connection accepted")
		return nil, nil
	}
}

// TestWSOversizedRefusedFromHeader: a message announced above the read
// limit, in one frame (up to the absurd 2^63-1) or as fragments whose
// running total passes it, is refused from its frame headers: Receive
// fails with ErrMessageTooLarge at once although none (or only the first
// fragment) of the body has been sent.
func TestWSOversizedRefusedFromHeader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"2^63-1 in one frame", wsFrameHeader(true, 2, 1<<63-1)},
		{"limit+1 in one frame", wsFrameHeader(true, 2, DefaultReadLimit+1)},
		{"fragments passing the limit", append(append(wsFrameHeader(false, 2, 40<<10), make([]byte, 40<<10)...),
			wsFrameHeader(false, 0, 40<<10)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, server := rawWSServer(t, Config{})
			if _, err := nc.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err := server.Receive(testCtx(t))
			if !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("Receive: %v, want ErrMessageTooLarge", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("refused after %v", d)
			}
		})
	}
}

// TestWSControlMessageLimit: after the read limit has been raised, a
// message whose first byte says CONTROL is still refused above 65,536
// bytes, from its header and first byte; a DATA message of that size
// passes.
func TestWSControlMessageLimit(t *testing.T) {
	nc, server := rawWSServer(t, Config{})
	server.SetReadLimit(1 << 20)
	data := make([]byte, 70_000)
	data[0] = 0x02
	nc.Write(append(wsFrameHeader(true, 2, uint64(len(data))), data...))
	m := mustReceive(t, server)
	if len(m.Data) != len(data) {
		t.Fatalf("DATA of %d bytes arrived as %d", len(data), len(m.Data))
	}
	m.Release()
	nc.Write(append(wsFrameHeader(true, 2, 70_000), 0x01))
	if _, err := server.Receive(testCtx(t)); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("Receive: %v, want ErrMessageTooLarge for a 70,000-byte CONTROL message", err)
	}
}

// TestWSMessageTimeout: a message whose frame header has come but whose
// body trickles fails Receive with ErrMessageTimeout.
func TestWSMessageTimeout(t *testing.T) {
	nc, server := rawWSServer(t, Config{MessageTimeout: 300 * time.Millisecond})
	nc.Write(append(wsFrameHeader(true, 2, 100), 1, 2, 3))
	start := time.Now()
	_, err := server.Receive(testCtx(t))
	if !errors.Is(err, ErrMessageTimeout) {
		t.Fatalf("Receive: %v, want ErrMessageTimeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("noticed after %v", d)
	}
}

// TestWSMessageTimeoutWhileMessagesFlow: the message timer is not set and
// stopped around each message but left running while messages come. Its
// firing while messages flow fails none of them; and a message that
// trickles is given its whole MessageTimeout from its own first header,
// not from when an earlier message set the timer.
func TestWSMessageTimeoutWhileMessagesFlow(t *testing.T) {
	const timeout = 400 * time.Millisecond
	nc, server := rawWSServer(t, Config{MessageTimeout: timeout})
	data := []byte{0x02, 1, 2, 3}
	send := func(i int) {
		nc.Write(append(wsFrameHeader(true, 2, uint64(len(data))), data...))
		m, err := server.Receive(testCtx(t))
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		m.Release()
	}
	// 13 whole messages over 600 ms: the timer, set by the first, fires
	// while they flow.
	for i := range 13 {
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		send(i)
	}
	// Idle past the timer's last firing; then one message sets it again,
	// and the trickling one begins half-way to its firing.
	time.Sleep(timeout + 100*time.Millisecond)
	send(13)
	time.Sleep(timeout / 2)
	start := time.Now()
	nc.Write(append(wsFrameHeader(true, 2, 100), 1, 2, 3))
	_, err := server.Receive(testCtx(t))
	if !errors.Is(err, ErrMessageTimeout) {
		t.Fatalf("Receive: %v, want ErrMessageTimeout", err)
	}
	if d := time.Since(start); d < timeout*7/8 || d > 2*time.Second {
		t.Fatalf("a trickling message was given up after %v; MessageTimeout %v", d, timeout)
	}
}

// FuzzWSTap: the tap's view of a byte stream does not depend on how the
// stream is cut into reads.
func FuzzWSTap(f *testing.F) {
	f.Add(append(wsFrameHeader(true, 2, 5), "hello"...), []byte{1}, uint32(4))
	f.Add(append(append(wsFrameHeader(false, 1, 3), "abc"...), wsFrameHeader(true, 0, 300)...), []byte{3, 7}, uint32(200))
	f.Add(wsFrameHeader(true, 2, 1<<63-1), []byte{2}, uint32(MaxReadLimit))
	f.Add(append(append(wsFrameHeader(false, 2, 0), wsFrameHeader(true, 0, 70_000)...), 0x01), []byte{4, 1}, uint32(MaxReadLimit))
	f.Add([]byte{0x89, 0x80, 0, 0, 0, 0, 0x82, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, []byte{5}, uint32(10))
	f.Fuzz(func(t *testing.T, data, chunks []byte, limit uint32) {
		whole := &wsTap{}
		whole.limit.Store(int64(limit))
		whole.scan(data)
		cut := &wsTap{}
		cut.limit.Store(int64(limit))
		r := &chunkReader{data: data, sizes: chunks}
		buf := make([]byte, len(data)+1)
		for {
			n, err := r.Read(buf)
			cut.scan(buf[:n])
			if err != nil {
				break
			}
		}
		if whole.messages != cut.messages || whole.oversized.Load() != cut.oversized.Load() ||
			whole.left != cut.left || whole.hlen != cut.hlen || whole.total != cut.total ||
			whole.control != cut.control || whole.kindPending != cut.kindPending {
			t.Fatalf("whole %+v, cut %+v", whole, cut)
		}
		if o := whole.oversized.Load(); o > whole.messages {
			t.Fatalf("oversized message %d of %d", o, whole.messages)
		}
	})
}

// TestWSCloseBoundedAgainstSilentPeer: the library reads out the message in
// progress before the peer's close frame; a peer that announced 2^63 bytes
// and then neither sends nor closes cannot hold Close beyond CloseTimeout.
func TestWSCloseBoundedAgainstSilentPeer(t *testing.T) {
	nc, server := rawWSServer(t, Config{CloseTimeout: 300 * time.Millisecond})
	nc.Write(wsFrameHeader(true, 2, 1<<63-1))
	if _, err := server.Receive(testCtx(t)); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("Receive: %v", err)
	}
	start := time.Now()
	server.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v with CloseTimeout 300ms", d)
	}
}
