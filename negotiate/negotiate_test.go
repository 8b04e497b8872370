package negotiate

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
	"github.com/m2md/m2md/security"
)

// helloCaps is a valid HELLO's payload with a real public key and nonce.
func helloCaps(t testing.TB) *Capabilities {
	t.Helper()
	priv, err := ephemeralKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.PublicKey()
	return &Capabilities{
		Version: protocolVersion, AgentID: "alice", AgentType: "test",
		Compression: Compression{
			Algorithms: []Algorithm{AlgorithmM2M, AlgorithmTokenNative}, Streaming: true,
			Encodings: []Encoding{EncodingCl100k, EncodingO200k}, PreferredEncoding: EncodingCl100k,
		},
		Security: SecurityCaps{BlockThreshold: 0.8, Mode: frame.SecurityNone, KeyExchange: keyExchangeX25519,
			PublicKey: pub[:], Nonce: seq(7, 32)},
	}
}

func helloMessage(t testing.TB, c *Capabilities, ts time.Time) []byte {
	t.Helper()
	b, err := AppendControl(nil, &ControlMessage{Type: TypeHello, Timestamp: ts.UnixMilli(), Capabilities: c})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Negotiation cases; the first ones mirror the Rust reference's session
// tests (wire reference §11 "Session/capabilities") where m2md keeps them.
func TestNegotiate(t *testing.T) {
	type want struct {
		code       RejectCode
		algorithms []Algorithm
		encoding   Encoding
		maxPayload int
		mode       frame.Security
	}
	ok := func(algs []Algorithm, enc Encoding, mp int, mode frame.Security) want {
		return want{algorithms: algs, encoding: enc, maxPayload: mp, mode: mode}
	}
	m2m := []Algorithm{AlgorithmM2M}
	both := []Algorithm{AlgorithmM2M, AlgorithmTokenNative}
	for _, tc := range []struct {
		name   string
		server func(*ServerConfig)
		hello  func(*Capabilities)
		full   bool // daemon at capacity
		want   want
	}{
		{"defaults: m2m first, Cl100kBase", nil, nil, false, ok(both, EncodingCl100k, MaxPayloadLimit, frame.SecurityNone)},
		{"unknown algorithms skipped, client order",
			func(c *ServerConfig) { c.Algorithms = m2m },
			func(c *Capabilities) { c.Compression.Algorithms = []Algorithm{"brotli", "tokennative", "m2m", "none"} },
			false, ok(m2m, EncodingCl100k, MaxPayloadLimit, frame.SecurityNone)},
		{"client order kept",
			nil, func(c *Capabilities) { c.Compression.Algorithms = []Algorithm{"tokennative", "m2m", "m2m"} },
			false, ok([]Algorithm{AlgorithmTokenNative, AlgorithmM2M}, EncodingCl100k, MaxPayloadLimit, frame.SecurityNone)},
		{"no common algorithm",
			func(c *ServerConfig) { c.Algorithms = m2m },
			func(c *Capabilities) { c.Compression.Algorithms = []Algorithm{"tokennative"} },
			false, want{code: RejectNoCommonAlgorithm}},
		{"empty algorithm list", nil, func(c *Capabilities) { c.Compression.Algorithms = nil }, false, want{code: RejectNoCommonAlgorithm}},
		{"tokennative dropped in aead",
			nil, func(c *Capabilities) { c.Security.Mode = frame.SecurityAEAD },
			false, ok(m2m, EncodingCl100k, MaxPayloadLimit, frame.SecurityAEAD)},
		{"tokennative alone in hmac",
			nil, func(c *Capabilities) {
				c.Security.Mode = frame.SecurityHMAC
				c.Compression.Algorithms = []Algorithm{AlgorithmTokenNative}
			},
			false, want{code: RejectNoCommonAlgorithm}},
		{"version 3.1", nil, func(c *Capabilities) { c.Version = "3.1" }, false, ok(both, EncodingCl100k, MaxPayloadLimit, 0)},
		{"version 3", nil, func(c *Capabilities) { c.Version = "3" }, false, ok(both, EncodingCl100k, MaxPayloadLimit, 0)},
		{"version 4.0", nil, func(c *Capabilities) { c.Version = "4.0" }, false, want{code: RejectVersionMismatch}},
		{"version 99.0", nil, func(c *Capabilities) { c.Version = "99.0" }, false, want{code: RejectVersionMismatch}},
		{"version 03.0", nil, func(c *Capabilities) { c.Version = "03.0" }, false, want{code: RejectVersionMismatch}},
		{"empty version", nil, func(c *Capabilities) { c.Version = "" }, false, want{code: RejectVersionMismatch}},
		{"client prefers O200k, daemon has both",
			nil, func(c *Capabilities) { c.Compression.PreferredEncoding = EncodingO200k },
			false, ok(both, EncodingO200k, MaxPayloadLimit, 0)},
		{"client has only O200k",
			nil, func(c *Capabilities) {
				c.Compression.Encodings = []Encoding{EncodingO200k}
				c.Compression.PreferredEncoding = EncodingO200k
			},
			false, ok(both, EncodingO200k, MaxPayloadLimit, 0)},
		{"preferred unknown to daemon: first common",
			func(c *ServerConfig) { c.Encodings = []Encoding{EncodingCl100k, EncodingO200k} },
			func(c *Capabilities) {
				c.Compression.Encodings = []Encoding{"Heuristic", EncodingLlamaBPE, EncodingO200k}
				c.Compression.PreferredEncoding = EncodingLlamaBPE
			},
			false, ok(both, EncodingO200k, MaxPayloadLimit, 0)},
		{"nothing in common: Cl100kBase",
			func(c *ServerConfig) { c.Encodings = []Encoding{EncodingCl100k} },
			func(c *Capabilities) {
				c.Compression.Encodings = []Encoding{EncodingLlamaBPE}
				c.Compression.PreferredEncoding = EncodingLlamaBPE
			},
			false, ok(both, EncodingCl100k, MaxPayloadLimit, 0)},
		{"max_payload smaller wish", nil, func(c *Capabilities) { c.Compression.MaxPayload = 1 << 20 }, false, ok(both, EncodingCl100k, 1<<20, 0)},
		{"max_payload raised to 1 KiB", nil, func(c *Capabilities) { c.Compression.MaxPayload = 100 }, false, ok(both, EncodingCl100k, MinPayloadLimit, 0)},
		{"max_payload capped at 16 MiB", nil, func(c *Capabilities) { c.Compression.MaxPayload = 1 << 40 }, false, ok(both, EncodingCl100k, MaxPayloadLimit, 0)},
		{"max_payload daemon smaller",
			func(c *ServerConfig) { c.MaxPayload = 2 << 20 },
			func(c *Capabilities) { c.Compression.MaxPayload = 4 << 20 },
			false, ok(both, EncodingCl100k, 2<<20, 0)},
		{"max_payload no wish: daemon's",
			func(c *ServerConfig) { c.MaxPayload = 2 << 20 }, nil,
			false, ok(both, EncodingCl100k, 2<<20, 0)},
		{"mode none below hmac",
			func(c *ServerConfig) { c.MinSecurity = frame.SecurityHMAC }, nil,
			false, want{code: RejectSecurityPolicy}},
		{"mode hmac below aead",
			func(c *ServerConfig) { c.MinSecurity = frame.SecurityAEAD },
			func(c *Capabilities) { c.Security.Mode = frame.SecurityHMAC },
			false, want{code: RejectSecurityPolicy}},
		{"mode hmac at hmac",
			func(c *ServerConfig) { c.MinSecurity = frame.SecurityHMAC },
			func(c *Capabilities) { c.Security.Mode = frame.SecurityHMAC },
			false, ok(m2m, EncodingCl100k, MaxPayloadLimit, frame.SecurityHMAC)},
		{"mode aead above hmac",
			func(c *ServerConfig) { c.MinSecurity = frame.SecurityHMAC },
			func(c *Capabilities) { c.Security.Mode = frame.SecurityAEAD },
			false, ok(m2m, EncodingCl100k, MaxPayloadLimit, frame.SecurityAEAD)},
		{"at capacity", nil, nil, true, want{code: RejectServerBusy}},
		{"version checked before capacity", nil, func(c *Capabilities) { c.Version = "4.0" }, true, want{code: RejectVersionMismatch}},
		{"auth required, no proof", func(c *ServerConfig) { c.OrgSecrets = map[string]security.Secret{"acme": testMaster} }, nil, false, want{code: RejectSecurityPolicy}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, tc.server)
			c := helloCaps(t)
			if tc.hello != nil {
				tc.hello(c)
			}
			msg := helloMessage(t, c, t0)
			sess, reply, err := s.Accept(t0, msg, tc.full)
			r, perr := ParseControl(reply)
			if perr != nil {
				t.Fatalf("reply does not parse: %v", perr)
			}
			if tc.want.code != "" {
				if rejectCode(err) != tc.want.code || sess != nil {
					t.Fatalf("err %v, want REJECT %s", err, tc.want.code)
				}
				if !errors.Is(err, tc.want.code.sentinel()) || !errors.Is(err, ErrRejected) {
					t.Fatal("errors.Is does not match the code's sentinel")
				}
				if r.Type != TypeReject || r.Reject.Code != tc.want.code || r.SessionID != "" {
					t.Fatalf("reply %+v", r)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := sess.Params
			if !reflect.DeepEqual(n.Algorithms, tc.want.algorithms) || n.Encoding != tc.want.encoding ||
				n.MaxPayload != tc.want.maxPayload || n.SecurityMode != tc.want.mode {
				t.Fatalf("negotiated %+v, want %+v", n, tc.want)
			}
			if r.Type != TypeAccept || r.SessionID != sess.ID || !reflect.DeepEqual(*r.Capabilities.Negotiated, n) {
				t.Fatalf("ACCEPT %+v does not carry the decision %+v", r, n)
			}
		})
	}
}

func TestAcceptMalformedFirstMessage(t *testing.T) {
	s := newTestServer(t, nil)
	for _, tc := range []struct {
		name  string
		msg   []byte
		cause error
	}{
		{"empty", nil, ErrNotControl},
		{"data", []byte{2, 0, 1, 0, 0x23}, ErrNotControl},
		{"ping first", AppendPing(nil, "", t0), nil},
		{"bad JSON", ctl(`{"type":"HELLO"`), ErrMalformedControl},
		{"Rust HELLO", ctl(`{"type":"HELLO","payload":{"version":"3.0","agent_id":"a","agent_type":"m2m-rust","compression":{"algorithms":["m2m"],"max_payload":0,"streaming":true,"ml_routing":false},"security":{"threat_detection":false,"blocking_mode":false,"block_threshold":0.8},"extensions":{}},"timestamp":1}`), ErrMalformedControl},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess, reply, err := s.Accept(t0, tc.msg, false)
			if sess != nil || rejectCode(err) != RejectUnknown || !errors.Is(err, ErrRejectUnknown) {
				t.Fatalf("err %v", err)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Fatalf("err %v does not unwrap to %v", err, tc.cause)
			}
			r, perr := ParseControl(reply)
			if perr != nil || r.Type != TypeReject || r.Reject.Code != RejectUnknown || !strings.HasPrefix(r.Reject.Message, "malformed HELLO") {
				t.Fatalf("reply %+v %v", r, perr)
			}
		})
	}
}

