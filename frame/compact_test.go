package frame_test

// External test package: the round trip protects frames with package
// security, which imports frame.

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
	"github.com/m2md/m2md/security"
)

// compactPlain is an unprotected frame the round trip starts from.
type compactPlain struct {
	name string
	fr   []byte
	rd   bool // the compact form must use RD
}

// compactPlainFrames builds, with the package's encoders, every kind of
// frame m2md writes with an extension block (docs/protocol.md §4.3).
func compactPlainFrames(t testing.TB) []compactPlain {
	t.Helper()
	small := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`)
	large := []byte(`{"model":"gpt-4o","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"` +
		strings.Repeat("Name three primes. ", 8) + `"}]}`)
	// temperature (bit 12) and stop (bit 14): specific flags of 3 uvarint bytes.
	flagged := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}],"temperature":0.2,"stop":["x"]}`)
	delta := bytes.Repeat([]byte{0x20, 0xa5, 0x3d, 0x01}, 20)
	var out []compactPlain
	add := func(name string, rd bool, fr []byte, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, compactPlain{name, fr, rd})
	}
	fr, err := frame.AppendEncodeExt(nil, small, frame.Extension{DocID: 1}, frame.Limits{})
	add("request without base", false, fr, err)
	fr, err = frame.AppendEncodeExt(nil, small, frame.Extension{DocID: 300, BaseID: 7}, frame.Limits{})
	add("request with base", false, fr, err)
	fr, err = frame.AppendEncodeExt(nil, large, frame.Extension{DocID: 1 << 40, BaseID: math.MaxUint64}, frame.Limits{})
	add("request compressed", false, fr, err)
	fr, err = frame.AppendEncodeExt(nil, flagged, frame.Extension{DocID: 9, BaseID: 8}, frame.Limits{})
	add("request with flags", false, fr, err)
	fr, err = frame.AppendEncodeDelta(nil, large, delta, frame.Extension{DocID: 2, BaseID: 1}, frame.Limits{})
	add("request delta", false, fr, err)
	fr, err = frame.AppendEncodeReplyDelta(nil, []byte(`{"id":"chatcmpl-2","model":"gpt-4o","choices":[{"message":{"content":"2, 3 and 5."},"finish_reason":"stop"}]}`), delta, frame.Limits{})
	add("reply delta RD", true, fr, err)
	// Reply deltas with their response fields filled, as m2md wrote them
	// before §4.3 left them empty (and a reader still takes): not RD.
	fr, err = filledReplyDelta(`{"id":"chatcmpl-2","model":"gpt-4o","choices":[{"message":{"content":"2, 3 and 5."},"finish_reason":"stop"}]}`, delta)
	add("reply delta with fields", false, fr, err)
	fr, err = filledReplyDelta(`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":0}}`, delta)
	add("reply delta with usage", false, fr, err)
	return out
}

// filledReplyDelta is the reply delta of resp whose payload is delta with
// the response's own header fields: its plain frame's header, HAS_EXTENSIONS
// instead of COMPRESSED, and the block 01 01.
func filledReplyDelta(resp string, delta []byte) ([]byte, error) {
	plain, err := frame.AppendEncode(nil, []byte(resp), frame.Limits{})
	if err != nil {
		return nil, err
	}
	var h frame.Header
	if err := frame.ReadHeader(plain, &h); err != nil {
		return nil, err
	}
	fr := append([]byte{}, plain[:h.PayloadOffset()]...)
	fr = append(fr, 0x01, 0x01)
	binary.LittleEndian.PutUint16(fr[frame.OffHeaderLen:], uint16(h.HeaderLen+2))
	binary.LittleEndian.PutUint32(fr[frame.OffFlags:], uint32(h.Flags&^frame.FlagCompressed|frame.FlagHasExtensions))
	fr = binary.LittleEndian.AppendUint32(fr, uint32(len(delta)))
	fr = binary.LittleEndian.AppendUint32(fr, h.CRC)
	return append(fr, delta...), nil
}

// compactCase is a protected, numbered frame and its channel.
type compactCase struct {
	name string
	fr   []byte
	ch   uint32
	rd   bool
}

