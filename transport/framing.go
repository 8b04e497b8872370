package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// eagerAlloc is the most a message buffer takes before its bytes arrive.
// A declared length up to it is allocated at once; a longer message grows
// (doubling) as its bytes are actually read, so a peer that announces large
// messages on many streams and then sends nothing pins at most eagerAlloc
// per stream, not its announced sizes. A variable only so that the fuzz
// target can make growth happen on small inputs.
var eagerAlloc = 64 << 10

// readFrame reads one message framed as u32 BE length + bytes: readPrefix,
// then readBody.
func readFrame(r io.Reader, hdr *[4]byte, limitVar *atomic.Int64) (*buffer, error) {
	n, err := readPrefix(r, hdr, limitVar, nil)
	if err != nil {
		return nil, err
	}
	return readBody(r, n)
}

// readPrefix reads a message's length prefix and checks it against limit,
// before anything of the message is buffered; the limit is read once the
// prefix has arrived, so a SetReadLimit made while the reader was waiting
// applies to the message that ends the wait. started, if not nil, is called
// when the prefix's first byte has arrived: the message has begun. It
// returns io.EOF (unwrapped) when r ends cleanly between messages; an end
// inside the prefix is ErrProtocol; other read errors are returned as they
// are.
func readPrefix(r io.Reader, hdr *[4]byte, limitVar *atomic.Int64, started func()) (int, error) {
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return 0, err
	}
	if started != nil {
		started()
	}
	if _, err := io.ReadFull(r, hdr[1:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("%w: stream ended inside a length prefix", ErrProtocol)
		}
		return 0, err
	}
	n := int64(binary.BigEndian.Uint32(hdr[:]))
	if limit := limitVar.Load(); n > limit {
		return 0, fmt.Errorf("%w: length prefix %d exceeds the read limit %d", ErrMessageTooLarge, n, limit)
	}
	return int(n), nil
}

// readBody reads exactly n bytes into a pooled buffer that grows with the
// bytes received.
func readBody(r io.Reader, n int) (*buffer, error) {
	buf := getBuffer(min(n, eagerAlloc))
	got := 0
	for {
		end := min(n, cap(buf.b))
		buf.b = buf.b[:end]
		m, err := io.ReadFull(r, buf.b[got:end])
		got += m
		if err != nil {
			putBuffer(buf)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%w: stream ended after %d of a %d-byte message", ErrProtocol, got, n)
			}
			return nil, err
		}
		if got == n {
			return buf, nil
		}
		grown := getBuffer(min(n, 2*cap(buf.b)))
		copy(grown.b, buf.b[:got])
		putBuffer(buf)
		buf = grown
	}
}

// putFrameHeader writes the length prefix of an n-byte message.
func putFrameHeader(dst []byte, n int) {
	binary.BigEndian.PutUint32(dst, uint32(n))
}

// maxReadRetries bounds consecutive (0, nil) reads, which io.Reader allows
// but which must not become a busy loop.
const maxReadRetries = 100

// readMessage reads r to EOF into a pooled buffer: the shape of a WebSocket
// message, whose size is not known before it has been read. start is the
// first buffer size tried (the connection's recent message size); the
// buffer doubles as bytes arrive, and a message above limit fails with
// ErrMessageTooLarge after at most limit+1 bytes have been read. probe is
// one byte of scratch owned by the caller (a local would escape to the heap
// through the io.Reader call, costing an allocation per message).
func readMessage(r io.Reader, limit int64, start int, probe *[1]byte) (*buffer, error) {
	buf := getBuffer(max(1, min(start, int(limit))))
	buf.b = buf.b[:cap(buf.b)]
	if int64(len(buf.b)) > limit {
		buf.b = buf.b[:limit]
	}
	got, idle := 0, 0
	for {
		if got < len(buf.b) {
			m, err := r.Read(buf.b[got:])
			got += m
			if err == io.EOF {
				buf.b = buf.b[:got]
				return buf, nil
			}
			if err != nil {
				putBuffer(buf)
				return nil, err
			}
			if idle = nextIdle(idle, m); idle > maxReadRetries {
				putBuffer(buf)
				return nil, io.ErrNoProgress
			}
			continue
		}
		// Full: one byte tells EOF (exact fit, no growth) from more.
		m, err := r.Read(probe[:])
		if m == 0 {
			if err == io.EOF {
				return buf, nil
			}
			if err != nil {
				putBuffer(buf)
				return nil, err
			}
			if idle = nextIdle(idle, m); idle > maxReadRetries {
				putBuffer(buf)
				return nil, io.ErrNoProgress
			}
			continue
		}
		if int64(got)+1 > limit {
			putBuffer(buf)
			return nil, fmt.Errorf("%w: message exceeds the read limit %d", ErrMessageTooLarge, limit)
		}
		grown := getBuffer(int(min(int64(2*cap(buf.b)), limit)))
		grown.b = grown.b[:min(int64(cap(grown.b)), limit)]
		copy(grown.b, buf.b[:got])
		grown.b[got] = probe[0]
		got++
		putBuffer(buf)
		buf = grown
		if err == io.EOF {
			buf.b = buf.b[:got]
			return buf, nil
		}
		if err != nil {
			putBuffer(buf)
			return nil, err
		}
	}
}

func nextIdle(idle, n int) int {
	if n > 0 {
		return 0
	}
	return idle + 1
}