func TestHandshakeBothSidesAgree(t *testing.T) {
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		t.Run(mode.String(), func(t *testing.T) {
			s := newTestServer(t, nil)
			cc := ClientConfig{AgentID: "alice", Security: mode, Models: []string{"gpt-4o"}, MaxPayload: 1 << 20}
			client, server, err := handshake(t, s, cc, t0)
			if err != nil {
				t.Fatal(err)
			}
			if client.ID != server.ID || !ValidSessionID(client.ID) {
				t.Fatalf("ids %q %q", client.ID, server.ID)
			}
			if !reflect.DeepEqual(client.Params, server.Params) || client.Params.SecurityMode != mode || client.Params.MaxPayload != 1<<20 {
				t.Fatalf("params %+v / %+v", client.Params, server.Params)
			}
			if client.Transcript != server.Transcript {
				t.Fatal("transcripts differ")
			}
			if !bytes.Equal(client.SendKey(), server.ReceiveKey()) || !bytes.Equal(client.ReceiveKey(), server.SendKey()) {
				t.Fatal("keys differ")
			}
			if bytes.Equal(client.SendKey(), client.ReceiveKey()) || bytes.Equal(client.SendKey(), make([]byte, 32)) {
				t.Fatal("directions share a key, or a key is zero")
			}
			if server.AgentID != "alice" || client.AgentID != "alice" || server.Org != "" || client.Params.Authenticated {
				t.Fatal("identity")
			}
			if !reflect.DeepEqual(server.Peer.Models, []string{"gpt-4o"}) || client.Peer.AgentType != daemonAgentType {
				t.Fatal("peer capabilities")
			}
			// Keys never reach formatted output.
			for _, s := range []string{fmtAll(client), fmtAll(server)} {
				if strings.Contains(s, string(client.SendKey())) || strings.Contains(s, "c2s") {
					t.Fatalf("keys in %q", s)
				}
			}
			client.Wipe()
			if !bytes.Equal(client.SendKey(), make([]byte, 32)) {
				t.Fatal("Wipe left the key")
			}
		})
	}
}

