package codec

import (
	"bytes"
	"testing"

	"github.com/m2md/m2md/frame"
)

// FuzzDecode drives the auto-detecting entry point: it must never panic,
// never leave partial output in dst on error, and anything it decodes as a
// known form must not exceed the decompression limit.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"#M2M|1|IgABAAAAAAAAAAAAAAAAAAAAAAAGZ3B0LTRvAQECCtejOz4AAABuYFWkeyJtb2RlbCI6ImdwdC00byIsIm1lc3NhZ2VzIjpbeyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJIaSJ9XX0=",
		"#TK|C|sk0L/Q4A", "#M2M[v3.0]|DATA:G0gA4IzUYs0Z7kSQt5Rd17Rmoim2N9N+ikUHHHLgcMCwBRIIBrUHJJJVAlfrvNoC86Y93dhTpQBYJ1jxLf74",
		"#M2M|hoAiSGVsbG+FfQ==", `#T1|{"M":"g4o","messages":[]}`, "#M2M[v2.0]|DATA:eJyrVkrOzy0oSi0uTk1RslJQSi9KLS7JzEtXqgUAdQoIxQ==",
		"plain", "",
	} {
		f.Add([]byte(s), false)
	}
	c := New(Config{Limits: frame.Limits{MaxDecompressed: 1 << 20}})
	wire, _, _ := c.Encode(nil, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"`+string(bytes.Repeat([]byte("x"), 200))+`"}]}`), EncodeOptions{Algorithm: M2M, Binary: true})
	f.Add(wire, false)
	f.Add([]byte{0, 0xb2, 0x4d, 0x0b}, true)
	f.Fuzz(func(t *testing.T, in []byte, tkBinary bool) {
		dst := []byte("prefix")
		out, _, err := c.Decode(dst, in, DecodeOptions{Key: hmacKey, TokenNativeBinary: tkBinary})
		if err != nil {
			if string(out) != "prefix" {
				t.Fatalf("partial output on error: %q", out)
			}
			return
		}
		if len(out)-len(dst) > 1<<20 && len(out)-len(dst) != len(in) {
			t.Fatalf("decoded %d bytes past the 1 MiB limit", len(out)-len(dst))
		}
	})
}
