package openai

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// ReadAll returns what io.ReadAll returns, whatever the Content-Length
// said, and holds an announced body of up to 64 KiB in one buffer of its
// size.
func TestReadAll(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16) // 100 KiB
	for _, tc := range []struct {
		name      string
		size      int
		announced int64
	}{
		{"unknown", 1000, -1},
		{"exact", 1215, 1215},
		{"empty", 0, 0},
		{"less than announced", 500, 1215},
		{"more than announced", 5000, 1215},
		{"at the presize bound", maxPresize, maxPresize},
		{"over the presize bound", 100 << 10, 100 << 10},
	} {
		for _, r := range []struct {
			name string
			r    func([]byte) io.Reader
		}{
			{"whole", func(b []byte) io.Reader { return bytes.NewReader(b) }},
			{"byte by byte", func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) }},
			{"EOF with data", func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) }},
		} {
			got, err := ReadAll(r.r(body[:tc.size]), tc.announced)
			if err != nil || !bytes.Equal(got, body[:tc.size]) {
				t.Errorf("%s, %s: %d bytes, %v; want %d", tc.name, r.name, len(got), err, tc.size)
			}
			if tc.announced == int64(tc.size) && tc.size <= maxPresize && cap(got) != tc.size+1 {
				t.Errorf("%s, %s: capacity %d for %d bytes", tc.name, r.name, cap(got), tc.size)
			}
		}
	}
	boom := errors.New("boom")
	if got, err := ReadAll(iotest.TimeoutReader(bytes.NewReader(body[:100])), 1000); !errors.Is(err, iotest.ErrTimeout) || len(got) != 100 {
		t.Errorf("a failing reader: %d bytes, %v", len(got), err)
	}
	if _, err := ReadAll(iotest.ErrReader(boom), 10); !errors.Is(err, boom) {
		t.Errorf("a failing reader: %v", err)
	}
}

func BenchmarkReadAll(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1215)
	for _, bc := range []struct {
		name string
		f    func(io.Reader) ([]byte, error)
	}{
		{"sized", func(r io.Reader) ([]byte, error) { return ReadAll(r, int64(len(body))) }},
		{"io.ReadAll", io.ReadAll},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var r bytes.Reader
			for b.Loop() {
				r.Reset(body)
				if _, err := bc.f(&r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
