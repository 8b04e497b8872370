package legacy

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

const zlibHello = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello, world!"}]}`

// Streams written by CPython's zlib module (levels 6, 9, 0 and 1), an
// implementation independent of Go's compress/zlib.
var zlibForeignVectors = []string{
	"#M2M[v2.0]|DATA:eJyrVsrNT0nNUbJSSi8o0TXJV9JRyk0tLk5MTy1WsoquVirKz0kFSpYWpxYBpZLz80pS80qAAh6pOTn5Ogrl+UU5KYpKtbG1AHe4GD4=",
	"#M2M[v2.0]|DATA:eNqrVsrNT0nNUbJSSi8o0TXJV9JRyk0tLk5MTy1WsoquVirKz0kFSpYWpxYBpZLz80pS80qAAh6pOTn5Ogrl+UU5KYpKtbG1AHe4GD4=",
	"#M2M[v2.0]|DATA:eAEBSQC2/3sibW9kZWwiOiJncHQtNG8iLCJtZXNzYWdlcyI6W3sicm9sZSI6InVzZXIiLCJjb250ZW50IjoiSGVsbG8sIHdvcmxkISJ9XX13uBg+",
	"#M2M[v2.0]|DATA:eAGrVsrNT0nNUbJSSi8o0TXJV9JRyk0tLk5MTy1WsoquVirKz0kFSpYWpxYBpZLz80pS80qAAh6pOTn5Ogrl+UU5KYpKtbG1AHe4GD4=",
}

func TestDecodeZlibForeignStreams(t *testing.T) {
	for _, v := range zlibForeignVectors {
		got, err := DecodeZlib(nil, []byte(v), frame.Limits{})
		if err != nil || string(got) != zlibHello {
			t.Errorf("DecodeZlib(%s) = %q, %v", v, got, err)
		}
	}
}

func TestZlibCorpusRoundTrip(t *testing.T) {
	for _, f := range testkit.Corpus(t) {
		enc, err := EncodeZlib(nil, f.Data, frame.Limits{})
		if err != nil {
			t.Fatalf("%s: EncodeZlib: %v", f.Name, err)
		}
		// The wire form, read back with the standard library alone.
		body, ok := bytes.CutPrefix(enc, []byte(PrefixZlib))
		if !ok {
			t.Fatalf("%s: missing prefix", f.Name)
		}
		raw, err := base64.StdEncoding.Strict().DecodeString(string(body))
		if err != nil {
			t.Fatalf("%s: body is not strict Base64: %v", f.Name, err)
		}
		zr, err := zlib.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: body is not zlib: %v", f.Name, err)
		}
		var plain bytes.Buffer
		if _, err := plain.ReadFrom(zr); err != nil || !bytes.Equal(plain.Bytes(), f.Data) {
			t.Fatalf("%s: standard zlib reads something else (err %v)", f.Name, err)
		}

		dec, err := DecodeZlib([]byte("x"), enc, frame.Limits{})
		if err != nil || !bytes.Equal(dec[1:], f.Data) || dec[0] != 'x' {
			t.Fatalf("%s: round trip failed: %v", f.Name, err)
		}
	}
}

