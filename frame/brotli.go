package frame

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"sync"

	"github.com/andybalholm/brotli"

	"github.com/m2md/m2md/internal/jsonscan"
)

// Brotli parameters of the wire reference §2.4.
const (
	frameQuality    = jsonscan.DefaultQuality // M2M v1 frame payloads
	textQuality     = 11                      // the #M2M[v3.0]|DATA: text form
	brotliWindowLog = 22
)

// A brotli.Writer allocates its tables when it is created and reuses them
// across Reset, so writers and readers are pooled: frame writers one pool
// per quality (Limits.Quality), index 0 unused.
var (
	frameWriters [12]sync.Pool
	readers      = sync.Pool{New: func() any { return newBrotliDecoder() }}
)

func init() {
	for q := 1; q < len(frameWriters); q++ {
		frameWriters[q].New = func() any { return newBrotliEncoder(q, brotliWindowLog) }
	}
}

// At quality 11 the encoder's match finder keeps two 32-bit entries per
// position of the window: 32 MiB for the reference's 22-bit window, held by
// every pooled writer and re-zeroed whenever the GC empties the pool. A
// window only needs to cover the input, and when it does the compressed
// data is the same but for the window size in the stream header (any
// decoder accepts any window), so the text form uses the smallest of three
// window classes that covers the input.
var textWindows = [...]struct {
	log  int
	pool *sync.Pool
}{
	{16, newTextPool(16)}, // up to 64 KiB: 0.5 MiB of tree
	{18, newTextPool(18)}, // up to 256 KiB: 2 MiB
	{brotliWindowLog, newTextPool(brotliWindowLog)},
}

func newTextPool(windowLog int) *sync.Pool {
	return &sync.Pool{New: func() any { return newBrotliEncoder(textQuality, windowLog) }}
}

// textWriters returns the pool of quality-11 writers for an input of n bytes.
func textWriters(n int) *sync.Pool {
	for _, w := range textWindows {
		// Brotli reaches back at most 2^log - 16 bytes.
		if n <= 1<<w.log-16 {
			return w.pool
		}
	}
	return textWindows[len(textWindows)-1].pool
}

// appendWriter is an io.Writer that appends to a byte slice, so the
// compressor writes straight into the caller's buffer.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

type brotliEncoder struct {
	w   *brotli.Writer
	out appendWriter
}

func newBrotliEncoder(quality, windowLog int) *brotliEncoder {
	e := &brotliEncoder{}
	e.w = brotli.NewWriterOptions(&e.out, brotli.WriterOptions{Quality: quality, LGWin: windowLog})
	return e
}

// appendBrotli appends the Brotli compression of src to dst, using a
// writer from pool. As in the Rust reference, the whole input is written
// at once and the stream then closed.
func appendBrotli(dst, src []byte, pool *sync.Pool) ([]byte, error) {
	e := pool.Get().(*brotliEncoder)
	e.out.b = dst
	e.w.Reset(&e.out)
	_, err := e.w.Write(src)
	if cerr := e.w.Close(); err == nil {
		err = cerr
	}
	out := e.out.b
	e.out.b = nil // do not keep the caller's buffer alive in the pool
	pool.Put(e)
	if err != nil {
		return dst, errorf(ErrMalformed, "brotli compression failed: %v", err)
	}
	return out, nil
}

type brotliDecoder struct {
	r   *brotli.Reader
	src bytes.Reader
}

func newBrotliDecoder() *brotliDecoder {
	d := &brotliDecoder{}
	d.r = brotli.NewReader(&d.src)
	return d
}

// appendUnbrotli appends the decompression of src to dst, failing with
// ErrLimit as soon as the output would exceed limit bytes. Output is written
// straight into dst's spare capacity, which grows geometrically, so memory
// stays within about twice the output actually produced (plus the
// decoder's window): a Brotli bomb costs at most limit bytes and the time to
// produce them. On error dst is returned unchanged.
func appendUnbrotli(dst, src []byte, limit int) ([]byte, error) {
	d := readers.Get().(*brotliDecoder)
	d.src.Reset(src)
	_ = d.r.Reset(&d.src) // never fails
	out, err := d.decompress(dst, limit)
	d.src.Reset(nil)
	// The decoder keeps a ring buffer as large as the output it produced,
	// up to the stream's window (16 MiB). Only readers that stayed small
	// go back to the pool; the others are left to the GC.
	if err == nil && len(out)-len(dst) <= pooledOutputMax {
		readers.Put(d)
	}
	return out, err
}

// pooledOutputMax bounds the output of a decompression whose reader is
// reused.
const pooledOutputMax = 1 << 20

func (d *brotliDecoder) decompress(dst []byte, limit int) ([]byte, error) {
	start := len(dst)
	if len(dst) == cap(dst) {
		// A first guess that fits typical JSON ratios, so one read usually does.
		dst = slices.Grow(dst, min(limit+1, max(4*int(d.src.Size()), 1024)))
	}
	for {
		produced := len(dst) - start
		if produced > limit {
			return dst[:start], errorf(ErrLimit, "decompressed payload exceeds %d bytes", limit)
		}
		var n int
		var err error
		if len(dst) < cap(dst) {
			room := dst[len(dst):cap(dst)]
			if left := limit + 1 - produced; len(room) > left {
				room = room[:left]
			}
			n, err = d.r.Read(room)
			dst = dst[:len(dst)+n]
		} else {
			// dst is full: probe for one more byte before growing it, so
			// that a caller whose buffer fits the output exactly does not
			// pay for an allocation.
			var probe [1]byte
			if n, err = d.r.Read(probe[:]); n > 0 {
				dst = append(slices.Grow(dst, min(limit+1-produced, max(produced, 4096))), probe[0])
			}
		}
		switch {
		case err == nil:
		case err == io.EOF:
			if len(dst)-start > limit {
				return dst[:start], errorf(ErrLimit, "decompressed payload exceeds %d bytes", limit)
			}
			return dst, nil
		case errors.Is(err, io.ErrUnexpectedEOF):
			return dst[:start], errorf(ErrMalformed, "brotli stream is truncated")
		default:
			return dst[:start], errorf(ErrMalformed, "brotli stream is corrupt: %v", err)
		}
	}
}
