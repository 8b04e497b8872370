package security

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/m2md/m2md/frame"
)

var benchSizes = []int{256, 1 << 10, 16 << 10}

// benchPlain builds a plain frame with an n-byte payload and room to be
// protected in place.
func benchPlain(n int) []byte {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	return buildPlain(frame.SchemaRequest, routingHeader, payload)
}

func BenchmarkProtect(b *testing.B) {
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", mode, n), func(b *testing.B) {
				k := mustKey(b, mode, repeat(0x42, 32))
				plain := benchPlain(n)
				dst := make([]byte, 0, len(plain)+AEADOverhead+HMACOverhead)
				b.SetBytes(int64(len(plain)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := k.Protect(dst, plain); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", mode, n), func(b *testing.B) {
				k := mustKey(b, mode, repeat(0x42, 32))
				p, err := k.Protect(nil, benchPlain(n))
				if err != nil {
					b.Fatal(err)
				}
				dst := make([]byte, 0, len(p))
				b.SetBytes(int64(len(p)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := k.Open(dst, p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkForward is the daemon's per-frame crypto: open in place with the
// sender's key, stamp the sequence, protect in place with the receiver's.
func BenchmarkForward(b *testing.B) {
	for _, mode := range []frame.Security{frame.SecurityHMAC, frame.SecurityAEAD} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", mode, n), func(b *testing.B) {
				from := mustKey(b, mode, repeat(0x11, 32))
				to := mustKey(b, mode, repeat(0x22, 32))
				plain := benchPlain(n)
				in, err := from.Protect(nil, plain)
				if err != nil {
					b.Fatal(err)
				}
				buf := make([]byte, len(in), len(in)+AEADOverhead+HMACOverhead)
				b.SetBytes(int64(len(plain)))
				b.ReportAllocs()
				var seq uint64
				for b.Loop() {
					copy(buf, in) // a new frame arrives
					p, err := from.Open(buf[:0], buf[:len(in)])
					if err != nil {
						b.Fatal(err)
					}
					seq++
					binary.LittleEndian.PutUint64(p[frame.OffSequence:], seq)
					if _, err := to.Protect(p[:0], p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkHandshake is one side's session crypto: an ephemeral key pair,
// X25519 with the peer's key, the transcript, the two frame keys and their
// prepared AEAD ciphers.
func BenchmarkHandshake(b *testing.B) {
	peer, _ := GenerateKeyPair()
	peerPub := peer.PublicKey()
	agentKey := repeat(0x42, 32)
	b.ReportAllocs()
	for b.Loop() {
		kp, err := GenerateKeyPair()
		if err != nil {
			b.Fatal(err)
		}
		shared, err := kp.SharedSecret(peerPub[:])
		if err != nil {
			b.Fatal(err)
		}
		tr := Transcript([]byte(vecHello), []byte(vecAccept))
		c2s, s2c, ck, err := DeriveFrameKeys(shared[:], agentKey, tr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := NewFrameKey(frame.SecurityAEAD, c2s[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := NewFrameKey(frame.SecurityAEAD, s2c[:]); err != nil {
			b.Fatal(err)
		}
		AcceptConfirmation(ck, tr)
	}
}

func BenchmarkHelloProof(b *testing.B) {
	agentKey := repeat(0x42, 32)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := HelloProof(agentKey, []byte(vecHello0)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAgentKey(b *testing.B) {
	master := repeat(0x42, 32)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AgentKey(master, "test-org", "agent-001"); err != nil {
			b.Fatal(err)
		}
	}
}
