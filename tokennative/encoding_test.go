package tokennative

import (
	"testing"

	"github.com/m2md/m2md/negotiate"
)

// The tokenizer bytes a DATA receiver accepts as the first byte of a
// TokenNative frame (negotiate, docs/protocol.md §4) are exactly the
// defined encodings: the daemon does not link this package to know them.
func TestTokenizerBytesMatchNegotiate(t *testing.T) {
	for b := range 256 {
		if got, want := negotiate.IsTokenizerByte(byte(b)), Encoding(b).Valid(); got != want {
			t.Fatalf("byte %#02x: negotiate.IsTokenizerByte %v, Encoding.Valid %v", b, got, want)
		}
	}
}
