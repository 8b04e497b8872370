package negotiate

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/m2md/m2md/internal/testkit"
)

// scriptReader yields its scripted parts in order, then an endless
// deterministic stream (SHA-256 in counter mode over seed), so handshakes
// in tests and in the documented example are reproducible.
type scriptReader struct {
	parts [][]byte
	seed  string
	ctr   uint64
	buf   []byte
}

func newScript(seed string, parts ...[]byte) *scriptReader {
	return &scriptReader{parts: parts, seed: seed}
}

func (r *scriptReader) Read(p []byte) (int, error) {
	if len(r.parts) > 0 {
		n := copy(p, r.parts[0])
		r.parts[0] = r.parts[0][n:]
		if len(r.parts[0]) == 0 {
			r.parts = r.parts[1:]
		}
		return n, nil
	}
	if len(r.buf) == 0 {
		var c [8]byte
		binary.BigEndian.PutUint64(c[:], r.ctr)
		r.ctr++
		sum := sha256.Sum256(append([]byte(r.seed), c[:]...))
		r.buf = sum[:]
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// seq returns n bytes start, start+1, …
func seq(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

// unhex decodes a hex dump written with any spacing.
var unhex = testkit.Unhex

// t0 is the HELLO time used throughout (the wire reference's example time).
var t0 = time.UnixMilli(1705520400000)

var testMaster = seq(0x00, 32)

func testAgentKey(t testing.TB, org, agent string) []byte {
	t.Helper()
	k, err := deriveAgentKey(testMaster, org, agent)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newTestServer(t testing.TB, mod func(*ServerConfig)) *Server {
	t.Helper()
	cfg := ServerConfig{}
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// handshake runs both sides and returns their sessions, or the first error.
func handshake(t testing.TB, s *Server, cc ClientConfig, now time.Time) (client, server *Session, err error) {
	t.Helper()
	return handshakeAt(t, s, cc, now, now)
}

// handshakeAt runs the handshake with the client's clock at clientNow and
// the daemon's at serverNow.
func handshakeAt(t testing.TB, s *Server, cc ClientConfig, clientNow, serverNow time.Time) (client, server *Session, err error) {
	t.Helper()
	h, err := NewHello(cc, clientNow)
	if err != nil {
		t.Fatalf("NewHello: %v", err)
	}
	server, reply, err := s.Accept(serverNow, h.Message(), false)
	if err != nil {
		// The client must read the same REJECT.
		_, cerr := h.Accept(reply)
		var rej, crej *RejectError
		if !errors.As(err, &rej) || !errors.As(cerr, &crej) || rej.Code != crej.Code || rej.Message != crej.Message {
			t.Fatalf("daemon error %v, client read %v", err, cerr)
		}
		return nil, nil, err
	}
	client, err = h.Accept(reply)
	return client, server, err
}

func rejectCode(err error) RejectCode {
	var rej *RejectError
	if errors.As(err, &rej) {
		return rej.Code
	}
	return ""
}
