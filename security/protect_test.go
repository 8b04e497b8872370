package security

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// Wire reference §4.2, worked examples on frame A with key 32 × 0x42.
const (
	frameAHMACTag  = "f68418f2ce190619a2c4ccf635f0e9e9c0651a3bbbc6627037da630e16bc6672"
	frameAHMACText = "#M2M|1|IgABAQAAAAAAAAAAAAAAAAAAAAAGZ3B0LTRvAQECCtejOz4AAABuYFWkeyJtb2RlbCI6ImdwdC00byIsIm1lc3NhZ2VzIjpbeyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJIaSJ9XX32hBjyzhkGGaLEzPY18OnpwGUaO7vGYnA32mMOFrxmcg=="
	frameAAEAD     = `23 4d 32 4d 7c 31 7c 22 00 01 02 00 00 00 00 00
		00 00 00 00 00 00 00 00 00 00 00 06 67 70 74 2d
		34 6f 01 01 02 0a d7 a3 3b 01 02 03 04 05 06 07
		08 09 0a 0b 0c 80 11 93 f7 21 28 a7 34 df c7 94
		80 11 63 bb d2 ff 70 b2 4f bb 46 29 e8 02 2e a9
		2e 01 f0 be 5c fa de c8 57 05 67 9e bb 54 93 dd
		02 c5 8c 8f 41 bc c9 c5 df b8 c7 2e 2a 9d 33 55
		c3 4f 4b 13 58 17 0c d1 08 08 1a 5f d5 24 7a c5
		09 77 c2 f4 85 0d 7d 1e 09 2e 59`
)

func textForm(f []byte) string {
	return frame.Prefix + base64.StdEncoding.EncodeToString(f[frame.PrefixLen:])
}

func TestHMACVectorFrameA(t *testing.T) {
	plain := frameA(t)
	key := repeat(0x42, 32)
	got, err := Protect(nil, plain, frame.SecurityHMAC, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(plain)+32 {
		t.Fatalf("hmac frame is %d bytes, want plain %d + 32", len(got), len(plain))
	}
	if got[frame.OffSecurity] != 0x01 {
		t.Fatalf("security byte %#x, want 01", got[frame.OffSecurity])
	}
	if tag := hex.EncodeToString(got[len(plain):]); tag != frameAHMACTag {
		t.Fatalf("tag\n got %s\nwant %s", tag, frameAHMACTag)
	}
	if txt := textForm(got); txt != frameAHMACText {
		t.Fatalf("text form\n got %s\nwant %s", txt, frameAHMACText)
	}
	back, mode, err := Open(nil, got, key)
	if err != nil || mode != frame.SecurityHMAC {
		t.Fatalf("Open: mode %s, err %v", mode, err)
	}
	if !bytes.Equal(back, plain) {
		t.Fatalf("Open gave\n%x\nwant\n%x", back, plain)
	}
	if plain[frame.OffSecurity] != 0 {
		t.Fatal("Protect with a fresh dst modified its input")
	}
}

func TestAEADVectorFrameA(t *testing.T) {
	plain := frameA(t)
	key := repeat(0x42, 32)
	k := mustKey(t, frame.SecurityAEAD, key)
	k.rand = fixedNonces{seqBytes(0x01, 12)}
	got, err := k.Protect(nil, plain)
	if err != nil {
		t.Fatal(err)
	}
	want := unhex(t, frameAAEAD)
	if !bytes.Equal(got, want) {
		t.Fatalf("aead frame\n got %x\nwant %x", got, want)
	}
	back, mode, err := Open(nil, got, key)
	if err != nil || mode != frame.SecurityAEAD {
		t.Fatalf("Open: mode %s, err %v", mode, err)
	}
	if !bytes.Equal(back, plain) {
		t.Fatalf("Open gave\n%x\nwant\n%x", back, plain)
	}
}

// Wire reference §11, AEAD primitive: also shows that only the first 32
// bytes of longer key material are used.
func TestAEADPrimitiveVector(t *testing.T) {
	key := append(repeat(0x42, 32), repeat(0xee, 8)...)
	k := mustKey(t, frame.SecurityAEAD, key)
	nonce := seqBytes(0x01, 12)
	out := k.aead.Seal(append([]byte(nil), nonce...), nonce, []byte("Hello, World!"), []byte("associated data"))
	const want = "0102030405060708090a0b0cf674ff9b2064d2c7cb97958b54713adab24613e314743854d1cfc00288"
	if got := hex.EncodeToString(out); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if _, err := NewFrameKey(frame.SecurityAEAD, repeat(0x42, 16)); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("16-byte aead key: %v, want ErrInvalidKey", err)
	}
	if _, err := NewFrameKey(frame.SecurityAEAD, repeat(0x42, 31)); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("31-byte aead key: %v, want ErrInvalidKey", err)
	}
}