func compactCases(t testing.TB) []compactCase {
	t.Helper()
	hmacKey, err := security.NewFrameKey(frame.SecurityHMAC, bytes.Repeat([]byte{0x42}, 32))
	if err != nil {
		t.Fatal(err)
	}
	aeadKey, err := security.NewFrameKey(frame.SecurityAEAD, bytes.Repeat([]byte{0x42}, 32))
	if err != nil {
		t.Fatal(err)
	}
	noneKey, err := security.NewFrameKey(frame.SecurityNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []compactCase
	for _, p := range compactPlainFrames(t) {
		for _, key := range []*security.FrameKey{noneKey, hmacKey, aeadKey} {
			for _, ch := range []uint32{0, 4} {
				for _, seq := range []uint64{1, 300, math.MaxUint64} {
					plain := bytes.Clone(p.fr)
					if err := frame.SetSequence(plain, seq, ch); err != nil {
						t.Fatal(err)
					}
					fr, err := key.Protect(nil, plain)
					if err != nil {
						t.Fatalf("%s: %v", p.name, err)
					}
					out = append(out, compactCase{p.name + "/" + key.Mode().String(), fr, ch, p.rd})
				}
			}
		}
	}
	return out
}

func TestCompactRoundTrip(t *testing.T) {
	maxGrowth := 0
	for _, c := range compactCases(t) {
		cf, ok := frame.AppendCompact([]byte("keep"), c.fr, c.ch)
		if !ok || !bytes.HasPrefix(cf, []byte("keep")) {
			t.Fatalf("%s: not compactable", c.name)
		}
		cf = cf[4:]
		if cf[0] != frame.CompactMarker || (cf[1]&0x08 != 0) != c.rd || frame.Security(cf[1]&3) != frame.Security(c.fr[frame.OffSecurity]) {
			t.Fatalf("%s: compact frame %x: marker or shape wrong (RD %v)", c.name, cf[:2], c.rd)
		}
		if len(cf) >= len(c.fr) {
			t.Fatalf("%s: compact frame of %d bytes for a frame of %d", c.name, len(cf), len(c.fr))
		}
		back, err := frame.AppendExpand([]byte("keep"), cf, c.ch)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(back[4:], c.fr) || string(back[:4]) != "keep" {
			t.Fatalf("%s: rebuilt\n%x\nwant\n%x", c.name, back[4:], c.fr)
		}
		maxGrowth = max(maxGrowth, len(c.fr)-len(cf))

		// In place, in exactly the frame's bytes: no allocation.
		buf := bytes.Clone(c.fr)
		in, ok := frame.AppendCompact(buf[:0], buf, c.ch)
		if !ok || !bytes.Equal(in, cf) || &in[0] != &buf[0] {
			t.Fatalf("%s: in place: %x, %v; want %x", c.name, in, ok, cf)
		}
	}
	if maxGrowth != frame.MaxCompactGrowth {
		t.Fatalf("largest growth %d, docs/protocol.md §4.5 says %d", maxGrowth, frame.MaxCompactGrowth)
	}
}

// TestCompactGrowthBound: no compact frame rebuilds to more than
// MaxCompactGrowth bytes beyond itself, whatever its fields (the least
// each field can take).
func TestCompactGrowthBound(t *testing.T) {
	for _, c := range []struct {
		name string
		hex  string
	}{
		{"RD none", "4308" + "01" + "0000000000"},
		{"RD hmac", "4309" + "01" + "0000000000" + strings.Repeat("00", 32)},
		{"RD aead", "430a" + "01" + strings.Repeat("00", 36)},
		{"none, V 0", "4300" + "01" + "00" + "00" + "01" + "0000000000"},
	} {
		in := testkit.Unhex(t, c.hex)
		out, err := frame.AppendExpand(nil, in, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(out)-len(in) > frame.MaxCompactGrowth {
			t.Fatalf("%s: %d bytes rebuild to %d", c.name, len(in), len(out))
		}
	}
}

func TestCompactNotCompactable(t *testing.T) {
	small := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`)
	base, err := frame.AppendEncodeExt(nil, small, frame.Extension{DocID: 300, BaseID: 7}, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := frame.SetSequence(base, 1, 4); err != nil {
		t.Fatal(err)
	}
	if _, ok := frame.AppendCompact(nil, base, 4); !ok {
		t.Fatal("the base frame must be compactable")
	}
	plain, err := frame.AppendEncode(nil, small, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	compressed, err := frame.AppendEncode(nil, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"`+strings.Repeat("a", 100)+`"}]}`), frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	hmacKey, err := security.NewFrameKey(frame.SecurityHMAC, bytes.Repeat([]byte{0x42}, 32))
	if err != nil {
		t.Fatal(err)
	}
	hmacFrame, err := hmacKey.Protect(nil, base)
	if err != nil {
		t.Fatal(err)
	}
	aeadKey, err := security.NewFrameKey(frame.SecurityAEAD, bytes.Repeat([]byte{0x42}, 32))
	if err != nil {
		t.Fatal(err)
	}
	aeadFrame, err := aeadKey.Protect(nil, base)
	if err != nil {
		t.Fatal(err)
	}
	headerEnd := frame.PrefixLen + int(base[frame.OffHeaderLen]) // header_len < 256 here
	with := func(f []byte, edit func(f []byte) []byte) []byte { return edit(bytes.Clone(f)) }
	for _, c := range []struct {
		name string
		fr   []byte
		ch   uint32
	}{
		{"no block", plain, 0},
		{"no block, compressed", compressed, 0},
		{"common flags 06", with(base, func(f []byte) []byte { f[frame.OffFlags+3] = 0x06; return f }), 4},
		{"reserved flags byte set", with(base, func(f []byte) []byte { f[frame.OffFlags+2] = 1; return f }), 4},
		{"channel mismatch", base, 5},
		{"schema 03", with(base, func(f []byte) []byte { f[frame.OffSchema] = 3; return f }), 4},
		{"schema 10", with(base, func(f []byte) []byte { f[frame.OffSchema] = 0x10; return f }), 4},
		{"security 03", with(base, func(f []byte) []byte { f[frame.OffSecurity] = 3; return f }), 4},
		{"none, trailing byte", append(bytes.Clone(base), 0), 4},
		{"none, payload short by one", base[:len(base)-1], 4},
		{"none, payload_len 0", with(base[:headerEnd+8], func(f []byte) []byte { binary.LittleEndian.PutUint32(f[headerEnd:], 0); return f }), 4},
		{"hmac, tag short by one", hmacFrame[:len(hmacFrame)-1], 4},
		{"hmac, trailing byte", append(bytes.Clone(hmacFrame), 0), 4},
		{"hmac read as none", with(hmacFrame, func(f []byte) []byte { f[frame.OffSecurity] = 0; return f }), 4},
		{"aead, rest of 35", aeadFrame[:headerEnd+35], 4},
		{"header_len 19", with(base, func(f []byte) []byte { f[frame.OffHeaderLen] = 19; return f }), 4},
		{"header_len past the end", with(base, func(f []byte) []byte { f[frame.OffHeaderLen+1] = 1; return f }), 4},
		{"header_len past the end, aead", with(aeadFrame, func(f []byte) []byte { f[frame.OffHeaderLen+1] = 1; return f }), 4},
		{"text shape", append([]byte("#M2M|1|"), "IgABAAAAAAAAAAAAAAAAAAAAAAAGZ3B0"...), 0},
		{"bad prefix", with(base, func(f []byte) []byte { f[0] = 'x'; return f }), 4},
		{"fixed header cut", base[:frame.MinFrameLen-1], 4},
		{"empty", nil, 0},
	} {
		dst := []byte("keep")
		out, ok := frame.AppendCompact(dst, c.fr, c.ch)
		if ok || string(out) != "keep" {
			t.Errorf("%s: compacted to %x", c.name, out)
		}
	}
}

func TestExpandRefuses(t *testing.T) {
	none5 := "0102030405" // crc32 and 1 byte of payload
	hmac37 := none5 + strings.Repeat("aa", 32)
	aead36 := strings.Repeat("bb", 36)
	rdHeader := "0000ff00000101"
	for _, c := range []struct {
		name, hex string
		want      error
	}{
		{"empty", "", frame.ErrBadPrefix},
		{"marker", "440001000001" + none5, frame.ErrBadPrefix},
		{"no shape", "43", frame.ErrTruncated},
		{"shape bit 4", "4310" + "01" + none5, frame.ErrMalformed},
		{"shape bit 7", "4380" + "01" + none5, frame.ErrMalformed},
		{"security 03", "4303" + "0100" + "00" + "01" + none5, frame.ErrMalformed},
		{"RD and COMPRESSED", "430c" + "01" + none5, frame.ErrMalformed},
		{"no schema", "4300", frame.ErrTruncated},
		{"schema 00", "4300" + "00" + "0000" + "01" + none5, frame.ErrMalformed},
		{"schema 03", "4300" + "03" + "0000" + "01" + none5, frame.ErrMalformed},
		{"schema 04", "4300" + "04" + "0000" + "01" + none5, frame.ErrMalformed},
		{"flags not minimal", "4300" + "01" + "8000" + "00" + "01" + none5, frame.ErrMalformed},
		{"flags 4 bytes", "4300" + "01" + "80808000" + "00" + "01" + none5, frame.ErrMalformed},
		{"flags above 65535", "4300" + "01" + "808004" + "00" + "01" + none5, frame.ErrMalformed},
		{"flags past the end", "4300" + "01" + "8080", frame.ErrTruncated},
		{"V not minimal", "4300" + "01" + "00" + "8100" + "00" + "01" + none5, frame.ErrMalformed},
		{"V 4 bytes", "4300" + "01" + "00" + "81808000" + "00" + "01" + none5, frame.ErrMalformed},
		{"V above 65515", "4300" + "01" + "00" + "ecff03" + "01" + none5, frame.ErrMalformed},
		{"V past the end", "4300" + "01" + "00" + "0a" + "0102030405060708", frame.ErrTruncated},
		{"V missing", "4300" + "01" + "00", frame.ErrTruncated},
		{"sequence not minimal", "4300" + "01" + "00" + "00" + "8100" + none5, frame.ErrMalformed},
		{"sequence 11 bytes", "4300" + "01" + "00" + "00" + strings.Repeat("ff", 10) + "01" + none5, frame.ErrMalformed},
		{"sequence above 2^64-1", "4300" + "01" + "00" + "00" + strings.Repeat("ff", 9) + "02" + none5, frame.ErrMalformed},
		{"sequence past the end", "4300" + "01" + "00" + "00" + "ffff", frame.ErrTruncated},
		{"RD, sequence missing", "4308", frame.ErrTruncated},
		{"none, no payload", "4300" + "01" + "00" + "00" + "01" + "01020304", frame.ErrTruncated},
		{"RD none, no payload", "4308" + "01" + "01020304", frame.ErrTruncated},
		{"hmac, rest of 36", "4301" + "01" + "00" + "00" + "01" + hmac37[2:], frame.ErrTruncated},
		{"aead, rest of 35", "4302" + "01" + "00" + "00" + "01" + aead36[2:], frame.ErrTruncated},
		{"RD aead, rest of 35", "430a" + "01" + aead36[2:], frame.ErrTruncated},
		{"RD spelled out", "4300" + "02" + "00" + "07" + rdHeader + "01" + none5, frame.ErrMalformed},
	} {
		in := testkit.Unhex(t, c.hex)
		out, err := frame.AppendExpand([]byte("keep"), in, 0)
		if !errors.Is(err, c.want) || string(out) != "keep" {
			t.Errorf("%s: %x, %v; want %v", c.name, out, err, c.want)
		}
	}
	// The boundaries just inside each rule are accepted.
	for _, c := range []struct{ name, hex string }{
		{"flags 65535", "4300" + "01" + "ffff03" + "00" + "01" + none5},
		{"V 127 (1 byte)", "4300" + "01" + "00" + "7f" + strings.Repeat("00", 127) + "01" + none5},
		{"sequence 2^64-1", "4300" + "01" + "00" + "00" + strings.Repeat("ff", 9) + "01" + none5},
		{"hmac, rest of 37", "4301" + "01" + "00" + "00" + "01" + hmac37},
		{"aead, rest of 36", "4302" + "01" + "00" + "00" + "01" + aead36},
		{"RD", "4308" + "01" + none5},
		{"RD fields, compressed", "4304" + "02" + "00" + "07" + rdHeader + "01" + none5},
		{"RD fields, other flags", "4300" + "02" + "01" + "07" + rdHeader + "01" + none5},
	} {
		in := testkit.Unhex(t, c.hex)
		out, err := frame.AppendExpand(nil, in, 7)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if again, ok := frame.AppendCompact(nil, out, 7); !ok || !bytes.Equal(again, in) {
			t.Errorf("%s: rebuilt %x compacts to %x, %v", c.name, out, again, ok)
		}
	}
}

func TestExpandV65515(t *testing.T) {
	v := bytes.Repeat([]byte{0x5a}, 65515)
	in := append([]byte{0x43, 0x00, 0x01, 0x00, 0xeb, 0xff, 0x03}, v...)
	in = append(in, 0x01, 1, 2, 3, 4, 5)
	out, err := frame.AppendExpand(nil, in, 0)
	if err != nil {
		t.Fatal(err)
	}
	if out[frame.OffHeaderLen] != 0xff || out[frame.OffHeaderLen+1] != 0xff || !bytes.Equal(out[frame.OffVarHeader:frame.OffVarHeader+len(v)], v) {
		t.Fatalf("header_len %x", out[frame.OffHeaderLen:frame.OffHeaderLen+2])
	}
	if again, ok := frame.AppendCompact(out[:0], out, 0); !ok || !bytes.Equal(again, in) {
		t.Fatal("65535-byte header does not compact back")
	}
}

// TestCompactFields: the delta request of docs/protocol.md §4.3 (doc_id 2,
// base 1, routing fields as §4.3 prints them), sequence 1 on channel 0 in
// mode none, field by field.
func TestCompactFields(t *testing.T) {
	fr := testkit.Unhex(t, "234d324d7c317c2200010000000002000000000000000000000000066770742d346f03192a030201032c000000c41ef74220a53d010074012c4e616d65207468726565207072696d65732e227d5d7d04005d6bc2560d1ab1f36220ad20")
	if err := frame.SetSequence(fr, 1, 0); err != nil {
		t.Fatal(err)
	}
	c, ok := frame.AppendCompact(nil, fr, 0)
	if !ok {
		t.Fatal("not compactable")
	}
	// marker, shape (none), schema 01, flags 0, V 14, the variable header, sequence 1, crc32 on.
	want := "43" + "00" + "01" + "00" + "0e" + "066770742d346f03192a03020103" + "01" + hex.EncodeToString(fr[frame.PrefixLen+34+4:])
	if got := hex.EncodeToString(c); got != want {
		t.Fatalf("compact\n%s\nwant\n%s", got, want)
	}
	if len(fr)-len(c) != 25 {
		t.Fatalf("saves %d bytes, want 25", len(fr)-len(c))
	}
}

func TestCompactAllocations(t *testing.T) {
	for _, c := range compactCases(t)[:6] {
		buf := make([]byte, len(c.fr))
		cf, _ := frame.AppendCompact(nil, c.fr, c.ch)
		dst := make([]byte, 0, len(c.fr))
		if n := testing.AllocsPerRun(20, func() {
			copy(buf, c.fr)
			if _, ok := frame.AppendCompact(buf[:0], buf, c.ch); !ok {
				t.Fatal("not compactable")
			}
		}); n != 0 {
			t.Errorf("%s: AppendCompact in place: %v allocations", c.name, n)
		}
		if n := testing.AllocsPerRun(20, func() {
			if _, err := frame.AppendExpand(dst, cf, c.ch); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: AppendExpand into a reused dst: %v allocations", c.name, n)
		}
	}
}
