package negotiate

import (
	"bytes"
	"errors"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/security"
)

// A sealed TokenNative envelope opens only with the same key, the same DATA
// header and the channel's next sequence number, in both modes; a refusal
// takes no number (docs/protocol.md §4.2).
func TestSealedTokenNative(t *testing.T) {
	tn := []byte{0x00, 0x81, 0x01, 0x05, 0x7f} // cl100k, three tokens
	hdr, _ := AppendDataHeader(nil, 0, 1, "bob")
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		t.Run(mode.String(), func(t *testing.T) {
			key := seq(0x42, 32)
			send, _ := NewSealer(mode, key, 0)
			recv, _ := NewSealer(mode, key, 0)
			env, err := send.SealTokenNative(nil, 4, hdr, tn)
			if err != nil {
				t.Fatal(err)
			}
			if !IsSealedTN(env) || env[1] != byte(mode) || len(env) != len(tn)+SealedTNOverhead(mode) {
				t.Fatalf("envelope %x", env)
			}
			if mode == frame.SecurityAEAD && bytes.Contains(env, tn[1:]) {
				t.Fatal("aead envelope shows the tokens")
			}
			otherHdr, _ := AppendDataHeader(nil, 0, 2, "bob")
			flip := func(i int) []byte { e := bytes.Clone(env); e[i] ^= 1; return e }
			for name, try := range map[string]func() error{
				"other header":  func() error { _, err := recv.OpenTokenNative(4, otherHdr, bytes.Clone(env)); return err },
				"other channel": func() error { _, err := recv.OpenTokenNative(8, hdr, bytes.Clone(env)); return err },
				"sequence byte": func() error { _, err := recv.OpenTokenNative(4, hdr, flip(2)); return err },
				"last byte":     func() error { _, err := recv.OpenTokenNative(4, hdr, flip(len(env)-1)); return err },
				"mode byte":     func() error { _, err := recv.OpenTokenNative(4, hdr, flip(1)); return err },
				"truncated":     func() error { _, err := recv.OpenTokenNative(4, hdr, env[:10]); return err },
			} {
				err := try()
				if err == nil || RefusalCode(err) == "" {
					t.Fatalf("%s: opened (%v)", name, err)
				}
			}
			got, err := recv.OpenTokenNative(4, hdr, bytes.Clone(env))
			if err != nil || !bytes.Equal(got, tn) {
				t.Fatalf("open: %x, %v", got, err)
			}
			if _, err := recv.OpenTokenNative(4, hdr, bytes.Clone(env)); !errors.Is(err, ErrReplay) || RefusalCode(err) != CodeReplay {
				t.Fatalf("replayed envelope: %v", err)
			}
			// The channel's numbers are shared with M2M v1 frames.
			if n := recv.Expected(4); n != 2 {
				t.Fatalf("next expected %d, want 2", n)
			}
		})
	}
	none, _ := NewSealer(frame.SecurityNone, nil, 0)
	if _, err := none.SealTokenNative(nil, 0, hdr, tn); !errors.Is(err, security.ErrWrongMode) {
		t.Fatalf("mode none: %v", err)
	}
}

// FuzzOpenTokenNative: arbitrary envelopes never panic, and open only when
// they are the sealer's own (the seeds) with their own header.
func FuzzOpenTokenNative(f *testing.F) {
	key := seq(0x42, 32)
	hdr, _ := AppendDataHeader(nil, FlagReply, 9, "")
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		s, _ := NewSealer(mode, key, 0)
		env, err := s.SealTokenNative(nil, 0, hdr, []byte{0x01, 0x05, 0x06})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(mode), hdr, env)
	}
	f.Add(uint8(2), []byte{}, []byte{'T'})
	f.Fuzz(func(t *testing.T, m uint8, hdr, env []byte) {
		mode := frame.SecurityHMAC + frame.Security(m%2)
		s, _ := NewSealer(mode, key, 0)
		tn, err := s.OpenTokenNative(0, hdr, env)
		if err != nil {
			if RefusalCode(err) == "" {
				t.Fatalf("unclassified refusal %v", err)
			}
			return
		}
		if len(tn) == 0 || len(tn) > len(env)-sealedTNHeadLen {
			t.Fatalf("opened %d bytes from a %d-byte envelope", len(tn), len(env))
		}
	})
}

// An authentic envelope whose content begins with no tokenizer byte is
// refused as bad_frame, and has taken its number (docs/protocol.md §4).
func TestSealedTokenNativeUnknownContent(t *testing.T) {
	hdr, _ := AppendDataHeader(nil, 0, 1, "bob")
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		key := seq(0x42, 32)
		send, _ := NewSealer(mode, key, 0)
		recv, _ := NewSealer(mode, key, 0)
		env, err := send.SealTokenNative(nil, 4, hdr, []byte{'#', 0x81, 0x01})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := recv.OpenTokenNative(4, hdr, env); !errors.Is(err, ErrUnknownFrame) || RefusalCode(err) != CodeBadFrame {
			t.Fatalf("%s: %v", mode, err)
		}
		if n := recv.Expected(4); n != 2 {
			t.Fatalf("%s: next expected %d, want 2", mode, n)
		}
	}
}