// Wire reference §11, HMAC primitive.
func TestHMACPrimitiveVector(t *testing.T) {
	k := mustKey(t, frame.SecurityHMAC, repeat(0, 32))
	k.mac.Write([]byte("Hello, World!"))
	const want = "2bbcfa9524f3218c7a34b30e6936f8b1a4516cb097f1a85a1c7d98b5977ec769"
	if got := hex.EncodeToString(k.mac.Sum(nil)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	for _, n := range []int{0, 8, 15} {
		if _, err := NewFrameKey(frame.SecurityHMAC, repeat(1, n)); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("%d-byte hmac key: %v, want ErrInvalidKey", n, err)
		}
	}
	if _, err := NewFrameKey(frame.SecurityHMAC, repeat(1, 16)); err != nil {
		t.Fatalf("16-byte hmac key refused: %v", err)
	}
}

func TestModeNoneCopies(t *testing.T) {
	plain := frameA(t)
	got, err := Protect(nil, plain, frame.SecurityNone, nil)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("mode none: %v, %x", err, got)
	}
	back, mode, err := Open(nil, got, nil)
	if err != nil || mode != frame.SecurityNone || !bytes.Equal(back, plain) {
		t.Fatalf("Open of a plain frame: mode %s, err %v", mode, err)
	}
}

// Every byte of a protected frame matters: flipping any bit anywhere must
// make opening fail, through both entry points.
func TestTamperEveryByte(t *testing.T) {
	key := repeat(0x42, 32)
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		t.Run(mode.String(), func(t *testing.T) {
			k := mustKey(t, mode, key)
			good, err := k.Protect(nil, frameA(t))
			if err != nil {
				t.Fatal(err)
			}
			for i := range good {
				for _, bit := range []byte{0x01, 0x80} {
					bad := bytes.Clone(good)
					bad[i] ^= bit
					if out, err := k.Open(nil, bad); err == nil {
						t.Fatalf("byte %d ^ %#x: FrameKey.Open accepted %x", i, bit, out)
					}
					if out, m, err := Open(nil, bad, key); err == nil {
						t.Fatalf("byte %d ^ %#x: Open accepted (mode %s) %x", i, bit, m, out)
					}
					// What the failure is called depends on where the bit is.
					_, err := k.Open(nil, bad)
					wantErr := ErrVerificationFailed
					if mode == frame.SecurityAEAD {
						wantErr = ErrDecryptionFailed
					}
					switch {
					case i < frame.PrefixLen:
						wantErr = ErrMalformed
					case i == frame.OffSecurity:
						wantErr = ErrWrongMode
					case mode == frame.SecurityAEAD && (i == frame.OffHeaderLen || i == frame.OffHeaderLen+1):
						wantErr = nil // header_len moves the AAD boundary: any of several errors
					}
					if wantErr != nil && !errors.Is(err, wantErr) {
						t.Fatalf("byte %d ^ %#x: %v, want %v", i, bit, err, wantErr)
					}
				}
			}
			// Truncation and extension are tampering too.
			for _, bad := range [][]byte{good[:len(good)-1], append(bytes.Clone(good), 0)} {
				if _, err := k.Open(nil, bad); err == nil {
					t.Fatalf("length %d accepted", len(bad))
				}
			}
		})
	}
}

func TestWrongKey(t *testing.T) {
	for _, tc := range []struct {
		mode frame.Security
		want error
	}{
		{frame.SecurityHMAC, ErrVerificationFailed},
		{frame.SecurityAEAD, ErrDecryptionFailed},
	} {
		p, err := Protect(nil, frameA(t), tc.mode, repeat(0x42, 32))
		if err != nil {
			t.Fatal(err)
		}
		other := repeat(0x42, 32)
		other[31] ^= 1
		if _, _, err := Open(nil, p, other); !errors.Is(err, tc.want) {
			t.Fatalf("%s with a wrong key: %v, want %v", tc.mode, err, tc.want)
		}
	}
}

