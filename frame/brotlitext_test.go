package frame

import (
	"bytes"
	"testing"
)

// The Brotli text form states the smallest of its three windows (16, 18
// and 22 bits) that covers the input, Brotli reaching back 2^WBITS - 16
// bytes: the stream header's WBITS (RFC 7932 §9.1) tells.
func TestBrotliTextWindow(t *testing.T) {
	wbits := func(text []byte) int {
		t.Helper()
		s, err := b64.DecodeString(string(text[len(brotliTextPrefix):]))
		if err != nil || len(s) == 0 {
			t.Fatalf("Base64: %v", err)
		}
		if s[0]&1 == 0 {
			return 16
		}
		if n := int(s[0]>>1) & 7; n != 0 {
			return 17 + n
		}
		t.Fatalf("unexpected WBITS code %#02x", s[0])
		return 0
	}
	for _, tc := range []struct{ n, want int }{
		{1, 16}, {1<<16 - 16, 16}, {1<<16 - 15, 18}, {1<<18 - 16, 18}, {1<<18 - 15, 22},
	} {
		data := bytes.Repeat([]byte("abcdefgh"), tc.n/8+1)[:tc.n]
		text, err := AppendEncodeBrotliText(nil, data, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if got := wbits(text); got != tc.want {
			t.Errorf("%d bytes: window %d bits, want %d", tc.n, got, tc.want)
		}
		if back, err := AppendDecodeBrotliText(nil, text, Limits{}); err != nil || !bytes.Equal(back, data) {
			t.Errorf("%d bytes: round trip %v", tc.n, err)
		}
	}
}
