package certs

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseFingerprint: any string either parses (and then survives a
// format/parse round trip unchanged) or fails with ErrBadFingerprint.
func FuzzParseFingerprint(f *testing.F) {
	const fp = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	f.Add(fp)
	f.Add(FormatFingerprint(fp))
	f.Add(strings.ToUpper(fp))
	f.Add(fp[:63] + "g")
	f.Add(strings.Replace(FormatFingerprint(fp), ":", ";", 3))
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		sum, err := ParseFingerprint(s)
		if err != nil {
			if !errors.Is(err, ErrBadFingerprint) {
				t.Fatalf("error %v is not ErrBadFingerprint", err)
			}
			return
		}
		again, err := ParseFingerprint(FormatFingerprint(s))
		if err != nil || again != sum {
			t.Fatalf("round trip of %q: %x, %v; want %x", s, again, err, sum)
		}
	})
}