func TestNoncesUnique(t *testing.T) {
	k := mustKey(t, frame.SecurityAEAD, repeat(0x42, 32))
	plain := frameA(t)
	end := frame.PrefixLen + int(binary.LittleEndian.Uint16(plain[frame.OffHeaderLen:]))
	seen := make(map[[12]byte]bool, 1000)
	var buf []byte
	for range 1000 {
		var err error
		buf, err = k.Protect(buf[:0], plain)
		if err != nil {
			t.Fatal(err)
		}
		n := [12]byte(buf[end : end+12])
		if seen[n] {
			t.Fatalf("nonce %x repeated", n)
		}
		seen[n] = true
	}
}

// Every corpus document, carried as a frame payload, survives protection
// in each mode byte for byte, with a fresh dst and in place.
func TestCorpusRoundTrip(t *testing.T) {
	modes := map[frame.Security]int{frame.SecurityNone: 0, frame.SecurityHMAC: HMACOverhead, frame.SecurityAEAD: AEADOverhead}
	for mode, overhead := range modes {
		k := mustKey(t, mode, repeat(0x5a, 32))
		for _, d := range testkit.Corpus(t) {
			name, doc := d.Name, d.Data
			plain := buildPlain(frame.SchemaRequest, routingHeader, doc)
			p, err := k.Protect(nil, plain)
			if err != nil {
				t.Fatalf("%s %s: Protect: %v", mode, name, err)
			}
			if len(p) != len(plain)+overhead {
				t.Fatalf("%s %s: %d bytes, want %d", mode, name, len(p), len(plain)+overhead)
			}
			if mode == frame.SecurityAEAD && bytes.Contains(p, doc[:min(len(doc), 64)]) {
				t.Fatalf("%s: aead frame contains the plaintext", name)
			}
			back, err := k.Open(nil, p)
			if err != nil || !bytes.Equal(back, plain) {
				t.Fatalf("%s %s: Open: %v", mode, name, err)
			}
			// In place: the protected frame is opened where it lies, and
			// protected again where it lies.
			work := append(make([]byte, 0, len(p)), p...)
			back, err = k.Open(work[:0], work)
			if err != nil || !bytes.Equal(back, plain) || &back[0] != &work[0] {
				t.Fatalf("%s %s: in-place Open: %v", mode, name, err)
			}
			again, err := k.Protect(back[:0], back)
			if err != nil || len(again) != len(p) || &again[0] != &work[0] {
				t.Fatalf("%s %s: in-place Protect: %v", mode, name, err)
			}
			if back, err = k.Open(nil, again); err != nil || !bytes.Equal(back, plain) {
				t.Fatalf("%s %s: open after in-place Protect: %v", mode, name, err)
			}
		}
	}
}

// Appending to a dst that already holds bytes keeps them.
func TestAppendsToDst(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		k := mustKey(t, mode, repeat(7, 32))
		head := []byte("DATA-HEADER")
		p, err := k.Protect(bytes.Clone(head), frameA(t))
		if err != nil || !bytes.HasPrefix(p, head) {
			t.Fatalf("%s: Protect lost dst: %v", mode, err)
		}
		o, err := k.Open(bytes.Clone(head), p[len(head):])
		if err != nil || !bytes.HasPrefix(o, head) || !bytes.Equal(o[len(head):], frameA(t)) {
			t.Fatalf("%s: Open lost dst: %v", mode, err)
		}
	}
}