// Every byte of both messages enters the transcript, and the client checks
// the daemon's key confirmation over it in every mode (findings 2 and 3 of
// the security review): an ACCEPT or a HELLO changed in transit, even in
// insignificant whitespace or in mode none, is refused by the client.
func TestTranscriptBindsExactBytes(t *testing.T) {
	s := newTestServer(t, nil)
	for _, mode := range []frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD} {
		spaced := func(b []byte) []byte { return append(append([]byte{}, b[:len(b)-1]...), ' ', '}') }
		same := func(b []byte) []byte { return b }
		for name, tamper := range map[string]struct{ hello, accept func([]byte) []byte }{
			"nothing":           {same, same},
			"ACCEPT whitespace": {same, spaced},
			"HELLO whitespace":  {spaced, same},
			"ACCEPT timer": {same, func(a []byte) []byte {
				return bytes.Replace(a, []byte(`"ping_interval_ms":60000`), []byte(`"ping_interval_ms":59999`), 1)
			}},
		} {
			t.Run(mode.String()+"/"+name, func(t *testing.T) {
				h, err := NewHello(ClientConfig{AgentID: "alice", Security: mode}, t0)
				if err != nil {
					t.Fatal(err)
				}
				server, reply, err := s.Accept(t0, tamper.hello(h.Message()), false)
				if err != nil {
					t.Fatal(err)
				}
				client, err := h.Accept(tamper.accept(reply))
				if name == "nothing" {
					if err != nil || client.Transcript != server.Transcript || !bytes.Equal(client.SendKey(), server.ReceiveKey()) {
						t.Fatalf("untouched handshake: %v", err)
					}
					return
				}
				if !errors.Is(err, ErrBadConfirmation) || !errors.Is(err, ErrBadAccept) {
					t.Fatalf("changed in transit: err %v, want ErrBadConfirmation", err)
				}
			})
		}
	}
}

