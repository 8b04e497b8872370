package integration

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/llama3vocab"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/tokennative"
)

// TestClientTokenNativeAddressed: with the client library, a request sent as
// a TokenNative frame (no routing header) travels through the real daemon
// when it is addressed to an agent, in every encoding, and the provider
// reads the original bytes.
func TestClientTokenNativeAddressed(t *testing.T) {
	d := startDaemon(t, nil)
	vocab := llama3vocab.ForTest(t)
	body := corpus(t, "req-multiturn-4k-01.json")
	reply := corpus(t, "resp-chat-03.json")
	algos := []negotiate.Algorithm{negotiate.AlgorithmM2M, negotiate.AlgorithmTokenNative}
	// Each vocabulary loads once per process, on first use (tokennative
	// package doc: ~100 ms each, ten times that under -race), and the
	// clients share it. Load them before the round trips, whose 5 s bound is
	// about the daemon and the clients: on a loaded machine the first
	// request of an encoding, paying the load, took 9 s.
	tn := tokennative.New(tokennative.Config{Llama3Path: vocab})
	for _, e := range tn.Available() {
		if _, err := tn.Tokenizer(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, tr := range transports {
		for _, enc := range []negotiate.Encoding{negotiate.EncodingCl100k, negotiate.EncodingO200k, negotiate.EncodingLlamaBPE} {
			t.Run(tr+"/"+string(enc), func(t *testing.T) {
				got := make(chan []byte, 1)
				prov := dialClient(t, d.url(tr), client.Options{
					AgentID: "tkp-" + tr + string(enc), PinSHA256: d.Fingerprint(), Algorithms: algos, Llama3Path: vocab,
					Handler: client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
						got <- req.Body
						_ = w.Respond(reply)
					}),
				})
				req := dialClient(t, d.url(tr), client.Options{
					AgentID: "tkr-" + tr + string(enc), PinSHA256: d.Fingerprint(), Algorithms: algos, Encoding: enc, Llama3Path: vocab,
				})
				if e := req.Session().Params.Encoding; e != enc {
					t.Fatalf("negotiated %s, want %s", e, enc)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				resp, err := req.Do(ctx, body, client.To(prov.AgentID()), client.TokenNative())
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(<-got, body) || !bytes.Equal(resp.Body, reply) {
					t.Fatal("bytes changed on the way")
				}
				if st := req.Stats(); st.WireBytesSent >= uint64(len(body)) {
					t.Fatalf("TokenNative sent %d wire bytes for %d JSON bytes", st.WireBytesSent, len(body))
				}
			})
		}
	}
}

func TestClientTokenNativeRefusals(t *testing.T) {
	d := startDaemon(t, nil)
	algos := []negotiate.Algorithm{negotiate.AlgorithmM2M, negotiate.AlgorithmTokenNative}
	plain := dialClient(t, d.url("ws"), client.Options{AgentID: "tk-plain", Algorithms: algos})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := plain.Do(ctx, corpus(t, "req-chat-1k-02.json"), client.TokenNative()); !errors.Is(err, client.ErrUnsupportedFrame) {
		t.Fatalf("unaddressed TokenNative request: %v", err)
	}
	// In aead without tn_sealed the daemon does not negotiate tokennative:
	// the client refuses to send it rather than have the daemon refuse the
	// frame.
	secure := dialClient(t, d.url("ws"), client.Options{AgentID: "tk-aead", Algorithms: algos, Security: frame.SecurityAEAD,
		DisableFeatures: []negotiate.Feature{negotiate.FeatureTNSealed}})
	if _, err := secure.Do(ctx, corpus(t, "req-chat-1k-02.json"), client.To("tk-plain"), client.TokenNative()); !errors.Is(err, client.ErrUnsupportedFrame) {
		t.Fatalf("TokenNative in aead: %v", err)
	}
}

// TestClientTokenNativeProtected: with the client library on both ends, a
// TokenNative request and its reply travel in hmac and aead sessions,
// sealed (feature tn_sealed, docs/protocol.md §4.2), and also between a
// protected session and a mode-none one (the daemon seals or unseals).
func TestClientTokenNativeProtected(t *testing.T) {
	d := startDaemon(t, nil)
	body := corpus(t, "req-multiturn-4k-01.json")
	reply := corpus(t, "resp-chat-03.json")
	algos := []negotiate.Algorithm{negotiate.AlgorithmM2M, negotiate.AlgorithmTokenNative}
	for _, pair := range [][2]frame.Security{
		{frame.SecurityHMAC, frame.SecurityHMAC}, {frame.SecurityAEAD, frame.SecurityAEAD}, {frame.SecurityAEAD, frame.SecurityNone},
	} {
		for _, tr := range transports {
			name := pair[0].String() + "-" + pair[1].String() + "-" + tr
			t.Run(name, func(t *testing.T) {
				got := make(chan []byte, 1)
				prov := dialClient(t, d.url(tr), client.Options{
					AgentID: "tsp-" + name, PinSHA256: d.Fingerprint(), Algorithms: algos, Security: pair[1],
					Handler: client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
						got <- req.Body
						_ = w.Respond(reply)
					}),
				})
				req := dialClient(t, d.url(tr), client.Options{AgentID: "tsr-" + name, PinSHA256: d.Fingerprint(), Algorithms: algos, Security: pair[0]})
				if p := req.Session().Params; !p.Has(negotiate.FeatureTNSealed) {
					t.Fatalf("features %v", p.Features)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				resp, err := req.Do(ctx, body, client.To(prov.AgentID()), client.TokenNative())
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(<-got, body) || !bytes.Equal(resp.Body, reply) {
					t.Fatal("bytes changed on the way")
				}
				if st := req.Stats(); st.WireBytesSent >= uint64(len(body)) || st.BadFrames != 0 {
					t.Fatalf("sent %d wire bytes for %d JSON bytes, %d bad frames", st.WireBytesSent, len(body), st.BadFrames)
				}
			})
		}
	}
}
