package security

import (
	"bytes"
	"errors"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// FuzzOpen feeds arbitrary bytes to every opening path with fixed keys: no
// panic; any output is an exact plain frame; and an input that opens is
// exactly what Protect makes of that output (so nothing but a genuine
// frame, byte for byte, is ever accepted). The same input is also used as a plain frame to Protect and
// as payload of a built frame; whatever Protect accepts must open again to
// the identical bytes, in place and not.
func FuzzOpen(f *testing.F) {
	key := repeat(0x42, 32)
	plainA := frameA(f)
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		p, err := Protect(nil, plainA, mode, key)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p)
	}
	f.Add(plainA)
	f.Add(unhex(f, frameAAEAD))
	for _, name := range []string{"req-chat-tiny-01.json", "resp-error-01.json", "stream-chunk-01.json"} {
		doc := testkit.CorpusFile(f, name)
		plain := buildPlain(frame.SchemaRequest, routingHeader, doc)
		f.Add(plain)
		for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
			p, err := Protect(nil, plain, mode, key)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(p)
		}
	}
	f.Add([]byte(frame.Prefix))
	f.Add([]byte("#M2M|1|\x14\x00\x01\x02"))

	keys := map[frame.Security]*FrameKey{}
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		keys[mode] = mustKey(f, mode, key)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		// 1. Opening arbitrary input.
		if out, mode, err := Open(nil, data, key); err == nil {
			checkPlainOutput(t, out)
			checkReprotects(t, mode, key, out, data)
		}
		for mode, k := range keys {
			work := bytes.Clone(data)
			out, err := k.Open(work[:0], work)
			if err != nil {
				continue
			}
			checkPlainOutput(t, out)
			checkReprotects(t, mode, key, out, data)
		}

		// 2. Arbitrary input as a plain frame, and as payload of one.
		built := buildPlain(frame.SchemaResponse, data[:len(data)%40], data)
		for _, plain := range [][]byte{data, built} {
			for mode, k := range keys {
				p, err := k.Protect(nil, plain)
				if err != nil {
					if bytes.Equal(plain, built) {
						t.Fatalf("%s: Protect refused a well-formed frame: %v", mode, err)
					}
					continue
				}
				back, err := k.Open(nil, p)
				if err != nil || !bytes.Equal(back, plain) {
					t.Fatalf("%s: Protect output did not open back: %v", mode, err)
				}
				// In place, with the capacity a forwarding buffer has.
				work := append(make([]byte, 0, len(plain)+AEADOverhead+HMACOverhead), plain...)
				p, err = k.Protect(work[:0], work)
				if err != nil {
					t.Fatalf("%s: in-place Protect: %v", mode, err)
				}
				back, err = k.Open(p[:0], p)
				if err != nil || !bytes.Equal(back, plain) {
					t.Fatalf("%s: in-place round trip: %v", mode, err)
				}
			}
		}
	})
}

// checkPlainOutput: Open's output is always an exact plain frame that
// Protect accepts.
func checkPlainOutput(t *testing.T, out []byte) {
	t.Helper()
	if _, err := plainLayout(out); err != nil {
		t.Fatalf("Open returned a frame that is not plain-shaped: %v", err)
	}
	if out[frame.OffSecurity] != byte(frame.SecurityNone) {
		t.Fatalf("Open returned security byte %#x", out[frame.OffSecurity])
	}
	if _, err := Protect(nil, out, frame.SecurityHMAC, repeat(1, 32)); err != nil && !errors.Is(err, ErrBufferOverlap) {
		t.Fatalf("Open's output is refused by Protect: %v", err)
	}
}

// checkReprotects: protecting Open's output again (with the nonce the input
// carried, for AEAD) reproduces the input exactly.
func checkReprotects(t *testing.T, mode frame.Security, key, plain, input []byte) {
	t.Helper()
	k := mustKey(t, mode, key)
	if mode == frame.SecurityAEAD {
		end, _ := headerEnd(input)
		k.rand = fixedNonces{input[end : end+nonceLen]}
	}
	again, err := k.Protect(nil, plain)
	if err != nil || !bytes.Equal(again, input) {
		t.Fatalf("%s: accepted input %x is not Protect's output %x (%v)", mode, input, again, err)
	}
}
