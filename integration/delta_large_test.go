package integration

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
	"github.com/m2md/m2md/negotiate"
)

func largeTurn(n int) (req, resp, doc []byte) { return testkit.LargeTurn(n, 3) }

// libraryDelta compresses doc against D = req ‖ resp as a zstd library does
// by default beyond its window (libzstd level 3: 2 MiB): a multi-segment
// frame with a Window_Descriptor, magic removed (docs/protocol.md §4.3).
func libraryDelta(t *testing.T, req, resp, doc []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(2<<20), zstd.WithEncoderCRC(false), zstd.WithSingleSegment(false),
		zstd.WithEncoderDictRaw(0, append(append([]byte(nil), req...), resp...)), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	p := enc.EncodeAll(doc, nil)[4:]
	if p[0]&0x20 != 0 {
		t.Fatalf("the encoder wrote a single-segment frame (descriptor %#02x)", p[0])
	}
	return p
}

// A conversation turn of 4 MiB and one of 16 MiB (the largest document a
// session allows) go through the real daemon over both transports to a Go
// provider, which rebuilds them byte for byte: sent as a delta written by a
// zstd library's defaults (a multi-segment frame, what another language's
// client sends), and sent by the Go client, which picks a delta or the full
// document itself.
//
// Under the race detector, where a 16 MiB turn takes about 45 s, each size
// goes over one transport (4 MiB over WebSocket, 16 MiB over QUIC), so that
// the suite still carries both sizes and both transports.
func TestLargeDeltaTurns(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		for _, size := range []int{4 << 20, 16 << 20} {
			if raceEnabled && (tr == "quic") != (size == 16<<20) {
				continue
			}
			t.Run(fmt.Sprintf("%s/%dMiB", tr, size>>20), func(t *testing.T) {
				req1, resp1, doc := largeTurn(size)
				sfx := fmt.Sprintf("-%s-%d", tr, size>>20)
				gotc := make(chan []byte, 4)
				dialClient(t, d.url(tr), client.Options{
					AgentID: "big-prov" + sfx, Security: frame.SecurityHMAC, TLSConfig: d.clientTLS(t),
					Models: []string{"gpt-4o"},
					Handler: client.HandlerFunc(func(ctx context.Context, r *client.Request, w client.ResponseWriter) {
						gotc <- bytes.Clone(r.Body)
						_ = w.Respond(resp1)
					}),
				})
				wait := func(want []byte, what string) {
					t.Helper()
					select {
					case b := <-gotc:
						if !bytes.Equal(b, want) {
							t.Fatalf("%s: the provider's handler got %d bytes, not the %d-byte document", what, len(b), len(want))
						}
					case <-time.After(60 * time.Second):
						t.Fatalf("%s: the provider's handler got nothing", what)
					}
				}

				// A requester writing the protocol itself, with a library's
				// zstd defaults.
				raw := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "big-raw" + sfx, Security: frame.SecurityHMAC, Features: deltaFeat})
				id := raw.requestExt("", req1, frame.Extension{DocID: 1})
				wait(req1, "turn 1")
				back := raw.recvData(60 * time.Second)
				if back.hdr.RequestID != id || back.code != "" || !bytes.Equal(back.body, resp1) {
					t.Fatalf("turn 1: id %d code %q, %d bytes", back.hdr.RequestID, back.code, len(back.body))
				}
				id = raw.requestDelta("", doc, libraryDelta(t, req1, resp1, doc), 2, 1)
				back = raw.recvData(60 * time.Second)
				if back.hdr.RequestID != id || !back.hdr.IsEnd() || back.code != "" {
					t.Fatalf("turn 2 as a multi-segment delta: id %d code %q", back.hdr.RequestID, back.code)
				}
				wait(doc, "turn 2 as a multi-segment delta")

				// The Go client, both turns.
				c := dialClient(t, d.url(tr), client.Options{AgentID: "big-go" + sfx, Security: frame.SecurityHMAC, TLSConfig: d.clientTLS(t)})
				for k, body := range [][]byte{req1, doc} {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					r, err := c.Do(ctx, body)
					cancel()
					if err != nil || !bytes.Equal(r.Body, resp1) {
						t.Fatalf("Go client turn %d: %v", k+1, err)
					}
					wait(body, fmt.Sprintf("Go client turn %d", k+1))
				}
			})
		}
	}
}