func TestClientRefusesBadAccept(t *testing.T) {
	s := newTestServer(t, nil)
	base := ClientConfig{AgentID: "alice", Security: frame.SecurityHMAC, Algorithms: []Algorithm{AlgorithmM2M}, MaxPayload: 1 << 20}
	for _, tc := range []struct {
		name string
		edit func(*ControlMessage)
		want error
	}{
		{"unchanged", func(*ControlMessage) {}, nil},
		{"max payload the least allowed", func(m *ControlMessage) { m.Capabilities.Negotiated.MaxPayload = MinPayloadLimit }, nil},
		{"other mode", func(m *ControlMessage) { m.Capabilities.Negotiated.SecurityMode = frame.SecurityNone }, ErrBadAccept},
		{"security.mode contradicts", func(m *ControlMessage) { m.Capabilities.Security.Mode = frame.SecurityAEAD }, ErrBadAccept},
		{"algorithm not offered", func(m *ControlMessage) { m.Capabilities.Negotiated.Algorithms = []Algorithm{AlgorithmTokenNative} }, ErrBadAccept},
		{"no algorithm", func(m *ControlMessage) { m.Capabilities.Negotiated.Algorithms = nil }, ErrBadAccept},
		{"encoding not offered", func(m *ControlMessage) { m.Capabilities.Negotiated.Encoding = EncodingLlamaBPE }, ErrBadAccept},
		{"max payload above wish", func(m *ControlMessage) { m.Capabilities.Negotiated.MaxPayload = 2 << 20 }, ErrBadAccept},
		{"max payload tiny", func(m *ControlMessage) { m.Capabilities.Negotiated.MaxPayload = 10 }, ErrBadAccept},
		{"session timeout too short", func(m *ControlMessage) { m.Capabilities.Negotiated.SessionTimeout = time.Second }, ErrBadAccept},
		{"ping interval 0", func(m *ControlMessage) { m.Capabilities.Negotiated.PingInterval = 0 }, ErrBadAccept},
		{"pong longer than ping", func(m *ControlMessage) { m.Capabilities.Negotiated.PongTimeout = 2 * time.Minute }, ErrBadAccept},
		{"version 4", func(m *ControlMessage) { m.Capabilities.Version = "4.0" }, ErrBadAccept},
		{"authenticated without key", func(m *ControlMessage) { m.Capabilities.Negotiated.Authenticated = true }, ErrAuthDowngrade},
		{"low-order public key", func(m *ControlMessage) { m.Capabilities.Security.PublicKey = make([]byte, 32) }, ErrBadAccept},
		{"not an ACCEPT", func(m *ControlMessage) { m.Type = TypeHello }, ErrUnexpectedMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHello(base, t0)
			if err != nil {
				t.Fatal(err)
			}
			_, reply, err := s.Accept(t0, h.Message(), false)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ParseControl(reply)
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			// Sent by a daemon that holds the session's keys, so that the
			// key confirmation verifies: the decision itself is refused.
			_, err = h.Accept(confirmedAccept(t, h.Message(), m))
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) || errors.Is(err, ErrBadConfirmation) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if tc.want == ErrAuthDowngrade && !strings.Contains(err.Error(), "agent key held=false") {
				t.Fatalf("err %v does not say the client holds no agent key", err)
			}
			if _, err := h.Accept(reply); !errors.Is(err, ErrHandshakeDone) {
				t.Fatalf("second Accept: %v", err)
			}
		})
	}
}

