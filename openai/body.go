package openai

import (
	"errors"
	"io"
)

// maxPresize bounds the buffer ReadAll allocates on the word of a
// Content-Length: a peer that announces a large body and sends little
// makes the reader hold only what it sent, beyond this.
const maxPresize = 64 << 10

// ReadAll reads r to its end, as io.ReadAll does, into one buffer of the
// size the HTTP Content-Length announced (n; -1 when unknown), so that a
// body of up to 64 KiB costs one allocation of its size instead of
// io.ReadAll's doubling from 512 bytes. The caller bounds r.
func ReadAll(r io.Reader, n int64) ([]byte, error) {
	if n < 0 || n > maxPresize {
		return io.ReadAll(r)
	}
	// One byte more than announced, so the end is seen without growing.
	b := make([]byte, 0, n+1)
	for {
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			// More than announced: let append choose the next size.
			b = append(b, 0)[:len(b)]
		}
	}
}
