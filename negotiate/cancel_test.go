package negotiate

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"testing"
)

// The bytes of docs/protocol.md §4.1.
func TestCancelBytes(t *testing.T) {
	for _, tc := range []struct {
		id   uint64
		wire string
	}{
		{1, "0301"},
		{300, "03ac02"},
		{math.MaxUint64, "03ffffffffffffffffff01"},
	} {
		b, err := AppendCancel(nil, tc.id)
		if err != nil || hex.EncodeToString(b) != tc.wire {
			t.Fatalf("AppendCancel(%d) = %x, %v; want %s", tc.id, b, err, tc.wire)
		}
		id, err := ParseCancel(b)
		if err != nil || id != tc.id {
			t.Fatalf("ParseCancel(%s) = %d, %v", tc.wire, id, err)
		}
		if k, err := MessageKind(b); err != nil || k != KindCancel {
			t.Fatalf("kind %v %v", k, err)
		}
	}
	if _, err := AppendCancel(nil, 0); !errors.Is(err, ErrBadCancel) {
		t.Fatalf("id 0: %v", err)
	}
}

func TestParseCancelRefuses(t *testing.T) {
	for _, wire := range []string{
		"", "03", "0300", "038000", "030101", "02000100", "03ffffffffffffffffff02", "03ffffffffffffffffffff01", "0380",
	} {
		b := unhex(t, wire)
		if _, err := ParseCancel(b); !errors.Is(err, ErrBadCancel) {
			t.Errorf("ParseCancel(%s): %v", wire, err)
		}
	}
}

func TestMachineCancel(t *testing.T) {
	m := NewMachine(RoleServer, t0)
	if _, err := m.Received(t0, KindCancel, ""); !errors.Is(err, ErrUnexpectedMessage) {
		t.Fatalf("CANCEL before HELLO: %v", err)
	}
}

func FuzzParseCancel(f *testing.F) {
	for _, s := range []string{"0301", "03ac02", "03ffffffffffffffffff01", "038000", "030101"} {
		b := unhex(f, s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		id, err := ParseCancel(msg)
		if err != nil {
			if !errors.Is(err, ErrBadCancel) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		b, err := AppendCancel(nil, id)
		if err != nil || !bytes.Equal(b, msg) {
			t.Fatalf("%x parsed as %d, re-encodes as %x", msg, id, b)
		}
	})
}
