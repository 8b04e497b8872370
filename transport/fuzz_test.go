package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzQUICFrameReader feeds arbitrary bytes, cut into arbitrary chunks, to
// the QUIC message reader and checks every outcome against a direct parse
// of the whole input: the same messages, then the right typed error, and
// never more than the bytes that arrived buffered beyond eagerAlloc.
func FuzzQUICFrameReader(f *testing.F) {
	f.Add(frame([]byte("hello"), nil, []byte{1, 2, 3}), []byte{1}, uint32(100))
	f.Add(frame(pattern(300, 1)), []byte{7, 250}, uint32(299))
	f.Add(frame(pattern(700, 2)), []byte{255}, uint32(MaxReadLimit))
	f.Add([]byte{0, 0, 0}, []byte(nil), uint32(10))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1}, []byte{2}, uint32(0xffffffff))
	f.Add(frame([]byte("a"))[:4], []byte{3}, uint32(5))
	// Small first buffers so that growth while reading happens on the
	// small inputs a fuzzer makes.
	saved := eagerAlloc
	eagerAlloc = 64
	f.Cleanup(func() { eagerAlloc = saved })
	f.Fuzz(func(t *testing.T, data, chunks []byte, limit uint32) {
		lim := min(int64(limit), MaxReadLimit)
		r := &chunkReader{data: data, sizes: chunks}
		var hdr [4]byte
		rest := data
		for {
			// What the whole input says comes next.
			var wantMsg []byte
			var wantErr error
			switch {
			case len(rest) == 0:
				wantErr = io.EOF
			case len(rest) < 4:
				wantErr = ErrProtocol
			default:
				n := int64(binary.BigEndian.Uint32(rest))
				switch {
				case n > lim:
					wantErr = ErrMessageTooLarge
				case int64(len(rest)-4) < n:
					wantErr = ErrProtocol
				default:
					wantMsg = rest[4 : 4+n]
				}
			}

			buf, err := readFrame(r, &hdr, limitOf(lim))
			if wantErr != nil {
				if !errors.Is(err, wantErr) {
					t.Fatalf("err = %v, want %v", err, wantErr)
				}
				if errors.Is(wantErr, ErrMessageTooLarge) && r.served != len(data)-len(rest)+4 {
					t.Fatalf("oversize prefix, but %d body bytes were read", r.served-(len(data)-len(rest)+4))
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if !bytes.Equal(buf.b, wantMsg) {
				t.Fatalf("message differs: got %d bytes, want %d", len(buf.b), len(wantMsg))
			}
			if cap(buf.b) > max(2*len(wantMsg), eagerAlloc, 256) {
				t.Fatalf("%d-byte message held in %d bytes", len(wantMsg), cap(buf.b))
			}
			putBuffer(buf)
			rest = rest[4+len(wantMsg):]
		}
	})
}

// FuzzWSMessageReader: the WebSocket message reader returns exactly the
// bytes of a message within the limit, refuses a longer one with
// ErrMessageTooLarge after reading at most limit+1 bytes, whatever the
// chunking and starting size.
func FuzzWSMessageReader(f *testing.F) {
	f.Add([]byte("hello"), []byte{1}, uint32(100), uint16(512))
	f.Add(pattern(512, 1), []byte(nil), uint32(512), uint16(512))
	f.Add(pattern(513, 1), []byte{200}, uint32(512), uint16(1))
	f.Add(pattern(2000, 2), []byte{255, 1}, uint32(100_000), uint16(0))
	f.Add([]byte{}, []byte{}, uint32(0), uint16(0))
	f.Fuzz(func(t *testing.T, data, chunks []byte, limit uint32, start uint16) {
		lim := 1 + int64(limit%(1<<20))
		r := &chunkReader{data: data, sizes: chunks}
		buf, err := readMessage(r, lim, int(start), new([1]byte))
		if int64(len(data)) > lim {
			if !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("%d bytes with limit %d: err = %v", len(data), lim, err)
			}
			if int64(r.served) > lim+1 {
				t.Fatalf("read %d bytes with limit %d", r.served, lim)
			}
			return
		}
		if err != nil {
			t.Fatalf("err = %v", err)
		}
		if !bytes.Equal(buf.b, data) {
			t.Fatalf("message differs")
		}
		// At most the class of the first buffer or of twice the message.
		if bound := classSize(classFor(max(int(start), 2*len(data), 1))); cap(buf.b) > bound {
			t.Fatalf("%d-byte message held in %d bytes (start %d)", len(data), cap(buf.b), start)
		}
		putBuffer(buf)
	})
}

// FuzzSubprotocolOffer: the Sec-WebSocket-Protocol parser agrees with the
// RFC 6455 reading (comma-separated tokens, optional whitespace).
func FuzzSubprotocolOffer(f *testing.F) {
	f.Add("m2m.v1")
	f.Add("chat, m2m.v1")
	f.Add(" m2m.v1 ,x")
	f.Add("m2m.v1x")
	f.Add("M2M.V1")
	f.Add(",,,")
	f.Fuzz(func(t *testing.T, header string) {
		got := offersSubprotocol([]string{header}, Subprotocol)
		want := false
		for _, tok := range strings.Split(header, ",") {
			if strings.Trim(tok, " \t") == Subprotocol {
				want = true
			}
		}
		// strings.TrimSpace also trims other Unicode space; only flag a
		// disagreement that the RFC's token rules would decide.
		if got != want && !strings.ContainsFunc(header, func(r rune) bool {
			return r != ' ' && r != '\t' && strings.TrimSpace(string(r)) == ""
		}) {
			t.Fatalf("offersSubprotocol(%q) = %v, want %v", header, got, want)
		}
	})
}
