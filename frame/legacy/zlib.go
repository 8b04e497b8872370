package legacy

import (
	"bytes"
	"compress/zlib"
	"errors"
	"io"
	"strconv"
	"sync"

	"github.com/m2md/m2md/frame"
)

// PrefixZlib starts the zlib form: the prefix, then standard padded Base64
// of a zlib (RFC 1950) stream of the UTF-8 text. The Rust reference has no
// code for this form; m2md decodes it as the seed spec allows (§1.1, §12).
const PrefixZlib = "#M2M[v2.0]|DATA:"

var zlibWriters = sync.Pool{New: func() any {
	w, _ := zlib.NewWriterLevel(nil, zlib.DefaultCompression)
	return w
}}

// zlibReaders holds readers that have been used once; zlib.NewReader needs a
// valid stream to construct one, so the pool cannot make them itself.
var zlibReaders sync.Pool

// EncodeZlib appends the zlib form of text to dst. text must be valid UTF-8
// and at most Limits.MaxDecompressed bytes; the encoded message must fit
// Limits.MaxMessage. On error nothing is appended.
func EncodeZlib(dst, text []byte, limits frame.Limits) ([]byte, error) {
	lim := limits.Effective()
	if len(text) > lim.MaxDecompressed {
		return dst, sizeError(codecZlib, "text", len(text), lim.MaxDecompressed)
	}
	if i := invalidUTF8(text); i >= 0 {
		return dst, newError(codecZlib, ErrNotUTF8, i, "")
	}
	buf := getBuf()
	defer putBuf(buf)
	sink := bytes.NewBuffer(*buf)
	zw := zlibWriters.Get().(*zlib.Writer)
	zw.Reset(sink)
	_, err := zw.Write(text)
	if err == nil {
		err = zw.Close()
	}
	zlibWriters.Put(zw)
	*buf = sink.Bytes()
	if err != nil { // writing to a bytes.Buffer cannot fail; keep the check honest anyway
		return dst, newError(codecZlib, ErrMalformed, -1, "zlib compression failed: "+err.Error())
	}
	total := len(PrefixZlib) + strictBase64.EncodedLen(len(*buf))
	if total > lim.MaxMessage {
		return dst, sizeError(codecZlib, "encoded message", total, lim.MaxMessage)
	}
	dst = append(dst, PrefixZlib...)
	return strictBase64.AppendEncode(dst, *buf), nil
}

// DecodeZlib appends the text carried by a zlib-form message to dst. src
// must start with PrefixZlib. Decompression streams into dst and stops with
// ErrLimit as soon as the output would exceed Limits.MaxDecompressed, so a
// zlib bomb costs at most that much live memory (about twice that in total
// allocation while the buffer grows). The stream's Adler-32 checksum
// is verified, trailing bytes after the stream are refused and the text must
// be UTF-8. On error nothing is appended.
func DecodeZlib(dst, src []byte, limits frame.Limits) ([]byte, error) {
	lim := limits.Effective()
	if len(src) > lim.MaxMessage {
		return dst, sizeError(codecZlib, "message", len(src), lim.MaxMessage)
	}
	if !bytes.HasPrefix(src, []byte(PrefixZlib)) {
		return dst, newError(codecZlib, ErrMalformed, 0, "missing "+PrefixZlib+" prefix")
	}
	buf := getBuf()
	defer putBuf(buf)
	compressed, err := decodeBase64(codecZlib, *buf, src[len(PrefixZlib):], len(PrefixZlib))
	if err != nil {
		return dst, err
	}
	*buf = compressed
	in := bytes.NewReader(compressed)

	var zr io.ReadCloser
	if pooled, ok := zlibReaders.Get().(io.ReadCloser); ok {
		if err := pooled.(zlib.Resetter).Reset(in, nil); err != nil {
			zlibReaders.Put(pooled)
			return dst, zlibError(err)
		}
		zr = pooled
	} else if zr, err = zlib.NewReader(in); err != nil {
		return dst, zlibError(err)
	}
	defer zlibReaders.Put(zr)

	start := len(dst)
	out, err := inflateCapped(dst, zr, lim.MaxDecompressed, len(compressed))
	if err != nil {
		return dst[:start], err
	}
	if in.Len() != 0 {
		return dst[:start], newError(codecZlib, ErrMalformed, -1, "trailing bytes after the zlib stream")
	}
	if i := invalidUTF8(out[start:]); i >= 0 {
		return dst[:start], newError(codecZlib, ErrNotUTF8, -1, "decompressed text is not UTF-8")
	}
	return out, nil
}

// inflateCapped reads r to EOF, appending to dst, and fails as soon as the
// output would exceed maxOut bytes. The buffer grows geometrically with
// exact-size allocations and never beyond maxOut, so a bomb costs at most
// about twice maxOut in total allocation and maxOut in live memory.
func inflateCapped(dst []byte, r io.Reader, maxOut, compressedLen int) ([]byte, error) {
	start := len(dst)
	limit := start + maxOut
	next := min(maxOut, max(4*compressedLen, 512))
	for {
		if len(dst) == limit {
			// Full: the stream must end here. One more byte proves the cap
			// was exceeded; reading it costs no output memory.
			var probe [1]byte
			n, err := io.ReadAtLeast(r, probe[:], 1)
			if n > 0 {
				return dst, newError(codecZlib, ErrLimit, -1, "decompressed text exceeds "+strconv.Itoa(maxOut)+" bytes")
			}
			if err == io.EOF {
				return dst, nil
			}
			return dst, zlibError(err)
		}
		if len(dst) == cap(dst) {
			size := len(dst) + next
			if size+2*next > limit {
				size = limit // the step after this one would be clipped: go to the cap now
			}
			grown := make([]byte, len(dst), size)
			copy(grown, dst)
			dst = grown
			next = min(2*next, maxOut)
		}
		n, err := r.Read(dst[len(dst):min(cap(dst), limit)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, zlibError(err)
		}
	}
}

func zlibError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return newError(codecZlib, ErrMalformed, -1, "truncated zlib stream")
	}
	return newError(codecZlib, ErrMalformed, -1, err.Error())
}
