package negotiate

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/security"
)

var sealerKey = bytes.Repeat([]byte{0x5a}, 32)

// sealerPair is both ends of one direction: the sender's Sealer and the
// receiver's.
func sealerPair(t testing.TB, mode frame.Security, maxChannels int) (send, recv *Sealer) {
	t.Helper()
	send, err := NewSealer(mode, sealerKey, maxChannels)
	if err != nil {
		t.Fatal(err)
	}
	recv, err = NewSealer(mode, sealerKey, maxChannels)
	if err != nil {
		t.Fatal(err)
	}
	return send, recv
}

// seal seals a copy of frame A on ch, with room for the tag.
func seal(t testing.TB, s *Sealer, ch uint32) []byte {
	t.Helper()
	fr := frameA(t)
	fr = append(make([]byte, 0, len(fr)+security.MaxOverhead), fr...)
	out, err := s.Seal(ch, fr)
	if err != nil {
		t.Fatal(err)
	}
	if &out[0] != &fr[0] {
		t.Fatal("Seal did not work in place despite the spare capacity")
	}
	return out
}

func sequenceOf(t testing.TB, fr []byte) uint64 {
	t.Helper()
	// The sequence number is in the clear in every mode.
	seq, _, err := frame.Sequence(fr)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func TestSealerNumbersAndChecks(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		t.Run(mode.String(), func(t *testing.T) {
			send, recv := sealerPair(t, mode, 0)
			if send.Overhead() != security.Overhead(mode) || !send.Protected() {
				t.Fatalf("Overhead %d, Protected %v", send.Overhead(), send.Protected())
			}
			var on4 [][]byte
			for want := uint64(1); want <= 3; want++ {
				fr := seal(t, send, 4)
				if got := sequenceOf(t, fr); got != want {
					t.Fatalf("sealed with %d, want %d", got, want)
				}
				if len(fr) != len(frameA(t))+send.Overhead() {
					t.Fatalf("sealed frame of %d bytes", len(fr))
				}
				on4 = append(on4, fr)
			}
			if got := sequenceOf(t, seal(t, send, 8)); got != 1 {
				t.Fatalf("channels share a counter: %d", got)
			}

			open := func(ch uint32, fr []byte) error {
				_, err := recv.Open(ch, bytes.Clone(fr))
				return err
			}
			if err := open(4, on4[0]); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name string
				ch   uint32
				fr   []byte
			}{
				{"replay", 4, on4[0]},
				{"gap", 4, on4[2]},
				{"other channel's frame", 8, on4[1]},
			} {
				err := open(tc.ch, tc.fr)
				var se *SequenceError
				if !errors.Is(err, ErrReplay) || !errors.As(err, &se) || RefusalCode(err) != CodeReplay {
					t.Fatalf("%s: %v", tc.name, err)
				}
			}
			// A frame in step in everything but its channel: number 1,
			// written for channel 8, arriving on channel 12 where 1 is the
			// number expected. Only the channel can refuse it, and the
			// error must say that is why.
			other, _ := sealerPair(t, mode, 0)
			first8 := seal(t, other, 8)
			if recv.Expected(12) != 1 || sequenceOf(t, first8) != 1 {
				t.Fatalf("setup: channel 12 expects %d, frame numbered %d", recv.Expected(12), sequenceOf(t, first8))
			}
			err := open(12, first8)
			var se *SequenceError
			if !errors.Is(err, ErrReplay) || !errors.As(err, &se) || RefusalCode(err) != CodeReplay {
				t.Fatalf("frame for channel 8 opened on channel 12: %v", err)
			}
			if se.Channel != 12 || se.FrameChannel != 8 || se.Got != se.Want ||
				!strings.Contains(err.Error(), "for channel 8 arrived on channel 12") {
				t.Fatalf("refusal does not name the channel as its reason: %+v (%v)", se, err)
			}
			if recv.Expected(12) != 1 {
				t.Fatalf("refused frame advanced channel 12 to %d", recv.Expected(12))
			}
			tampered := bytes.Clone(on4[1])
			tampered[len(tampered)/2] ^= 1
			if err := open(4, tampered); err == nil || RefusalCode(err) != CodeBadTag {
				t.Fatalf("tampered: %v", err)
			}
			// Refusals did not advance the counter.
			plain, err := recv.Open(4, bytes.Clone(on4[1]))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(plain[frame.OffSequence+12:], frameA(t)[frame.OffSequence+12:]) {
				t.Fatal("opened frame differs from the sealed one")
			}
		})
	}
}