func TestDecodeZlibRejects(t *testing.T) {
	good, err := EncodeZlib(nil, []byte(zlibHello), frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	body := good[len(PrefixZlib):]
	raw, _ := base64.StdEncoding.DecodeString(string(body))
	wire := func(b []byte) string { return PrefixZlib + base64.StdEncoding.EncodeToString(b) }
	flip := func(i int) []byte {
		c := bytes.Clone(raw)
		c[(i+len(c))%len(c)] ^= 0x55
		return c
	}
	var rawDeflate bytes.Buffer
	{
		zw, _ := zlib.NewWriterLevelDict(&rawDeflate, 6, []byte("dictionary"))
		zw.Write([]byte(zlibHello))
		zw.Close()
	}
	var latin1 bytes.Buffer
	{
		zw := zlib.NewWriter(&latin1)
		zw.Write([]byte("caf\xe9"))
		zw.Close()
	}

	tests := []struct {
		name string
		in   string
		want error
	}{
		{"no prefix", string(body), ErrMalformed},
		{"v3 prefix", "#M2M[v3.0]|DATA:" + string(body), ErrMalformed},
		{"prefix without DATA:", "#M2M[v2.0]|" + string(body), ErrMalformed},
		{"empty body", PrefixZlib, ErrMalformed},
		{"not Base64", PrefixZlib + "{not base64}", ErrMalformed},
		{"unpadded Base64", strings.TrimRight(string(good), "="), ErrMalformed},
		{"line break in Base64", PrefixZlib + string(body[:8]) + "\r\n" + string(body[8:]), ErrMalformed},
		{"truncated stream", wire(raw[:len(raw)-6]), ErrMalformed},
		{"bad checksum", wire(flip(-1)), ErrMalformed},
		{"bad header", wire(flip(0)), ErrMalformed},
		{"corrupt data", wire(flip(len(raw) / 2)), ErrMalformed},
		{"trailing bytes", wire(append(bytes.Clone(raw), 0)), ErrMalformed},
		{"preset dictionary", wire(rawDeflate.Bytes()), ErrMalformed},
		{"not UTF-8", wire(latin1.Bytes()), ErrNotUTF8},
		{"message too long", string(good), ErrLimit},
	}
	for _, tc := range tests {
		lim := frame.Limits{}
		if tc.name == "message too long" {
			lim.MaxMessage = len(good) - 1
		}
		out, err := DecodeZlib([]byte("keep"), []byte(tc.in), lim)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: error = %v, want %v", tc.name, err, tc.want)
		}
		if string(out) != "keep" {
			t.Errorf("%s: dst changed to %q", tc.name, out)
		}
	}
}

func TestEncodeZlibRejects(t *testing.T) {
	if _, err := EncodeZlib(nil, []byte("caf\xe9"), frame.Limits{}); !errors.Is(err, ErrNotUTF8) {
		t.Errorf("non-UTF-8 text: %v", err)
	}
	if _, err := EncodeZlib(nil, []byte(zlibHello), frame.Limits{MaxDecompressed: 10}); !errors.Is(err, ErrLimit) {
		t.Errorf("text over MaxDecompressed: %v", err)
	}
	if _, err := EncodeZlib(nil, []byte(zlibHello), frame.Limits{MaxMessage: 40}); !errors.Is(err, ErrLimit) {
		t.Errorf("message over MaxMessage: %v", err)
	}
	if out, err := EncodeZlib([]byte("x"), nil, frame.Limits{}); err != nil || !bytes.HasPrefix(out, []byte("x"+PrefixZlib)) {
		t.Errorf("empty text: %q, %v", out, err)
	} else if dec, err := DecodeZlib(nil, out[1:], frame.Limits{}); err != nil || len(dec) != 0 {
		t.Errorf("empty text round trip: %q, %v", dec, err)
	}
}

var zlibBomb = sync.OnceValue(func() []byte {
	// 17 MiB of zeros, just past the default cap, in under 30 KB on the wire.
	var buf bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&buf, zlib.BestSpeed)
	zeros := make([]byte, 1<<20)
	for i := 0; i < 17; i++ {
		zw.Write(zeros)
	}
	zw.Close()
	return []byte(PrefixZlib + base64.StdEncoding.EncodeToString(buf.Bytes()))
})

func TestDecodeZlibBomb(t *testing.T) {
	bomb := zlibBomb()
	for _, tc := range []struct {
		lim      frame.Limits
		maxAlloc uint64
	}{
		{frame.Limits{MaxDecompressed: 1 << 20}, 4 << 20},
		{frame.Limits{}, 40 << 20}, // default cap 16 MiB, buffer grows by doubling
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := DecodeZlib(nil, bomb, tc.lim)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrLimit) || out != nil {
			t.Fatalf("bomb with MaxDecompressed %d: %v, %d bytes out", tc.lim.MaxDecompressed, err, len(out))
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > tc.maxAlloc {
			t.Errorf("bomb with MaxDecompressed %d allocated %d bytes, want <= %d", tc.lim.MaxDecompressed, alloc, tc.maxAlloc)
		}
	}
	// Exactly at the cap is fine.
	text := bytes.Repeat([]byte("a"), 1000)
	enc, _ := EncodeZlib(nil, text, frame.Limits{})
	if _, err := DecodeZlib(nil, enc, frame.Limits{MaxDecompressed: 1000}); err != nil {
		t.Errorf("output exactly at the cap: %v", err)
	}
	if _, err := DecodeZlib(nil, enc, frame.Limits{MaxDecompressed: 999}); !errors.Is(err, ErrLimit) {
		t.Errorf("output one byte over the cap: %v", err)
	}
}
