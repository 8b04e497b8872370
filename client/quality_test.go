package client

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
)

// payload returns the payload section of an M2M v1 frame.
func payload(t *testing.T, fr []byte) []byte {
	t.Helper()
	var h frame.Header
	if err := frame.ReadHeader(fr, &h); err != nil {
		t.Fatal(err)
	}
	return fr[frame.PrefixLen+h.HeaderLen+8:]
}

// echoBody is a corpus chat request the fake daemon echoes back.
func echoBody(t *testing.T) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("..", "testdata", "corpus", "req-chat-1k-01.json"))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Replace(body, []byte(`"model"`), []byte(`"model":"echo","original_model"`), 1)
}

// sentFrame is the frame a client with opt sends for body, as the fake
// daemon d received it.
func sentFrame(t *testing.T, d *fakeDaemon, opt Options, body []byte) []byte {
	t.Helper()
	c := dial(t, d, "ws", opt)
	defer c.Close()
	if _, err := c.Do(testCtx(t), body); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.echoed
}

// The payloads a client compresses use Options.CompressionQuality, the
// reference's quality 5 unless it is set: the bytes on the wire are those of
// the encoder at that quality.
func TestCompressionQuality(t *testing.T) {
	leakCheck(t)
	d := newFakeDaemon(t, fakeConfig{})
	body := echoBody(t)
	for _, tc := range []struct {
		set, want int
	}{{0, 5}, {1, 1}, {11, 11}} {
		sent := sentFrame(t, d, Options{CompressionQuality: tc.set}, body)
		want, err := frame.AppendEncode(nil, body, frame.Limits{Quality: tc.want})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(payload(t, sent), payload(t, want)) {
			t.Errorf("CompressionQuality %d: payload of %d bytes is not quality %d's (%d bytes)", tc.set, len(payload(t, sent)), tc.want, len(payload(t, want)))
		}
	}
	for _, q := range []int{-1, 12} {
		if _, err := Dial(testCtx(t), d.url("ws"), Options{CompressionQuality: q}); err == nil || !strings.Contains(err.Error(), "CompressionQuality") {
			t.Errorf("CompressionQuality %d: %v, want an error naming the option", q, err)
		}
	}
}

// Options.CompressFrom: a document shorter than it goes stored, as the
// encoder stores it; the reference's 100 bytes unless it is set; never
// compressed when it is negative.
func TestCompressFrom(t *testing.T) {
	leakCheck(t)
	d := newFakeDaemon(t, fakeConfig{})
	body := echoBody(t)
	for _, tc := range []struct {
		set        int
		compressed bool
	}{{0, true}, {len(body), true}, {len(body) + 1, false}, {4 << 10, false}, {-1, false}} {
		sent := sentFrame(t, d, Options{CompressFrom: tc.set}, body)
		var h frame.Header
		if err := frame.ReadHeader(sent, &h); err != nil {
			t.Fatal(err)
		}
		if h.Flags.Compressed() != tc.compressed || (!tc.compressed && !bytes.Equal(payload(t, sent), body)) {
			t.Errorf("CompressFrom %d, a %d-byte document: compressed %v, want %v", tc.set, len(body), h.Flags.Compressed(), tc.compressed)
		}
	}
}