// TestSealerNoNumberBurned: a frame that cannot be protected takes no
// number, so the next frame on the channel is still in step.
func TestSealerNoNumberBurned(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		t.Run(mode.String(), func(t *testing.T) {
			send, recv := sealerPair(t, mode, 0)
			bad := [][]byte{frameA(t)[:frame.MinFrameLen-1]} // truncated
			if mode != frame.SecurityNone {
				protected := bytes.Clone(seal(t, send, 9))                          // already protected
				short := append(frameA(t)[:frame.MinFrameLen:frame.MinFrameLen], 1) // payload_len says more
				bad = append(bad, protected, short)
			}
			for i, fr := range bad {
				if _, err := send.Seal(4, fr); err == nil {
					t.Fatalf("bad frame %d sealed", i)
				}
			}
			fr := seal(t, send, 4)
			if got := sequenceOf(t, fr); got != 1 {
				t.Fatalf("after %d failures the first frame got number %d", len(bad), got)
			}
			if _, err := recv.Open(4, fr); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSealerOpenTooShort: input too short to say what it is (empty, or
// without a security byte) is refused with an error, in every mode and
// with or without feature compact, and takes no number.
func TestSealerOpenTooShort(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		for _, compact := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s compact=%v", mode, compact), func(t *testing.T) {
				_, recv := sealerPair(t, mode, 0)
				if compact {
					recv.EnableCompact()
				}
				for _, fr := range [][]byte{nil, {}, frameA(t)[:1], frameA(t)[:frame.OffSecurity]} {
					if _, err := recv.Open(4, fr); err == nil {
						t.Fatalf("%d bytes opened", len(fr))
					} else if mode == frame.SecurityNone && (!errors.Is(err, frame.ErrTruncated) || RefusalCode(err) != CodeBadFrame) {
						t.Fatalf("%d bytes in mode none: %v", len(fr), err)
					}
				}
				if recv.Expected(4) != 1 {
					t.Fatalf("refused input took a number: next %d", recv.Expected(4))
				}
			})
		}
	}
}

// TestSealerModeNone: numbers are written but not checked; a protected
// frame is refused.
func TestSealerModeNone(t *testing.T) {
	send, recv := sealerPair(t, frame.SecurityNone, 0)
	if send.Overhead() != 0 || send.Protected() {
		t.Fatal("mode none protects")
	}
	a, b := seal(t, send, 4), seal(t, send, 4)
	if sequenceOf(t, a) != 1 || sequenceOf(t, b) != 2 || !bytes.Equal(a[frame.OffSequence+12:], frameA(t)[frame.OffSequence+12:]) {
		t.Fatal("mode none: numbering")
	}
	for _, fr := range [][]byte{b, a, a} { // any order
		if _, err := recv.Open(4, fr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := recv.Open(4, a[:frame.OffSecurity]); !errors.Is(err, frame.ErrTruncated) || RefusalCode(err) != CodeBadFrame {
		t.Fatalf("frame without a security byte: %v", err)
	}
	hs, _ := sealerPair(t, frame.SecurityHMAC, 0)
	_, err := recv.Open(4, seal(t, hs, 4))
	if !errors.Is(err, security.ErrWrongMode) || RefusalCode(err) != CodeBadTag {
		t.Fatalf("protected frame in mode none: %v", err)
	}
}

func TestSealerBounded(t *testing.T) {
	send, recv := sealerPair(t, frame.SecurityHMAC, 3)
	for ch := range uint32(3) {
		if _, err := recv.Open(ch, seal(t, send, ch)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := send.Seal(12, frameA(t)); !errors.Is(err, ErrTooManyChannels) {
		t.Fatal(err)
	}
	other, _ := sealerPair(t, frame.SecurityHMAC, 0)
	_, err := recv.Open(12, seal(t, other, 12))
	if !errors.Is(err, ErrTooManyChannels) || RefusalCode(err) != CodeBadFrame {
		t.Fatal(err)
	}
	if _, err := send.Seal(1, frameA(t)); err != nil {
		t.Fatal("existing channel refused:", err)
	}
}

// TestSealerConcurrent: channels are sealed in parallel, and of racing
// opens of one frame exactly one is accepted.
func TestSealerConcurrent(t *testing.T) {
	send, recv := sealerPair(t, frame.SecurityAEAD, 0)
	const workers, each = 8, 100
	var wg sync.WaitGroup
	for w := range uint32(workers) {
		wg.Go(func() {
			for want := uint64(1); want <= each; want++ {
				fr := seal(t, send, w)
				if got := sequenceOf(t, fr); got != want {
					t.Errorf("channel %d: number %d, want %d", w, got, want)
				}
				if _, err := recv.Open(w, fr); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	fr := seal(t, send, 100)
	var mu sync.Mutex
	ok := 0
	for range workers {
		wg.Go(func() {
			if _, err := recv.Open(100, bytes.Clone(fr)); err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ok != 1 {
		t.Fatalf("%d opens accepted one frame", ok)
	}
}

// BenchmarkSealOpen: one frame sealed and opened in place; nothing is
// allocated.
func BenchmarkSealOpen(b *testing.B) {
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		b.Run(mode.String(), func(b *testing.B) {
			send, recv := sealerPair(b, mode, 0)
			plain := frameA(b)
			buf := make([]byte, 0, len(plain)+security.MaxOverhead)
			b.ReportAllocs()
			for b.Loop() {
				fr, err := send.Seal(4, append(buf[:0], plain...))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := recv.Open(4, fr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestRefusalCodeOfWrappedErrors(t *testing.T) {
	for err, want := range map[error]ErrorCode{
		fmt.Errorf("x: %w", &SequenceError{}):               CodeReplay,
		fmt.Errorf("x: %w", security.ErrVerificationFailed): CodeBadTag,
		fmt.Errorf("x: %w", security.ErrMalformed):          CodeBadTag,
		fmt.Errorf("x: %w", ErrTooManyChannels):             CodeBadFrame,
	} {
		if got := RefusalCode(err); got != want {
			t.Errorf("%v: %s, want %s", err, got, want)
		}
	}
}
