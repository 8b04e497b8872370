package bench

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/m2md/m2md/codec"
	"github.com/m2md/m2md/tokennative"
)

// Names of the forms the codec comparison measures, in table order.
const (
	formJSON          = "json"
	formGzipBase64    = "gzip+base64"
	formBrotliBase64  = "brotli+base64"
	formZstd          = "zstd"
	formM2MText       = "m2m-text"
	formM2MBinary     = "m2m-binary"
	formTNCl100kText  = "tokennative-cl100k-text"
	formTNCl100kBin   = "tokennative-cl100k-binary"
	formTNO200kText   = "tokennative-o200k-text"
	formTNO200kBinary = "tokennative-o200k-binary"
)

// Compression settings of the generic alternatives. Brotli uses the same
// quality as M2M v1 frames, so the M2M columns differ from it by framing
// alone; gzip and zstd use their libraries' default levels, what a user
// reaching for them gets.
const (
	gzipLevel     = gzip.DefaultCompression // 6
	brotliQuality = 5
)

// maxDecoded bounds every decoder's output: the protocol's 16 MiB.
const maxDecoded = 16 << 20

// errTooLarge: a decoder produced more than maxDecoded bytes.
var errTooLarge = errors.New("bench: decoded output exceeds 16 MiB")

// form is one wire form: how to encode a JSON document and decode it back.
// Its encoders and decoders are reused from call to call (Reset), as a
// program that sends many messages would, and are not safe for concurrent
// use.
type form struct {
	name string
	// text forms are readable characters an LLM could be given; their
	// tokens are counted. Binary forms have no meaningful token count.
	text bool
	enc  func(dst, json []byte) ([]byte, error)
	dec  func(dst, wire []byte) ([]byte, error)
}

// newForms builds every form the comparison measures.
func newForms() ([]form, error) {
	c := codec.New(codec.Config{})
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	zdec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxDecoded), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	var (
		scratch bytes.Buffer
		raw     []byte
		gzw, _  = gzip.NewWriterLevel(nil, gzipLevel)
		gzr     gzip.Reader
		brw     = brotli.NewWriterLevel(nil, brotliQuality)
		brr     = brotli.NewReader(nil)
		rd      bytes.Reader
	)
	// readAll appends everything r yields to dst, at most maxDecoded bytes.
	readAll := func(dst []byte, r io.Reader) ([]byte, error) {
		scratch.Reset()
		n, err := scratch.ReadFrom(io.LimitReader(r, maxDecoded+1))
		if err != nil {
			return nil, err
		}
		if n > maxDecoded {
			return nil, errTooLarge
		}
		return append(dst, scratch.Bytes()...), nil
	}
	// compressedBase64 is the form of a general compressor's output in
	// Base64, as text protocols carry it.
	compressedBase64 := func(name string, w resettableWriter, r resettableReader) form {
		return form{
			name: name, text: true,
			enc: func(dst, json []byte) ([]byte, error) {
				scratch.Reset()
				w.Reset(&scratch)
				if _, err := w.Write(json); err != nil {
					return nil, err
				}
				if err := w.Close(); err != nil {
					return nil, err
				}
				return base64.StdEncoding.AppendEncode(dst, scratch.Bytes()), nil
			},
			dec: func(dst, wire []byte) ([]byte, error) {
				var err error
				if raw, err = base64.StdEncoding.AppendDecode(raw[:0], wire); err != nil {
					return nil, err
				}
				rd.Reset(raw)
				if err := r.Reset(&rd); err != nil {
					return nil, err
				}
				return readAll(dst, r)
			},
		}
	}
	m2m := func(name string, binary bool, algo codec.Algorithm, enc tokennative.Encoding) form {
		return form{
			name: name,
			text: !binary,
			enc: func(dst, json []byte) ([]byte, error) {
				out, _, err := c.Encode(dst, json, codec.EncodeOptions{Algorithm: algo, Binary: binary, Encoding: enc})
				return out, err
			},
			dec: func(dst, wire []byte) ([]byte, error) {
				out, _, err := c.Decode(dst, wire, codec.DecodeOptions{TokenNativeBinary: binary && algo == codec.TokenNative})
				return out, err
			},
		}
	}
	forms := []form{
		{
			name: formJSON, text: true,
			enc: func(dst, json []byte) ([]byte, error) { return append(dst, json...), nil },
			dec: func(dst, wire []byte) ([]byte, error) { return append(dst, wire...), nil },
		},
		compressedBase64(formGzipBase64, gzw, &gzr),
		compressedBase64(formBrotliBase64, brw, brr),
		{
			name: formZstd,
			enc:  func(dst, json []byte) ([]byte, error) { return zenc.EncodeAll(json, dst), nil },
			dec:  func(dst, wire []byte) ([]byte, error) { return zdec.DecodeAll(wire, dst) },
		},
		m2m(formM2MText, false, codec.M2M, 0),
		m2m(formM2MBinary, true, codec.M2M, 0),
		m2m(formTNCl100kText, false, codec.TokenNative, tokennative.Cl100k),
		m2m(formTNCl100kBin, true, codec.TokenNative, tokennative.Cl100k),
		m2m(formTNO200kText, false, codec.TokenNative, tokennative.O200k),
		m2m(formTNO200kBinary, true, codec.TokenNative, tokennative.O200k),
	}
	return forms, nil
}

// formNames lists the forms in table order.
func formNames() []string {
	return []string{formJSON, formGzipBase64, formBrotliBase64, formZstd, formM2MText, formM2MBinary,
		formTNCl100kText, formTNCl100kBin, formTNO200kText, formTNO200kBinary}
}

// tokenCounter counts cl100k tokens.
type tokenCounter struct {
	tk  *tokennative.Tokenizer
	ids []uint32
}

func newTokenCounter() (*tokenCounter, error) {
	tk, err := tokennative.New(tokennative.Config{}).Tokenizer(tokennative.Cl100k)
	if err != nil {
		return nil, fmt.Errorf("bench: cl100k tokenizer: %w", err)
	}
	return &tokenCounter{tk: tk}, nil
}

func (t *tokenCounter) count(text []byte) (int, error) {
	var err error
	t.ids, err = t.tk.Encode(t.ids[:0], text)
	return len(t.ids), err
}

// resettableWriter and resettableReader are the compressors' writers and
// readers that are reused across documents.
type resettableWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

type resettableReader interface {
	io.Reader
	Reset(io.Reader) error
}
