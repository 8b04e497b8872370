package transport

import (
	"bufio"
	"encoding/binary"
	"math"
	"net"
	"net/http"
	"sync/atomic"
)

// wsTap watches the frame headers (RFC 6455 §5.2) in the byte stream a
// daemon-side WebSocket connection reads, as coder/websocket reads it. The
// library tells a message's size only by reading it; the tap knows it from
// the message's first frame header, and a fragmented message's running
// total from each continuation's, before the library has handed over any
// of the body. The connection's reader consults it (oversizedMessage) and
// refuses the message unread; and as the header that passes the limit may
// arrive while that reader waits inside the library for the body, the tap
// also reports it at once (refuse).
//
// The tap only observes: it never changes, holds back or buffers bytes, so
// the library sees the stream as it came and validates it as without the tap.
type wsTap struct {
	net.Conn
	pre    []byte       // bytes net/http had read past the upgrade request
	limit  atomic.Int64 // the connection's read limit (wsConn.SetReadLimit)
	refuse func()       // called once, on the library's reading goroutine

	// Parser state, touched only by the library's reading goroutine.
	hdr      [14]byte
	hlen     int   // header bytes collected
	need     int   // header length, known once hlen >= 2
	left     int64 // payload bytes of the current frame still to pass
	total    int64 // declared size of the current data message so far
	messages uint64
	mask     [4]byte // the current frame's masking key
	data     bool    // the current frame belongs to a data message
	// kindPending: the current message's first byte, its kind, has not
	// passed yet; control: it is a CONTROL message, which is at most
	// 65,536 bytes in every state (docs/protocol.md §1).
	kindPending, control bool

	// oversized is the number (1-based, counting data messages) of the
	// first message whose declared size exceeds the read limit; 0 if none.
	oversized atomic.Uint64
	// read is the bytes the library has read (transport.ReadProgress).
	read atomic.Uint64
}

func (t *wsTap) Read(p []byte) (int, error) {
	if len(t.pre) > 0 {
		n := copy(p, t.pre)
		t.pre = t.pre[n:]
		t.scan(p[:n])
		t.read.Add(uint64(n))
		return n, nil
	}
	n, err := t.Conn.Read(p)
	t.scan(p[:n])
	t.read.Add(uint64(n))
	return n, err
}

// scan follows b through the frame structure: payload is skipped in bulk,
// headers (2 to 14 bytes) are collected a byte at a time.
func (t *wsTap) scan(b []byte) {
	for len(b) > 0 {
		if t.left > 0 {
			if t.data && t.kindPending {
				t.kindPending = false
				if b[0]^t.mask[0] == controlKind {
					t.control = true
					t.check()
				}
			}
			k := min(int64(len(b)), t.left)
			t.left -= k
			b = b[k:]
			continue
		}
		t.hdr[t.hlen] = b[0]
		t.hlen++
		b = b[1:]
		if t.hlen == 2 {
			t.need = 2
			switch t.hdr[1] & 0x7F {
			case 126:
				t.need += 2
			case 127:
				t.need += 8
			}
			if t.hdr[1]&0x80 != 0 {
				t.need += 4 // masking key
			}
		}
		if t.hlen >= 2 && t.hlen == t.need {
			t.frame()
			t.hlen = 0
		}
	}
}

// frame takes in a complete frame header.
func (t *wsTap) frame() {
	n := int64(t.hdr[1] & 0x7F)
	switch n {
	case 126:
		n = int64(binary.BigEndian.Uint16(t.hdr[2:4]))
	case 127:
		u := binary.BigEndian.Uint64(t.hdr[2:10])
		if u > math.MaxInt64 { // invalid (RFC 6455: the top bit is 0); the library refuses it
			u = math.MaxInt64
		}
		n = int64(u)
	}
	t.left = n
	t.mask = [4]byte{}
	if t.hdr[1]&0x80 != 0 {
		copy(t.mask[:], t.hdr[t.need-4:t.need])
	}
	t.data = true
	switch opcode := t.hdr[0] & 0x0F; opcode {
	case 0x1, 0x2: // text, binary: a new message
		t.messages++
		t.total = n
		t.kindPending, t.control = true, false
	case 0x0: // continuation
		t.total = min(t.total, math.MaxInt64-n) + n
	default: // control frames (≤ 125 bytes, checked by the library) and reserved opcodes
		t.data = false
		return
	}
	t.check()
}

// controlKind is the kind byte of a CONTROL message (docs/protocol.md §2).
const controlKind = 0x01

// check marks the current message oversized once its declared size passes
// the read limit (65,536 bytes for a CONTROL message).
func (t *wsTap) check() {
	limit := t.limit.Load()
	if t.control {
		limit = min(limit, DefaultReadLimit)
	}
	if t.total > limit && t.oversized.Load() == 0 {
		t.oversized.Store(t.messages)
		if t.refuse != nil {
			t.refuse()
		}
	}
}

// oversizedMessage reports whether data message number k (1-based) has
// been announced larger than the read limit.
func (t *wsTap) oversizedMessage(k uint64) bool {
	o := t.oversized.Load()
	return o != 0 && o <= k
}

// tapWriter hands coder/websocket a connection with a tap in its read path
// when it hijacks the request's connection. The library reads through the
// net.Conn it gets (after the bytes already buffered, which it takes from
// the returned reader: the tap serves those itself, so it sees them too).
type tapWriter struct {
	http.ResponseWriter
	tap *wsTap
}

func (w *tapWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		w.tap.pre = append([]byte(nil), b...)
	}
	w.tap.Conn = nc
	brw.Reader.Reset(w.tap)
	return w.tap, brw, nil
}

func (w *tapWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