// The daemon's forwarding step: open with the sender's key, stamp a new
// sequence number into the authenticated reserved bytes, protect with the
// receiver's key, all inside one buffer.
func TestForwardInPlaceNoAllocs(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		t.Run(mode.String(), func(t *testing.T) {
			sender := mustKey(t, mode, repeat(0x11, 32))
			receiver := mustKey(t, mode, repeat(0x22, 32))
			plain := buildPlain(frame.SchemaRequest, routingHeader, []byte(frameAJSON))
			buf := make([]byte, 0, 4096)
			buf, err := sender.Protect(buf, plain)
			if err != nil {
				t.Fatal(err)
			}
			var seq uint64
			forward := func() {
				p, err := sender.Open(buf[:0], buf)
				if err != nil {
					t.Fatal(err)
				}
				seq++
				binary.LittleEndian.PutUint64(p[frame.OffSequence:], seq)
				binary.LittleEndian.PutUint32(p[frame.OffChannel:], 4)
				if buf, err = receiver.Protect(p[:0], p); err != nil {
					t.Fatal(err)
				}
				// Hand the frame back to the sender side for the next round.
				if p, err = receiver.Open(buf[:0], buf); err != nil {
					t.Fatal(err)
				}
				if buf, err = sender.Protect(p[:0], p); err != nil {
					t.Fatal(err)
				}
			}
			if allocs := testing.AllocsPerRun(200, forward); allocs != 0 {
				t.Fatalf("%v allocations per forwarded frame, want 0", allocs)
			}
			got, err := receiver.Open(nil, mustProtect(t, receiver, mustOpen(t, sender, buf)))
			if err != nil {
				t.Fatal(err)
			}
			if s := binary.LittleEndian.Uint64(got[frame.OffSequence:]); s != seq {
				t.Fatalf("sequence %d, want %d", s, seq)
			}
			if c := binary.LittleEndian.Uint32(got[frame.OffChannel:]); c != 4 {
				t.Fatalf("channel %d, want 4", c)
			}
			want := bytes.Clone(plain)
			copy(want[frame.OffReserved:], got[frame.OffReserved:frame.OffReserved+frame.ReservedLen])
			if !bytes.Equal(got, want) {
				t.Fatalf("forwarded frame changed beyond the reserved bytes")
			}
		})
	}
}

