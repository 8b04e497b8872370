package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"sync/atomic"
	"testing"
)

func limitOf(n int64) *atomic.Int64 {
	var v atomic.Int64
	v.Store(n)
	return &v
}

func frame(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(m)))
		b = append(b, m...)
	}
	return b
}

// chunkReader returns data in pieces of the sizes listed (cycled; 0 is
// taken as 1 so that every Read makes progress).
type chunkReader struct {
	data   []byte
	sizes  []byte
	i      int
	served int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := 1 << 20
	if len(r.sizes) > 0 {
		n = max(1, int(r.sizes[r.i%len(r.sizes)]))
		r.i++
	}
	n = min(n, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	r.served += n
	return n, nil
}

func TestReadFrame(t *testing.T) {
	big := pattern(200_000, 1)
	for _, tc := range []struct {
		name    string
		in      []byte
		limit   int64
		want    [][]byte
		wantErr error // after the messages in want
	}{
		{"empty stream", nil, 100, nil, io.EOF},
		{"one", frame([]byte("hello")), 100, [][]byte{[]byte("hello")}, io.EOF},
		{"zero-length message", frame(nil, []byte("x")), 100, [][]byte{{}, []byte("x")}, io.EOF},
		{"exactly the limit", frame(pattern(100, 2)), 100, [][]byte{pattern(100, 2)}, io.EOF},
		{"one over the limit", frame(pattern(101, 2)), 100, nil, ErrMessageTooLarge},
		{"large, grown while reading", frame(big, []byte("after")), 1 << 20, [][]byte{big, []byte("after")}, io.EOF},
		{"truncated prefix", []byte{0, 0}, 100, nil, ErrProtocol},
		{"truncated body", frame([]byte("hello"))[:7], 100, nil, ErrProtocol},
		{"truncated large body", frame(big)[:150_000], 1 << 20, nil, ErrProtocol},
		{"max prefix", []byte{0xff, 0xff, 0xff, 0xff}, MaxReadLimit, nil, ErrMessageTooLarge},
	} {
		for _, chunks := range [][]byte{nil, {1}, {3, 1, 7}} {
			if len(chunks) == 1 && len(tc.in) > 10_000 {
				continue // byte-at-a-time over 200 KB only slows the suite
			}
			r := &chunkReader{data: tc.in, sizes: chunks}
			var hdr [4]byte
			for i := 0; ; i++ {
				buf, err := readFrame(r, &hdr, limitOf(tc.limit))
				if err != nil {
					if i != len(tc.want) {
						t.Fatalf("%s (chunks %v): error %v after %d messages, want %d", tc.name, chunks, err, i, len(tc.want))
					}
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("%s (chunks %v): err = %v, want %v", tc.name, chunks, err, tc.wantErr)
					}
					break
				}
				if i >= len(tc.want) {
					t.Fatalf("%s: unexpected message %d", tc.name, i)
				}
				if !bytes.Equal(buf.b, tc.want[i]) {
					t.Fatalf("%s (chunks %v): message %d differs", tc.name, chunks, i)
				}
				putBuffer(buf)
			}
		}
	}
}

// limitSpy fails when it is asked for more than the bytes it has handed
// out so far allow: it proves a size check happens before buffering.
type limitSpy struct {
	t        *testing.T
	prefix   []byte
	maxAsk   int
	askedFor int
}

func (r *limitSpy) Read(p []byte) (int, error) {
	if len(r.prefix) > 0 {
		n := copy(p, r.prefix)
		r.prefix = r.prefix[n:]
		return n, nil
	}
	r.askedFor = max(r.askedFor, len(p))
	return 0, io.ErrClosedPipe // the peer "sends nothing more"
}

func TestReadFrameRefusesBeforeBuffering(t *testing.T) {
	// A 16 MiB announcement against a 64 KiB limit: nothing beyond the
	// prefix is read.
	r := &limitSpy{t: t, prefix: binary.BigEndian.AppendUint32(nil, 16<<20)}
	var hdr [4]byte
	_, err := readFrame(r, &hdr, limitOf(DefaultReadLimit))
	if !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("err = %v, want ErrMessageTooLarge", err)
	}
	if r.askedFor != 0 {
		t.Fatalf("reader was asked for %d body bytes after an oversize prefix", r.askedFor)
	}

	// A 16 MiB announcement within the limit, then silence: the buffer
	// offered to the stream is eagerAlloc, not 16 MiB.
	r = &limitSpy{t: t, prefix: binary.BigEndian.AppendUint32(nil, 16<<20)}
	_, err = readFrame(r, &hdr, limitOf(MaxReadLimit))
	if !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("err = %v, want the reader's error", err)
	}
	if r.askedFor > eagerAlloc {
		t.Fatalf("a 16 MiB announcement made readFrame offer %d bytes before any arrived", r.askedFor)
	}
}

