package negotiate

import (
	"bytes"
	"encoding/base64"
	"errors"
	"math"
	"strings"
	"testing"
)

// frameA is the wire reference's example A (§3.13): a real 111-byte M2M v1
// request frame, binary shape.
func frameA(t testing.TB) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString("IgABAAAAAAAAAAAAAAAAAAAAAAAGZ3B0LTRvAQECCtejOz4AAABuYFWkeyJtb2RlbCI6ImdwdC00byIsIm1lc3NhZ2VzIjpbeyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJIaSJ9XX0=")
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("#M2M|1|"), b...)
}

func TestDataRoundTrip(t *testing.T) {
	frame := frameA(t)
	for _, tc := range []struct {
		name   string
		flags  DataFlags
		id     uint64
		peer   string
		header string // hex of the expected header
	}{
		{"request by model", 0, 1, "", "02000100"},
		{"request to agent", 0, 7, "alice", "02000705616c696365"},
		{"reply chunk", FlagReply, 127, "", "02017f00"},
		{"final reply", FlagReply | FlagEnd, 128, "P", "0203800101" + "50"},
		{"id 300", 0, 300, "a-b_C9", "0200ac0206612d625f4339"},
		{"max id", FlagReply, math.MaxUint64, "", "0201ffffffffffffffffff0100"},
		{"max peer", 0, 1, strings.Repeat("z", 128), "02000180" + strings.Repeat("7a", 128)},
		{"protocol.md §4 example", FlagReply | FlagEnd, 300, "P", "0203ac020150"},
		{"notice", FlagReply | FlagEnd | FlagNotice, 7, "", "02070700"},
		{"batch-taking delivery", FlagBatch, 77, "ingress", "02084d07696e6772657373"},
		{"batch reply", FlagReply | FlagBatch, 5, "", "02090500"},
		{"once request", FlagOnce, 9, "", "02100900"},
		{"once request taking batches", FlagOnce | FlagBatch, 9, "", "02180900"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := AppendData([]byte("prefix"), tc.flags, tc.id, tc.peer, frame)
			if err != nil {
				t.Fatal(err)
			}
			msg = msg[len("prefix"):]
			want := append(unhex(t, tc.header), frame...)
			if !bytes.Equal(msg, want) {
				t.Fatalf("bytes\n%x\nwant\n%x", msg, want)
			}
			h, f, err := ParseData(msg)
			if err != nil {
				t.Fatal(err)
			}
			if h.Flags != tc.flags || h.RequestID != tc.id || string(h.Peer) != tc.peer || !bytes.Equal(f, frame) {
				t.Fatalf("parsed %+v frame %d bytes", h, len(f))
			}
			if h.IsReply() != (tc.flags&FlagReply != 0) || h.IsEnd() != (tc.flags&FlagEnd != 0) || h.IsNotice() != (tc.flags&FlagNotice != 0) || h.IsBatch() != (tc.flags&FlagBatch != 0) || h.IsOnce() != (tc.flags&FlagOnce != 0) {
				t.Fatal("flag accessors")
			}
		})
	}
}

func TestParseDataRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  string // hex
		want error
	}{
		{"empty", "", ErrNotData},
		{"control kind", "01007b7d", ErrNotData},
		{"unknown kind", "0300010023", ErrNotData},
		{"no flags", "02", ErrBadDataHeader},
		{"unknown flag bit", "0204010023", ErrBadDataHeader},
		{"high flag bit", "0280010023", ErrBadDataHeader},
		{"unknown flag bit 5", "0220010023", ErrBadDataHeader},
		{"ONCE on a reply", "0211010023", ErrBadDataHeader},
		{"ONCE on a final reply", "0213010023", ErrBadDataHeader},
		{"BATCH with END", "020b010023", ErrBadDataHeader},
		{"BATCH with NOTICE", "020f010023", ErrBadDataHeader},
		{"END without REPLY", "0202010023", ErrBadDataHeader},
		{"NOTICE without END", "0205010023", ErrBadDataHeader},
		{"NOTICE without REPLY", "0206010023", ErrBadDataHeader},
		{"no request id", "0200", ErrBadDataHeader},
		{"request id 0", "0200000023", ErrBadDataHeader},
		{"request id truncated", "020080", ErrBadDataHeader},
		{"request id not minimal", "0200810000" + "23", ErrBadDataHeader},
		{"request id 0 not minimal", "0200800000" + "23", ErrBadDataHeader},
		{"request id 11 bytes", "0200ffffffffffffffffffff010023", ErrBadDataHeader},
		{"request id overflows", "0200ffffffffffffffffff020023", ErrBadDataHeader},
		{"no peer length", "020001", ErrBadDataHeader},
		{"peer too long", "02000181" + strings.Repeat("61", 129) + "23", ErrBadDataHeader},
		{"peer truncated", "0200010561", ErrBadDataHeader},
		{"peer with space", "020001026120" + "23", ErrBadDataHeader},
		{"peer with slash", "02000102612f" + "23", ErrBadDataHeader},
		{"peer with NUL", "02000102610023", ErrBadDataHeader},
		{"no frame", "02000100", ErrBadDataHeader},
		{"no frame after peer", "0200010161", ErrBadDataHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseData(unhex(t, tc.msg))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestAppendDataRejects(t *testing.T) {
	frame := []byte{0x23}
	for _, tc := range []struct {
		name  string
		flags DataFlags
		id    uint64
		peer  string
		frame []byte
	}{
		{"unknown flag", 4, 1, "", frame},
		{"END alone", FlagEnd, 1, "", frame},
		{"NOTICE without END", FlagReply | FlagNotice, 1, "", frame},
		{"id 0", 0, 0, "", frame},
		{"peer too long", 0, 1, strings.Repeat("a", 129), frame},
		{"peer char", 0, 1, "al ice", frame},
		{"peer unicode", 0, 1, "álice", frame},
		{"empty frame", 0, 1, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("keep")
			out, err := AppendData(dst, tc.flags, tc.id, tc.peer, tc.frame)
			if !errors.Is(err, ErrBadDataHeader) {
				t.Fatalf("err %v", err)
			}
			if string(out) != "keep" {
				t.Fatalf("dst changed to %q", out)
			}
		})
	}
}

func TestMessageKind(t *testing.T) {
	for _, tc := range []struct {
		msg  []byte
		kind Kind
		err  error
	}{
		{[]byte{1, '{'}, KindControl, nil},
		{[]byte{2}, KindData, nil},
		{nil, 0, ErrUnknownKind},
		{[]byte{0}, 0, ErrUnknownKind},
		{[]byte{3, 1}, KindCancel, nil},
		{[]byte{4}, 0, ErrUnknownKind},
		{[]byte{0x23}, 0, ErrUnknownKind},
	} {
		k, err := MessageKind(tc.msg)
		if k != tc.kind || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%x: %v %v", tc.msg, k, err)
		}
	}
}

func TestParseDataDoesNotAllocate(t *testing.T) {
	msg, _ := AppendData(nil, FlagReply|FlagEnd, 123456, "provider-7", frameA(t))
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := ParseData(msg); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per ParseData", allocs)
	}
}

func FuzzParseData(f *testing.F) {
	frame := frameA(f)
	for _, seed := range []struct {
		flags DataFlags
		id    uint64
		peer  string
	}{{0, 1, ""}, {FlagReply, 300, "alice"}, {FlagReply | FlagEnd, math.MaxUint64, strings.Repeat("x", 128)}, {FlagOnce, 5, ""}} {
		msg, err := AppendData(nil, seed.flags, seed.id, seed.peer, frame)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msg)
	}
	tr := &Trace{TraceID: [16]byte{0x4b, 0xf9, 15: 0x36}, SpanID: [8]byte{0x00, 0xf0, 7: 0xb7}, Flags: 1, State: "congo=t61rcWkgMzE"}
	for _, st := range []string{"", tr.State} {
		tr.State = st
		block, err := AppendTrace(nil, tr)
		if err != nil {
			f.Fatal(err)
		}
		msg, err := AppendTracedDataHeader(nil, 0, 7, "", block)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append(msg, frame...))
	}
	for _, s := range []string{"", "02", "0200", "020080", "0200810000", "0200ffffffffffffffffff0200", "0202010023", "02000105616c69636523", "0211010023", "0218010023"} {
		f.Add(unhex(f, s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, frame, err := ParseData(msg)
		if err != nil {
			if !errors.Is(err, ErrBadDataHeader) && !errors.Is(err, ErrNotData) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// One encoding per header: writing it back gives the same bytes.
		out, err := AppendTracedDataHeader(nil, h.Flags&^FlagTrace, h.RequestID, string(h.Peer), h.Trace)
		out = append(out, frame...)
		if err != nil {
			t.Fatalf("parsed header does not re-encode: %v", err)
		}
		if !bytes.Equal(out, msg) {
			t.Fatalf("re-encoded\n%x\nfrom\n%x", out, msg)
		}
	})
}

func BenchmarkParseData(b *testing.B) {
	msg, _ := AppendData(nil, FlagReply|FlagEnd, 123456, "provider-7", frameA(b))
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseData(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendData(b *testing.B) {
	frame := frameA(b)
	buf := make([]byte, 0, 512)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendData(buf[:0], FlagReply|FlagEnd, 123456, "provider-7", frame); err != nil {
			b.Fatal(err)
		}
	}
}
