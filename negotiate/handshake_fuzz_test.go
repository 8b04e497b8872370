package negotiate

import (
	"errors"
	"slices"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/security"
)

// FuzzHello feeds arbitrary first messages to a daemon with and without
// agent authentication: it must never panic, always answer with a
// well-formed ACCEPT or REJECT, and succeed only with an ACCEPT.
func FuzzHello(f *testing.F) {
	plain := newTestServer(f, func(c *ServerConfig) {
		c.MinSecurity = frame.SecurityNone
		c.Features = []Feature{FeatureCancel, FeatureDelta}
	})
	auth := authServer(f, nil)
	for _, cc := range []ClientConfig{
		{AgentID: "alice"},
		{AgentID: "bob", Security: frame.SecurityAEAD, Models: []string{"gpt-4o", "llama-3"}, MaxPayload: 4096,
			Encodings: []Encoding{EncodingO200k, EncodingLlamaBPE}, Extensions: map[string]string{"k": "v"},
			Features: []Feature{FeatureTNSealed, FeatureCancel, "x-unknown"}},
		authClient(f),
	} {
		h, err := NewHello(cc, t0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(h.Message())
	}
	f.Add(helloEnvelope(helloPayload))
	f.Add(ctl(`{"type":"HELLO","payload":{"version":"3.0","agent_id":"a","agent_type":"m2m-rust","compression":{"algorithms":["m2m"],"max_payload":0,"streaming":true,"ml_routing":false},"security":{"threat_detection":false,"blocking_mode":false,"block_threshold":0.8},"extensions":{}},"timestamp":1}`))
	f.Add(AppendPing(nil, "", t0))
	f.Fuzz(func(t *testing.T, msg []byte) {
		for _, s := range []*Server{plain, auth} {
			sess, reply, err := s.Accept(t0, msg, false)
			r, perr := ParseControl(reply)
			if perr != nil {
				t.Fatalf("reply does not parse: %v\n%q", perr, reply)
			}
			if err != nil {
				var rej *RejectError
				if !errors.As(err, &rej) || sess != nil || r.Type != TypeReject || r.Reject.Code != rej.Code {
					t.Fatalf("err %v, reply %+v", err, r)
				}
				continue
			}
			if r.Type != TypeAccept || r.SessionID != sess.ID || security.ValidateID(sess.AgentID) != nil ||
				sess.Params.MaxPayload < MinPayloadLimit || sess.Params.MaxPayload > MaxPayloadLimit ||
				len(sess.Params.Algorithms) == 0 || (s == auth && !sess.Params.Authenticated) {
				t.Fatalf("accepted with %v, reply %+v", sess, r)
			}
			// Only features both sides have, each once.
			for i, feat := range sess.Params.Features {
				if !slices.Contains(s.cfg.Features, feat) || !slices.Contains(sess.Peer.Features, feat) ||
					slices.Contains(sess.Params.Features[:i], feat) {
					t.Fatalf("negotiated features %q from %q", sess.Params.Features, sess.Peer.Features)
				}
			}
		}
	})
}

// FuzzAccept feeds arbitrary replies to a client's HELLO (with and
// without an agent key): it must never panic, and a session comes only from
// an ACCEPT whose key confirmation matches, which the seeds (the daemon's
// real answers to these very HELLOs) have and their mutations lose.
func FuzzAccept(f *testing.F) {
	plain := newTestServer(f, func(c *ServerConfig) { c.Features = []Feature{FeatureCancel} })
	auth := authServer(f, nil)
	configs := []ClientConfig{
		{AgentID: "alice", Security: frame.SecurityHMAC, Features: []Feature{FeatureCancel}},
		authClient(f),
	}
	hello := func(i int) *ClientHandshake {
		cc := configs[i]
		cc.entropy = newScript("fuzz accept", seq(0x01, 32), seq(0xa0, 32))
		h, err := NewHello(cc, t0)
		if err != nil {
			f.Fatal(err)
		}
		return h
	}
	for i, s := range []*Server{plain, auth} {
		_, reply, err := s.Accept(t0, hello(i).Message(), false)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), reply)
	}
	f.Add(uint8(0), AppendReject(nil, t0, RejectServerBusy, "busy"))
	f.Fuzz(func(t *testing.T, which uint8, reply []byte) {
		h := hello(int(which) % len(configs))
		sess, err := h.Accept(reply)
		if err != nil {
			if sess != nil {
				t.Fatal("session with an error")
			}
			return
		}
		m, perr := ParseControl(reply)
		if perr != nil || m.Type != TypeAccept || sess.ID != m.SessionID || len(sess.Params.Confirm) != confirmSize {
			t.Fatalf("accepted %q: %v", reply, perr)
		}
	})
}

func BenchmarkHandshake(b *testing.B) {
	s := newTestServer(b, nil)
	cc := ClientConfig{AgentID: "alice", Security: frame.SecurityAEAD, Models: []string{"gpt-4o"}}
	b.ReportAllocs()
	for b.Loop() {
		h, err := NewHello(cc, t0)
		if err != nil {
			b.Fatal(err)
		}
		_, reply, err := s.Accept(t0, h.Message(), false)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.Accept(reply); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHandshakeAuthenticated(b *testing.B) {
	s := authServer(b, func(c *ServerConfig) { c.ReplayCacheSize = 1 << 20 })
	cc := authClient(b)
	b.ReportAllocs()
	for b.Loop() {
		h, err := NewHello(cc, t0)
		if err != nil {
			b.Fatal(err)
		}
		_, reply, err := s.Accept(t0, h.Message(), false)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.Accept(reply); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServerAccept is the daemon's share: parse, negotiate, one
// key pair, one X25519, the ACCEPT, the keys.
func BenchmarkServerAccept(b *testing.B) {
	s := newTestServer(b, nil)
	h, err := NewHello(ClientConfig{AgentID: "alice", Security: frame.SecurityAEAD}, t0)
	if err != nil {
		b.Fatal(err)
	}
	msg := h.Message()
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.Accept(t0, msg, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseControlHello(b *testing.B) {
	h, err := NewHello(ClientConfig{AgentID: "alice", Models: []string{"gpt-4o", "gpt-4o-mini"}}, t0)
	if err != nil {
		b.Fatal(err)
	}
	msg := h.Message()
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseControl(msg); err != nil {
			b.Fatal(err)
		}
	}
}