// confirmedAccept is m, an ACCEPT, as a daemon that decided it and holds
// the session's keys would send it: its own key pair, and the key
// confirmation computed over hello and m as the client will check it.
func confirmedAccept(t *testing.T, hello []byte, m *ControlMessage) []byte {
	t.Helper()
	hm, err := ParseControl(hello)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := security.GenerateKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	if m.Capabilities != nil && len(m.Capabilities.Security.PublicKey) == 32 && !bytes.Equal(m.Capabilities.Security.PublicKey, make([]byte, 32)) {
		pub := kp.PublicKey()
		m.Capabilities.Security.PublicKey = pub[:]
	}
	if m.Capabilities != nil && m.Capabilities.Negotiated != nil {
		m.Capabilities.Negotiated.Confirm = make([]byte, confirmSize)
	}
	reply, err := AppendControl(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != TypeAccept {
		return reply
	}
	shared, err := kp.SharedSecret(hm.Capabilities.Security.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Wipe()
	_, _, confirm, err := sessionKeys(shared[:], nil, transcriptHash(hello[1:], reply[1:]))
	if err != nil {
		t.Fatal(err)
	}
	patchAt(reply[1:], m.signedAt, confirm[:])
	return reply
}

func TestClientReadsReject(t *testing.T) {
	h, err := NewHello(ClientConfig{AgentID: "alice"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.Accept(AppendReject(nil, t0, RejectRateLimited, "slow down"))
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Code != RejectRateLimited || rej.Message != "slow down" || !errors.Is(err, ErrRateLimited) {
		t.Fatalf("err %v", err)
	}
}

func authServer(t testing.TB, mod func(*ServerConfig)) *Server {
	return newTestServer(t, func(c *ServerConfig) {
		c.OrgSecrets = map[string]security.Secret{"acme": testMaster, "other": seq(0x50, 32)}
		if mod != nil {
			mod(c)
		}
	})
}

func authClient(t testing.TB) ClientConfig {
	return ClientConfig{AgentID: "alice", Org: "acme", AgentKey: testAgentKey(t, "acme", "alice"), Security: frame.SecurityAEAD}
}

func TestAuthentication(t *testing.T) {
	withKey := func(org, keyOrg, agent string) ClientConfig {
		c := authClient(t)
		c.Org, c.AgentKey = org, testAgentKey(t, keyOrg, agent)
		return c
	}
	for _, tc := range []struct {
		name   string
		client ClientConfig
		skew   time.Duration // client clock minus daemon clock
		want   RejectCode
	}{
		{"valid", authClient(t), 0, ""},
		{"clock 4 min behind", authClient(t), -4 * time.Minute, ""},
		{"clock 4 min ahead", authClient(t), 4 * time.Minute, ""},
		{"clock 5 min behind", authClient(t), -ProofWindow, ""},
		{"clock 5 min ahead", authClient(t), ProofWindow, ""},
		{"stale: 6 min behind", authClient(t), -6 * time.Minute, RejectSecurityPolicy},
		{"future: 6 min ahead", authClient(t), 6 * time.Minute, RejectSecurityPolicy},
		{"key of another agent", withKey("acme", "acme", "bob"), 0, RejectSecurityPolicy},
		{"key of another org", withKey("acme", "other", "alice"), 0, RejectSecurityPolicy},
		{"unknown org", withKey("nope", "nope", "alice"), 0, RejectSecurityPolicy},
		{"no key", ClientConfig{AgentID: "alice", Security: frame.SecurityAEAD}, 0, RejectSecurityPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := authServer(t, nil)
			client, server, err := handshakeAt(t, s, tc.client, t0.Add(tc.skew), t0)
			if tc.want != "" {
				if rejectCode(err) != tc.want {
					t.Fatalf("err %v, want REJECT %s", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !client.Params.Authenticated || !server.Params.Authenticated || client.Org != "acme" || server.Org != "acme" {
				t.Fatalf("not authenticated: %v / %v", client, server)
			}
			if !bytes.Equal(client.SendKey(), server.ReceiveKey()) || !bytes.Equal(client.ReceiveKey(), server.SendKey()) {
				t.Fatal("keys differ")
			}
		})
	}
}

// The frame keys are exactly §5.1's derivation, with the agent key in the
// IKM: recomputed here from the deterministic ephemeral scalars.
func TestFrameKeysFollowSpec(t *testing.T) {
	s := authServer(t, func(c *ServerConfig) { c.entropy = newScript("daemon", seq(0x80, 32)) })
	cc := authClient(t)
	cc.entropy = newScript("client", seq(0x01, 32))
	client, server, err := handshake(t, s, cc, t0)
	if err != nil {
		t.Fatal(err)
	}
	sk, _ := ephemeralKey(bytes.NewReader(seq(0x01, 32)))
	shared, err := sk.SharedSecret(client.Peer.Security.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%x", shared[:]); got != "5266019be756db8c25a94f398234f82d8fc04c95ca6375587edaf39ce04cc631" {
		t.Fatalf("shared secret %s (daemon key not the scripted one?)", got)
	}
	c2s, s2c, _, _ := sessionKeys(shared[:], testAgentKey(t, "acme", "alice"), client.Transcript)
	if !bytes.Equal(c2s[:], server.ReceiveKey()) || !bytes.Equal(s2c[:], client.ReceiveKey()) {
		t.Fatal("keys are not HKDF(transcript, shared ‖ agent key)")
	}
	bare, _, _, _ := sessionKeys(shared[:], nil, client.Transcript)
	if bytes.Equal(bare[:], c2s[:]) {
		t.Fatal("agent key has no effect")
	}
}

func TestAuthenticationTamperedHello(t *testing.T) {
	s := authServer(t, nil)
	h, err := NewHello(authClient(t), t0)
	if err != nil {
		t.Fatal(err)
	}
	flipNonce := func(msg string) string {
		i := strings.Index(msg, `"nonce":"`) + len(`"nonce":"`)
		c := byte('A')
		if msg[i] == 'A' {
			c = 'B'
		}
		return msg[:i] + string(c) + msg[i+1:]
	}
	replace := func(old, new string) func(string) string {
		return func(msg string) string {
			if !strings.Contains(msg, old) {
				t.Fatalf("%q not in HELLO", old)
			}
			return strings.Replace(msg, old, new, 1)
		}
	}
	// The proof covers the whole HELLO (security review finding 2): the
	// requested mode, the models, every byte.
	for name, tamper := range map[string]func(string) string{
		"agent id":    replace(`"agent_id":"alice"`, `"agent_id":"alicf"`),
		"timestamp":   replace(`"timestamp":1705520400000`, `"timestamp":1705520400001`),
		"nonce":       flipNonce,
		"mode":        replace(`"mode":"aead"`, `"mode":"none"`),
		"max payload": replace(`"max_payload":0`, `"max_payload":1`),
		"whitespace":  replace(`,"timestamp"`, ` ,"timestamp"`),
		"agent type":  replace(`"agent_type":"m2md-go"`, `"agent_type":"m2md-gp"`),
		"extra field": replace(`"extensions":{}`, `"extensions":{"x":"y"}`),
	} {
		_, _, err := s.Accept(t0, []byte(tamper(string(h.Message()))), false)
		if rejectCode(err) != RejectSecurityPolicy {
			t.Errorf("%s: err %v", name, err)
		}
	}
	// The untouched HELLO still works (the failures above used no proof up).
	if _, _, err := s.Accept(t0, h.Message(), false); err != nil {
		t.Fatal(err)
	}
}

func TestAuthenticationReplay(t *testing.T) {
	s := authServer(t, nil)
	h, err := NewHello(authClient(t), t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Accept(t0, h.Message(), false); err != nil {
		t.Fatal(err)
	}
	_, reply, err := s.Accept(t0.Add(time.Second), h.Message(), false)
	if rejectCode(err) != RejectSecurityPolicy || !strings.Contains(err.Error(), "replayed") {
		t.Fatalf("replay: %v", err)
	}
	if r, _ := ParseControl(reply); r == nil || r.Reject.Code != RejectSecurityPolicy {
		t.Fatalf("reply %q", reply)
	}
	// Once the proof's window is over, the timestamp check refuses it.
	if _, _, err := s.Accept(t0.Add(ProofWindow+time.Second), h.Message(), false); rejectCode(err) != RejectSecurityPolicy {
		t.Fatalf("late replay: %v", err)
	}
}

func TestReplayCacheBounded(t *testing.T) {
	s := authServer(t, func(c *ServerConfig) { c.ReplayCacheSize = 2 })
	hello := func(at time.Time) []byte {
		h, err := NewHello(authClient(t), at)
		if err != nil {
			t.Fatal(err)
		}
		return h.Message()
	}
	for i := range 2 {
		if _, _, err := s.Accept(t0, hello(t0), false); err != nil {
			t.Fatalf("hello %d: %v", i, err)
		}
	}
	// Full of live proofs: fail closed rather than forget one.
	if _, _, err := s.Accept(t0, hello(t0), false); rejectCode(err) != RejectRateLimited || !errors.Is(err, ErrRateLimited) {
		t.Fatalf("full cache: %v", err)
	}
	// A failed proof takes no room.
	if s.proofs["acme"].len() != 2 {
		t.Fatalf("%d proofs", s.proofs["acme"].len())
	}
	// Each org has its own share (security review finding 7): acme's full
	// cache does not lock out another org's agents.
	other := ClientConfig{AgentID: "bob", Org: "other", Security: frame.SecurityAEAD}
	other.AgentKey, _ = deriveAgentKey(seq(0x50, 32), "other", "bob")
	h, err := NewHello(other, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Accept(t0, h.Message(), false); err != nil {
		t.Fatalf("another org while acme's cache is full: %v", err)
	}
	later := t0.Add(2*ProofWindow + time.Second)
	if _, _, err := s.Accept(later, hello(later), false); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	if n := s.proofs["acme"].len(); n != 1 {
		t.Fatalf("%d proofs after expiry", n)
	}
}

func TestProofCacheOrderAndCompaction(t *testing.T) {
	c := newProofCache(1000, time.Minute)
	var p [proofSize]byte
	now := t0
	for i := range 5000 {
		p[0], p[1] = byte(i), byte(i>>8)
		if err := c.add(now, p); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
		now = now.Add(100 * time.Millisecond) // 600 live at a time
	}
	if n := c.len(); n != 600 {
		t.Fatalf("%d live", n)
	}
	if len(c.queue) > 2*1000 {
		t.Fatalf("queue grew to %d", len(c.queue))
	}
	// A clock step back keeps the FIFO ordered.
	p[2] = 1
	if err := c.add(now.Add(-time.Hour), p); err != nil {
		t.Fatal(err)
	}
	if err := c.add(now, p); !errors.Is(err, errProofReplayed) {
		t.Fatalf("replay after clock step: %v", err)
	}
}

func TestClientKeyWithoutDaemonAuth(t *testing.T) {
	s := newTestServer(t, nil)
	_, _, err := handshake(t, s, authClient(t), t0)
	if !errors.Is(err, ErrAuthDowngrade) {
		t.Fatalf("err %v", err)
	}
}

func TestServerCloseWipesSecrets(t *testing.T) {
	secret := seq(0, 32)
	s := newTestServer(t, func(c *ServerConfig) { c.OrgSecrets = map[string]security.Secret{"acme": secret} })
	secret[0] = 0xff // NewServer copied it
	if _, _, err := handshake(t, s, authClient(t), t0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, _, err := handshake(t, s, authClient(t), t0); rejectCode(err) != RejectSecurityPolicy {
		t.Fatalf("after Close: %v", err)
	}
}

func TestAcceptConcurrent(t *testing.T) {
	s := authServer(t, nil)
	var wg sync.WaitGroup
	ids := make([]string, 16)
	for i := range ids {
		wg.Go(func() {
			h, err := NewHello(authClient(t), t0)
			if err != nil {
				t.Error(err)
				return
			}
			sess, _, err := s.Accept(t0, h.Message(), false)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = sess.ID
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("duplicate session id %s", id)
		}
		seen[id] = true
	}
}

func TestConfigValidation(t *testing.T) {
	// field: the ServerConfig field the error names (configerr), so that
	// the daemon can name its own and the command its flag; "" for the
	// settings the daemon never passes on from its Config.
	for _, tc := range []struct {
		name, field string
		cfg         ServerConfig
	}{
		{"session timeout 59 s", "SessionTimeout", ServerConfig{SessionTimeout: 59 * time.Second}},
		{"session timeout 61 min", "SessionTimeout", ServerConfig{SessionTimeout: 61 * time.Minute}},
		{"negative session timeout", "SessionTimeout", ServerConfig{SessionTimeout: -time.Second}},
		{"ping above session", "PingInterval", ServerConfig{SessionTimeout: time.Minute, PingInterval: 2 * time.Minute}},
		{"ping below 1 s", "PingInterval", ServerConfig{PingInterval: time.Millisecond}},
		{"pong above ping", "PongTimeout", ServerConfig{PingInterval: 5 * time.Second, PongTimeout: 6 * time.Second}},
		{"max payload 17 MiB", "MaxPayload", ServerConfig{MaxPayload: 17 << 20}},
		{"max payload 100", "MaxPayload", ServerConfig{MaxPayload: 100}},
		{"unknown algorithm", "", ServerConfig{Algorithms: []Algorithm{"brotli"}}},
		{"unknown encoding", "", ServerConfig{Encodings: []Encoding{"Heuristic"}}},
		{"bad mode", "MinSecurity", ServerConfig{MinSecurity: 7}},
		{"bad org", "OrgSecrets", ServerConfig{OrgSecrets: map[string]security.Secret{"a b": testMaster}}},
		{"short secret", "OrgSecrets", ServerConfig{OrgSecrets: map[string]security.Secret{"acme": seq(0, 15)}}},
		{"bad agent id", "", ServerConfig{AgentID: "m2m d"}},
		{"negative cache", "ReplayCacheSize", ServerConfig{ReplayCacheSize: -1}},
	} {
		_, err := NewServer(tc.cfg)
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if tc.field == "" {
			continue
		}
		field := "negotiate.ServerConfig." + tc.field
		testkit.WantConfigError(t, err, field, field)
	}
	for _, tc := range []struct {
		cfg                 ServerConfig
		session, ping, pong time.Duration
	}{
		{ServerConfig{}, 5 * time.Minute, time.Minute, 10 * time.Second},
		{ServerConfig{SessionTimeout: time.Hour}, time.Hour, time.Minute, 10 * time.Second},
		{ServerConfig{SessionTimeout: time.Minute, PingInterval: 5 * time.Second}, time.Minute, 5 * time.Second, 5 * time.Second},
		{ServerConfig{PingInterval: 30 * time.Second, PongTimeout: 2 * time.Second}, 5 * time.Minute, 30 * time.Second, 2 * time.Second},
	} {
		s, err := NewServer(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := s.Config()
		if c.SessionTimeout != tc.session || c.PingInterval != tc.ping || c.PongTimeout != tc.pong {
			t.Errorf("%+v: timers %v %v %v", tc.cfg, c.SessionTimeout, c.PingInterval, c.PongTimeout)
		}
	}

	key := seq(0, 32)
	for _, tc := range []struct {
		name string
		cfg  ClientConfig
	}{
		{"no agent id", ClientConfig{}},
		{"bad agent id", ClientConfig{AgentID: "agent 001"}},
		{"org without key", ClientConfig{AgentID: "a", Org: "acme"}},
		{"key without org", ClientConfig{AgentID: "a", AgentKey: key}},
		{"short key", ClientConfig{AgentID: "a", Org: "acme", AgentKey: key[:16]}},
		{"bad org", ClientConfig{AgentID: "a", Org: "ac/me", AgentKey: key}},
		{"unknown algorithm", ClientConfig{AgentID: "a", Algorithms: []Algorithm{"none"}}},
		{"preferred not offered", ClientConfig{AgentID: "a", Encodings: []Encoding{EncodingO200k}, PreferredEncoding: EncodingCl100k}},
		{"max payload 100", ClientConfig{AgentID: "a", MaxPayload: 100}},
		{"bad mode", ClientConfig{AgentID: "a", Security: 3}},
		{"empty model", ClientConfig{AgentID: "a", Models: []string{""}}},
		{"too many models", ClientConfig{AgentID: "a", Models: make([]string, maxModels+1)}},
		{"HELLO too large", ClientConfig{AgentID: "a", Models: manyModels(maxModels)}},
	} {
		if _, err := NewHello(tc.cfg, t0); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func manyModels(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Repeat("m", 200) + string(rune('a'+i%26))
	}
	return out
}

func fmtAll(s *Session) string {
	return fmt.Sprintf("%v %+v %#v %s", s, s, s, s)
}

// An unknown org is refused after the same work as a wrong key, the agent
// key derivation and the proof's MAC against a decoy secret, so the time
// taken does not tell a prober which orgs exist (security review finding
// 8). Timing cannot be asserted in a test; the work done can: both
// refusals make the same allocations, the derivation's and the MAC's
// included.
func TestUnknownOrgCostsAsMuchAsWrongKey(t *testing.T) {
	s := authServer(t, nil)
	hello := func(org string, key []byte) []byte {
		h, err := NewHello(ClientConfig{AgentID: "alice", Org: org, AgentKey: key}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return h.Message()
	}
	wrongKey := hello("acme", seq(0x33, 32))
	unknownOrg := hello("acmf", testAgentKey(t, "acmf", "alice"))
	allocs := func(msg []byte) float64 {
		return testing.AllocsPerRun(50, func() {
			if _, _, err := s.Accept(t0, msg, false); rejectCode(err) != RejectSecurityPolicy {
				t.Fatalf("err %v", err)
			}
		})
	}
	if a, b := allocs(wrongKey), allocs(unknownOrg); a != b {
		t.Fatalf("wrong key: %v allocations, unknown org: %v; the refusals do different work", a, b)
	}
	// The decoy is never a way in, even for a proof made with it.
	decoyKey, err := deriveAgentKey(s.decoy, "acmf", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Accept(t0, hello("acmf", decoyKey), false); rejectCode(err) != RejectSecurityPolicy {
		t.Fatalf("proof made with the decoy secret: %v", err)
	}
}

// A HELLO may be exactly MaxControlSize bytes long; one byte more is a
// configuration error that names what to trim.
func TestHelloAtMaxControlSize(t *testing.T) {
	ext := map[string]string{}
	size := func(last int) (int, error) {
		ext["zz"] = strings.Repeat("x", last)
		h, err := NewHello(ClientConfig{AgentID: "alice", Extensions: ext}, t0)
		if err != nil {
			return 0, err
		}
		defer h.Close()
		return len(h.Message()), nil
	}
	for i := 0; ; i++ {
		n, err := size(0)
		if err != nil {
			t.Fatal(err)
		}
		if n > MaxControlSize-200 {
			break
		}
		ext[fmt.Sprintf("p%03d", i)] = strings.Repeat("x", 200)
	}
	small, _ := size(0)
	last := MaxControlSize - small
	if n, err := size(last); err != nil || n != MaxControlSize {
		t.Fatalf("HELLO of %d bytes: %v; want exactly %d accepted", n, err, MaxControlSize)
	}
	if _, err := size(last + 1); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "extensions") {
		t.Fatalf("one byte over: %v, want ErrConfig naming the extensions", err)
	}
}
