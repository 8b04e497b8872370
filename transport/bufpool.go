package transport

import (
	"math/bits"
	"sync"
)

// Message buffers come from size-class pools: allocating a 4 KB buffer per
// message costs ~0.9 µs with GC, a pooled one ~10 ns (a make against sync.Pool
// micro-benchmark on the 2-core development machine).
// Classes are powers of two from 256 B to 16 MiB, plus one class exactly
// large enough for the biggest frame (MaxReadLimit and its length prefix).
const (
	minClassShift  = 8  // 256 B
	numPow2Classes = 17 // 256 B … 16 MiB
	maxBufSize     = MaxReadLimit + 4
)

var bufPools [numPow2Classes + 1]sync.Pool

// buffer is a pooled byte slice. release is bound once, when the buffer is
// first made, so handing it to a Message costs no allocation.
type buffer struct {
	b       []byte
	class   int
	release func()
}

func classSize(class int) int {
	if class == numPow2Classes {
		return maxBufSize
	}
	return 1 << (minClassShift + class)
}

// classFor returns the smallest class holding n bytes, or -1 if none does.
func classFor(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - minClassShift
	if c < numPow2Classes {
		return c
	}
	if n <= maxBufSize {
		return numPow2Classes
	}
	return -1
}

// getBuffer returns a buffer with len n and the capacity of n's class.
func getBuffer(n int) *buffer {
	c := classFor(n)
	if c < 0 {
		// Larger than any frame the limits let through; not pooled.
		return &buffer{b: make([]byte, n), class: -1, release: func() {}}
	}
	if v := bufPools[c].Get(); v != nil {
		buf := v.(*buffer)
		buf.b = buf.b[:n]
		return buf
	}
	buf := &buffer{b: make([]byte, n, classSize(c)), class: c}
	buf.release = func() { putBuffer(buf) }
	return buf
}

func putBuffer(buf *buffer) {
	if buf.class < 0 {
		return
	}
	buf.b = buf.b[:0]
	bufPools[buf.class].Put(buf)
}

// message wraps a filled buffer as a Message on channel ch.
func (buf *buffer) message(ch ChannelID) Message {
	return Message{Channel: ch, Data: buf.b, release: buf.release}
}
