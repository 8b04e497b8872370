package security

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// unhex decodes a hex dump written with any spacing.
var unhex = testkit.Unhex

func repeat(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func seqBytes(from byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = from + byte(i)
	}
	return b
}

// frameAJSON is the payload of wire reference §3.13 example A.
const frameAJSON = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`

// frameA returns the 111-byte plain frame of wire reference §3.13 A.
func frameA(t testing.TB) []byte {
	t.Helper()
	f := unhex(t, `23 4d 32 4d 7c 31 7c 22 00 01 00 00 00 00 00
		00 00 00 00 00 00 00 00 00 00 00 00
		06 67 70 74 2d 34 6f 01 01 02 0a d7 a3 3b
		3e 00 00 00 6e 60 55 a4`)
	f = append(f, frameAJSON...)
	if len(f) != 111 {
		t.Fatalf("frame A is %d bytes, want 111", len(f))
	}
	return f
}

// buildPlain writes a plain frame around varHeader and payload the way the
// frame encoder does (payload stored uncompressed, crc32 of the payload).
// The security tests treat the variable header and payload as opaque, so
// this is all the frame layout they need.
func buildPlain(schema frame.Schema, varHeader, payload []byte) []byte {
	f := make([]byte, 0, frame.MinFrameLen+len(varHeader)+8+len(payload)+AEADOverhead+HMACOverhead)
	f = append(f, frame.Prefix...)
	f = binary.LittleEndian.AppendUint16(f, uint16(frame.FixedHeaderLen+len(varHeader)))
	f = append(f, byte(schema), byte(frame.SecurityNone), 0, 0, 0, 0)
	f = append(f, make([]byte, frame.ReservedLen)...)
	f = append(f, varHeader...)
	f = binary.LittleEndian.AppendUint32(f, uint32(len(payload)))
	f = binary.LittleEndian.AppendUint32(f, crc32.ChecksumIEEE(payload))
	return append(f, payload...)
}

// routingHeader is frame A's variable header, reused for corpus frames.
var routingHeader = []byte{0x06, 'g', 'p', 't', '-', '4', 'o', 0x01, 0x01, 0x02, 0x0a, 0xd7, 0xa3, 0x3b}

// fixedNonces is a test-only nonce source that yields the same 12 bytes
// on every read.
type fixedNonces struct{ nonce []byte }

func (r fixedNonces) Read(p []byte) (int, error) { return copy(p, r.nonce), nil }

// mustKey prepares a FrameKey or stops the test.
func mustKey(t testing.TB, mode frame.Security, key []byte) *FrameKey {
	t.Helper()
	k, err := NewFrameKey(mode, key)
	if err != nil {
		t.Fatalf("NewFrameKey(%s): %v", mode, err)
	}
	return k
}
