package security

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
)

// An envelope opens to its body under the key that sealed it, with the
// same associated data and head; any change to head, body, tag or
// associated data fails verification, a shortened envelope is too short,
// and associated data over its bound is refused on both sides.
func TestEnvelope(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		key := seqBytes(1, 32)
		seal, open := mustKey(t, mode, key), mustKey(t, mode, key)
		aad, head := []byte("data header"), []byte{0x44, byte(mode), 7}
		for _, body := range [][]byte{nil, []byte("tokens")} {
			env, err := seal.SealEnvelope([]byte("pre"), aad, head, body)
			if err != nil || string(env[:3]) != "pre" || !bytes.Equal(env[3:3+len(head)], head) {
				t.Fatalf("%s: seal %q: %x, %v", mode, body, env, err)
			}
			env = env[3:]
			// The shortest envelope, an empty body, is exactly head and tag
			// (and nonce): it opens.
			got, err := open.OpenEnvelope(aad, bytes.Clone(env), len(head))
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%s: open %q: %q, %v", mode, body, got, err)
			}
			for i := range env {
				bad := bytes.Clone(env)
				bad[i] ^= 1
				if _, err := open.OpenEnvelope(aad, bad, len(head)); !errors.Is(err, ErrVerificationFailed) {
					t.Fatalf("%s: byte %d changed: %v, want ErrVerificationFailed", mode, i, err)
				}
			}
			if _, err := open.OpenEnvelope([]byte("other header"), bytes.Clone(env), len(head)); !errors.Is(err, ErrVerificationFailed) {
				t.Fatalf("%s: other associated data: %v", mode, err)
			}
			if _, err := open.OpenEnvelope(aad, bytes.Clone(env[:len(env)-len(body)-1]), len(head)); !errors.Is(err, ErrTooShort) {
				t.Fatalf("%s: %q one byte short of its tag: %v, want ErrTooShort", mode, body, err)
			}
		}
		// Associated data and head together: at most maxEnvelopeAAD bytes
		// for the AEAD; HMAC has no bound.
		for _, n := range []int{maxEnvelopeAAD - len(head), maxEnvelopeAAD - len(head) + 1} {
			long := bytes.Repeat([]byte{'a'}, n)
			env, err := seal.SealEnvelope(nil, long, head, []byte("x"))
			over := mode == frame.SecurityAEAD && n+len(head) > maxEnvelopeAAD
			if over != errors.Is(err, ErrMalformed) || (!over && err != nil) || (over && !strings.Contains(err.Error(), "257 bytes of associated data")) {
				t.Fatalf("%s: seal with %d bytes of associated data: %v", mode, n+len(head), err)
			}
			if over {
				env = append(append(bytes.Clone(head), make([]byte, nonceLen)...), make([]byte, aeadTagLen+1)...)
			}
			_, err = open.OpenEnvelope(long, env, len(head))
			if over != errors.Is(err, ErrMalformed) || (!over && err != nil) || (over && !strings.Contains(err.Error(), "257 bytes of associated data")) {
				t.Fatalf("%s: open with %d bytes of associated data: %v", mode, n+len(head), err)
			}
		}
	}
	none := mustKey(t, frame.SecurityNone, nil)
	if _, err := none.SealEnvelope(nil, nil, nil, []byte("x")); !errors.Is(err, ErrWrongMode) {
		t.Fatalf("seal in mode none: %v", err)
	}
	if _, err := none.OpenEnvelope(nil, []byte("x"), 0); !errors.Is(err, ErrWrongMode) {
		t.Fatalf("open in mode none: %v", err)
	}
}