func TestReadMessage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		limit   int64
		start   int
		wantErr error
	}{
		{"empty", 0, 100, 512, nil},
		{"small", 10, 100, 512, nil},
		{"exact fit in first buffer", 512, 1000, 512, nil},
		{"exactly the limit", 1000, 1000, 512, nil},
		{"one over the limit", 1001, 1000, 512, ErrMessageTooLarge},
		{"limit below start", 50, 40, 512, ErrMessageTooLarge},
		{"grows many times", 300_000, 1 << 20, 512, nil},
		{"grows to the limit exactly", 1 << 20, 1 << 20, 512, nil},
	} {
		for _, chunks := range [][]byte{nil, {1}, {200, 3}} {
			if len(chunks) == 1 && tc.n > 10_000 {
				continue // byte-at-a-time over megabytes only slows the suite
			}
			data := pattern(tc.n, 9)
			r := &chunkReader{data: data, sizes: chunks}
			buf, err := readMessage(r, tc.limit, tc.start, new([1]byte))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("%s: err = %v, want %v", tc.name, err, tc.wantErr)
				}
				if int64(r.served) > tc.limit+1 {
					t.Fatalf("%s: read %d bytes with limit %d", tc.name, r.served, tc.limit)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s (chunks %v): %v", tc.name, chunks, err)
			}
			if !bytes.Equal(buf.b, data) {
				t.Fatalf("%s (chunks %v): message differs", tc.name, chunks)
			}
			if int64(cap(buf.b)) > max(2*int64(tc.n), 512) && cap(buf.b) > tc.start {
				t.Fatalf("%s: %d-byte message held in a %d-byte buffer", tc.name, tc.n, cap(buf.b))
			}
			putBuffer(buf)
		}
	}
}

func TestBufferClasses(t *testing.T) {
	for _, tc := range []struct{ n, wantCap int }{
		{0, 256}, {1, 256}, {256, 256}, {257, 512}, {4096, 4096}, {4097, 8192},
		{16 << 20, 16 << 20}, {16<<20 + 1, maxBufSize}, {maxBufSize, maxBufSize},
	} {
		buf := getBuffer(tc.n)
		if len(buf.b) != tc.n || cap(buf.b) != tc.wantCap {
			t.Errorf("getBuffer(%d): len %d cap %d, want cap %d", tc.n, len(buf.b), cap(buf.b), tc.wantCap)
		}
		buf.release()
	}
	// Beyond every class: still works, just not pooled.
	buf := getBuffer(maxBufSize + 1)
	if len(buf.b) != maxBufSize+1 {
		t.Fatal("oversize buffer has the wrong length")
	}
	buf.release()

	// Release through a Message is idempotent for the Message.
	m := getBuffer(10).message(3)
	m.Release()
	m.Release()
	if m.Data != nil {
		t.Fatal("Data survives Release")
	}
}

func TestBufferPoolAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	getBuffer(1000).release()
	allocs := testing.AllocsPerRun(100, func() {
		m := getBuffer(1000).message(0)
		m.Release()
	})
	if allocs > 0 {
		t.Fatalf("a pooled buffer round trip allocates %.1f times", allocs)
	}
}

// stallReader returns (0, nil) stalls times before every read that gives
// bytes or EOF, as io.Reader allows.
type stallReader struct {
	data   []byte
	stalls int
	left   int
}

func (r *stallReader) Read(p []byte) (int, error) {
	if r.left > 0 {
		r.left--
		return 0, nil
	}
	r.left = r.stalls
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// Up to maxReadRetries empty reads in a row are waited out, whether the
// buffer has room or is full (the probe for EOF); one more is
// io.ErrNoProgress, not a busy loop.
func TestReadMessageEmptyReads(t *testing.T) {
	data := pattern(256, 3) // one buffer class
	for _, tc := range []struct {
		name  string
		start int // 256: the message fills the first buffer, then the probe
	}{{"room", 512}, {"full", 256}} {
		for _, stalls := range []int{maxReadRetries, maxReadRetries + 1} {
			buf, err := readMessage(&stallReader{data: data, stalls: stalls, left: stalls}, 1000, tc.start, new([1]byte))
			if stalls <= maxReadRetries {
				if err != nil || !bytes.Equal(buf.b, data) {
					t.Fatalf("%s, %d empty reads: %v", tc.name, stalls, err)
				}
				putBuffer(buf)
				continue
			}
			if !errors.Is(err, io.ErrNoProgress) {
				t.Fatalf("%s, %d empty reads: %v, want io.ErrNoProgress", tc.name, stalls, err)
			}
		}
	}
}