func mustOpen(t *testing.T, k *FrameKey, p []byte) []byte {
	t.Helper()
	o, err := k.Open(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mustProtect(t *testing.T, k *FrameKey, p []byte) []byte {
	t.Helper()
	o, err := k.Protect(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The sequence number lives in the reserved bytes, which the tag and the
// AAD cover: rewriting it without the key is detected.
func TestReservedBytesAuthenticated(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		k := mustKey(t, mode, repeat(0x33, 32))
		plain := frameA(t)
		binary.LittleEndian.PutUint64(plain[frame.OffSequence:], 41)
		p := mustProtect(t, k, plain)
		binary.LittleEndian.PutUint64(p[frame.OffSequence:], 42)
		if _, err := k.Open(nil, p); err == nil {
			t.Fatalf("%s: replayed frame with a rewritten sequence accepted", mode)
		}
	}
}

func TestWrongMode(t *testing.T) {
	key := repeat(0x42, 32)
	plain := frameA(t)
	hmacKey, aeadKey, noneKey := mustKey(t, frame.SecurityHMAC, key), mustKey(t, frame.SecurityAEAD, key), mustKey(t, frame.SecurityNone, nil)
	hmacFrame, aeadFrame := mustProtect(t, hmacKey, plain), mustProtect(t, aeadKey, plain)
	for _, tc := range []struct {
		name string
		k    *FrameKey
		in   []byte
	}{
		{"aead key, hmac frame", aeadKey, hmacFrame},
		{"aead key, plain frame", aeadKey, plain},
		{"hmac key, aead frame", hmacKey, aeadFrame},
		{"hmac key, plain frame (stripped tag)", hmacKey, plain},
		{"none key, aead frame", noneKey, aeadFrame},
	} {
		if _, err := tc.k.Open(nil, tc.in); !errors.Is(err, ErrWrongMode) {
			t.Errorf("%s: %v, want ErrWrongMode", tc.name, err)
		}
	}
	// Only plain frames can be protected: no double protection.
	if _, err := aeadKey.Protect(nil, hmacFrame[:len(hmacFrame)-32]); !errors.Is(err, ErrWrongMode) {
		t.Errorf("protecting a frame with security byte 01: %v, want ErrWrongMode", err)
	}
}

func TestMalformed(t *testing.T) {
	key := repeat(0x42, 32)
	plain := frameA(t)
	with := func(f []byte, off int, b ...byte) []byte {
		f = bytes.Clone(f)
		copy(f[off:], b)
		return f
	}
	aead := mustKey(t, frame.SecurityAEAD, key)
	aeadFrame := mustProtect(t, aead, plain)
	hmacFrame := mustProtect(t, mustKey(t, frame.SecurityHMAC, key), plain)
	end := frame.PrefixLen + 34

	// An authentic AEAD frame whose decrypted payload_len is wrong: only
	// a buggy sender with the key can make one.
	badLen := bytes.Clone(aeadFrame[:end+12])
	badLen = aead.aead.Seal(badLen, badLen[end:end+12], append([]byte{9, 0, 0, 0, 0, 0, 0, 0}, "short"...), badLen[frame.PrefixLen:end])

	for _, tc := range []struct {
		name    string
		protect bool // Protect(plain) rather than Open
		mode    frame.Security
		in      []byte
		want    error
	}{
		{"empty", false, frame.SecurityHMAC, nil, ErrTooShort},
		{"prefix only", false, frame.SecurityHMAC, []byte(frame.Prefix), ErrTooShort},
		{"bad prefix", false, frame.SecurityHMAC, with(hmacFrame, 0, '$'), ErrMalformed},
		{"unknown mode 03", false, frame.SecurityHMAC, with(hmacFrame, frame.OffSecurity, 3), ErrUnknownMode},
		{"hmac: shorter than 59", false, frame.SecurityHMAC, hmacFrame[:58], ErrTooShort},
		{"aead: header_len beyond frame", false, frame.SecurityAEAD, with(aeadFrame, frame.OffHeaderLen, 0xff, 0xff), ErrTooShort},
		{"aead: header_len < 20", false, frame.SecurityAEAD, with(aeadFrame, frame.OffHeaderLen, 19, 0), ErrMalformed},
		{"aead: < 28 bytes after headers", false, frame.SecurityAEAD, aeadFrame[:end+27], ErrTooShort},
		{"aead: authentic, payload_len wrong", false, frame.SecurityAEAD, badLen, ErrMalformed},
		{"protect: bad prefix", true, frame.SecurityAEAD, with(plain, 1, 'X'), ErrMalformed},
		{"protect: short", true, frame.SecurityHMAC, plain[:20], ErrTooShort},
		{"protect: header_len 0", true, frame.SecurityHMAC, with(plain, frame.OffHeaderLen, 0, 0), ErrMalformed},
		{"protect: no payload_len", true, frame.SecurityHMAC, plain[:end+5], ErrTooShort},
		{"protect: payload_len too big", true, frame.SecurityAEAD, with(plain, end, 63), ErrMalformed},
		{"protect: trailing bytes", true, frame.SecurityHMAC, append(bytes.Clone(plain), 0), ErrMalformed},
		{"protect: huge payload_len", true, frame.SecurityAEAD, with(plain, end, 0xff, 0xff, 0xff, 0xff), ErrMalformed},
	} {
		var err error
		if tc.protect {
			_, err = Protect(nil, tc.in, tc.mode, key)
		} else {
			_, err = mustKey(t, tc.mode, key).Open(nil, tc.in)
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// The refusals of a short or inconsistent AEAD frame name the sizes they
	// found: what the sender's developer needs to find the bug.
	for _, tc := range []struct {
		in  []byte
		msg string
	}{
		{aeadFrame[:end+27], "27 bytes after the headers, an aead frame needs at least 36"},
		{badLen, "decrypted payload_len 9 but 5 payload bytes follow"},
	} {
		if _, err := aead.Open(nil, tc.in); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v, want it to say %q", err, tc.msg)
		}
	}
	if _, err := NewFrameKey(frame.Security(7), key); !errors.Is(err, ErrUnknownMode) {
		t.Errorf("NewFrameKey(07): %v, want ErrUnknownMode", err)
	}
}

func TestBufferOverlapRefused(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		k := mustKey(t, mode, repeat(0x42, 32))
		buf := make([]byte, 512)
		n := copy(buf[3:], frameA(t))
		plain := buf[3 : 3+n]
		if _, err := k.Protect(buf[:0], plain); !errors.Is(err, ErrBufferOverlap) {
			t.Errorf("%s Protect, dst 3 bytes before plain: %v", mode, err)
		}
		if _, err := k.Protect(buf[5:5], plain); !errors.Is(err, ErrBufferOverlap) {
			t.Errorf("%s Protect, dst 2 bytes after plain: %v", mode, err)
		}
		p := mustProtect(t, k, frameA(t))
		n = copy(buf[3:], p)
		if _, err := k.Open(buf[:0], buf[3:3+n]); !errors.Is(err, ErrBufferOverlap) {
			t.Errorf("%s Open, dst 3 bytes before input: %v", mode, err)
		}
	}
}

func TestModeByte(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		mode frame.Security
		want error
	}{
		{frameA(t), frame.SecurityNone, nil},
		{[]byte("#M2M|1|\x22\x00\x01\x01"), frame.SecurityHMAC, nil},
		{[]byte("#M2M|1|\x22\x00\x01\x02"), frame.SecurityAEAD, nil},
		{[]byte("#M2M|1|\x22\x00\x01\xfe"), 0xfe, ErrUnknownMode},
		{[]byte("#M2M|1|\x22\x00\x01"), 0, ErrTooShort},
		{[]byte("#TK|C|abcdefgh"), 0, ErrMalformed},
	} {
		m, err := Mode(tc.in)
		if m != tc.mode || !errors.Is(err, tc.want) {
			t.Errorf("Mode(%q) = %s, %v; want %s, %v", tc.in, m, err, tc.mode, tc.want)
		}
	}
}

// One FrameKey per session direction is shared by the goroutines of all
// the session's streams; -race checks the HMAC state's locking.
func TestFrameKeyConcurrent(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		k := mustKey(t, mode, repeat(0x42, 32))
		plain := frameA(t)
		done := make(chan error, 4)
		for range 4 {
			go func() {
				var buf []byte
				for range 200 {
					p, err := k.Protect(buf[:0], plain)
					if err == nil {
						buf, err = k.Open(p[:0], p)
					}
					if err == nil && !bytes.Equal(buf, plain) {
						err = errors.New("round trip changed the frame")
					}
					if err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
		}
		for range 4 {
			if err := <-done; err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
		}
	}
}

// AEAD nonces are a per-key random prefix and a counter (security review
// finding 6): consecutive frames under one key never share a nonce, and
// two keys made from the same secret differ in the prefix.
func TestAEADCounterNonces(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	a, err := NewFrameKey(frame.SecurityAEAD, key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewFrameKey(frame.SecurityAEAD, key)
	var n1, n2, nb [12]byte
	for _, x := range []struct {
		k *FrameKey
		n []byte
	}{{a, n1[:]}, {a, n2[:]}, {b, nb[:]}} {
		if err := x.k.readNonce(x.n); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(n1[:4], n2[:4]) || binary.BigEndian.Uint64(n1[4:]) != 1 || binary.BigEndian.Uint64(n2[4:]) != 2 {
		t.Fatalf("nonces %x then %x: want one prefix, counter 1 then 2", n1, n2)
	}
	if bytes.Equal(nb[:4], n1[:4]) {
		t.Fatalf("two keys share the nonce prefix %x", nb[:4])
	}
	// The counter never wraps into reuse.
	a.nonceCount.Store(^uint64(0))
	if err := a.readNonce(n1[:]); !errors.Is(err, ErrNonceExhausted) {
		t.Fatalf("exhausted counter: %v", err)
	}
}

// A dst whose output would share a single byte with the input, at either
// end, is refused like any other partial overlap.
func TestBufferOverlapByOneByte(t *testing.T) {
	const at = 2000
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		k := mustKey(t, mode, repeat(0x42, 32))
		buf := make([]byte, 4096)
		n := copy(buf[at:], frameA(t))
		plain := buf[at : at+n]
		size := n + Overhead(mode)
		for name, start := range map[string]int{
			"output ends on the input's first byte":  at + 1 - size,
			"output starts on the input's last byte": at + n - 1,
		} {
			if _, err := k.Protect(buf[start:start], plain); !errors.Is(err, ErrBufferOverlap) {
				t.Errorf("%s Protect, %s: %v", mode, name, err)
			}
		}
	}
}

// A plain frame whose payload_len is not what follows is refused, and the
// error gives both.
func TestPayloadLenMismatch(t *testing.T) {
	f := frameA(t)
	end := frame.PrefixLen + int(binary.LittleEndian.Uint16(f[frame.OffHeaderLen:]))
	binary.LittleEndian.PutUint32(f[end:], binary.LittleEndian.Uint32(f[end:])+1)
	_, err := Protect(nil, f, frame.SecurityHMAC, repeat(1, 32))
	if want := fmt.Sprintf("but %d payload bytes follow", len(f)-end-8); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v; want ErrMalformed saying %q", err, want)
	}
}
