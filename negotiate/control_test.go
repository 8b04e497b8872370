package negotiate

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/jsonscan"
)

const (
	testSID = "sess_AbCdEfGhIjKlMnOpQrSt"
	// A complete m2md HELLO payload, written by hand from docs/protocol.md §3.1.
	helloPayload = `{"version":"3.0","agent_id":"alice","agent_type":"m2md-go",
 "compression":{"algorithms":["m2m","tokennative"],"max_payload":16777216,"streaming":true,
   "ml_routing":false,"encodings":["Cl100kBase","O200kBase"],"preferred_encoding":"Cl100kBase"},
 "security":{"threat_detection":false,"model_version":null,"blocking_mode":false,"block_threshold":0.8,
   "mode":"aead","key_exchange":"x25519","public_key":"B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9/AsrhtHHw=",
   "nonce":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=","org":"acme",
   "proof":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="},
 "extensions":{},"models":["gpt-4o","gpt-4o-mini"]}`
	negotiatedJSON = `{"algorithms":["m2m"],"encoding":"Cl100kBase","max_payload":16777216,"security_mode":"aead",
 "session_timeout_ms":300000,"ping_interval_ms":60000,"pong_timeout_ms":10000,"authenticated":true,
 "confirm":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}`
)

func ctl(s string) []byte { return append([]byte{byte(KindControl)}, s...) }

func helloEnvelope(payload string) []byte {
	return ctl(`{"type":"HELLO","timestamp":1705520400000,"payload":` + payload + `}`)
}

func TestParseHelloByHand(t *testing.T) {
	m, err := ParseControl(helloEnvelope(helloPayload))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Capabilities
	want := &Capabilities{
		Version: "3.0", AgentID: "alice", AgentType: "m2md-go",
		Compression: Compression{
			Algorithms: []Algorithm{"m2m", "tokennative"}, MaxPayload: 16 << 20, Streaming: true,
			Encodings: []Encoding{"Cl100kBase", "O200kBase"}, PreferredEncoding: "Cl100kBase",
		},
		Security: SecurityCaps{
			BlockThreshold: 0.8, Mode: frame.SecurityAEAD, KeyExchange: "x25519",
			PublicKey: unhex(t, "07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c"),
			Nonce:     seq(0, 32), Org: "acme", Proof: seq(0, 32),
		},
		Extensions: map[string]string{},
		Models:     []string{"gpt-4o", "gpt-4o-mini"},
	}
	if m.Type != TypeHello || m.SessionID != "" || m.Timestamp != 1705520400000 || !reflect.DeepEqual(c, want) {
		t.Fatalf("parsed %+v\n%+v\nwant %+v", m, c, want)
	}
}

func TestControlRoundTrip(t *testing.T) {
	hello, err := ParseControl(helloEnvelope(helloPayload))
	if err != nil {
		t.Fatal(err)
	}
	accept := *hello
	accept.Type, accept.SessionID = TypeAccept, testSID
	caps := *hello.Capabilities
	caps.Extensions = map[string]string{"b": "2", "a": "\"quoted\"\n"}
	caps.Security.ModelVersion = "1.0.0"
	caps.Security.Org, caps.Security.Proof = "", nil
	caps.Negotiated = &Negotiated{
		Algorithms: []Algorithm{"m2m"}, Encoding: "O200kBase", MaxPayload: 4096, SecurityMode: frame.SecurityHMAC,
		SessionTimeout: DefaultSessionTimeout, PingInterval: DefaultPingInterval, PongTimeout: DefaultPongTimeout,
		Confirm: seq(0x40, 32),
	}
	accept.Capabilities = &caps
	for _, m := range []*ControlMessage{
		hello, &accept,
		{Type: TypeReject, Timestamp: 1, Reject: &Reject{Code: RejectServerBusy, Message: "busy"}},
		{Type: TypePing, SessionID: testSID, Timestamp: 2},
		{Type: TypePong, SessionID: testSID, Timestamp: 3},
		{Type: TypeClose, SessionID: testSID, Timestamp: math.MaxInt64, Close: &Close{Reason: ReasonReplaced, Message: "newer session"}},
	} {
		b, err := AppendControl(nil, m)
		if err != nil {
			t.Fatalf("%s: %v", m.Type, err)
		}
		got, err := ParseControl(b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", m.Type, err, b[1:])
		}
		if got.signedAt != m.signedAt {
			t.Fatalf("%s: proof or confirmation read at %v, written at %v", m.Type, got.signedAt, m.signedAt)
		}
		got.signedAt, got.signed0 = m.signedAt, m.signed0
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%s round trip\n got %+v\nwant %+v\n%s", m.Type, got, m, b[1:])
		}
	}
}

// The Rust reference's member order and compact form (wire reference §7.1).
func TestControlExactBytes(t *testing.T) {
	for _, tc := range []struct {
		msg  []byte
		want string
	}{
		{AppendPing(nil, testSID, t0), `{"type":"PING","session_id":"` + testSID + `","payload":{},"timestamp":1705520400000}`},
		{AppendPong(nil, testSID, t0), `{"type":"PONG","session_id":"` + testSID + `","payload":{},"timestamp":1705520400000}`},
		{AppendClose(nil, testSID, t0, ReasonTimeout, "3 PINGs missed"), `{"type":"CLOSE","session_id":"` + testSID + `","payload":{"reason":"TIMEOUT","message":"3 PINGs missed"},"timestamp":1705520400000}`},
		{AppendReject(nil, t0, RejectVersionMismatch, `version "4.0"`), `{"type":"REJECT","payload":{"code":"VERSION_MISMATCH","message":"version \"4.0\""},"timestamp":1705520400000}`},
	} {
		if tc.msg[0] != byte(KindControl) || string(tc.msg[1:]) != tc.want {
			t.Errorf("got  %q\nwant %q", tc.msg, tc.want)
		}
	}
}

func TestParseControlStrictness(t *testing.T) {
	ping := func(extra string) []byte {
		return ctl(`{"type":"PING","session_id":"` + testSID + `","payload":{}` + extra + `}`)
	}
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name string
		msg  []byte
		want error // nil: accepted
	}{
		{"ping", ping(`,"timestamp":5`), nil},
		{"missing timestamp", ping(``), ErrMalformedControl},
		{"null timestamp", ping(`,"timestamp":null`), ErrMalformedControl},
		{"string timestamp", ping(`,"timestamp":"5"`), ErrMalformedControl},
		{"negative timestamp", ping(`,"timestamp":-5`), ErrMalformedControl},
		{"fraction timestamp", ping(`,"timestamp":5.0`), ErrMalformedControl},
		{"exponent timestamp", ping(`,"timestamp":5e3`), ErrMalformedControl},
		{"timestamp 2^63", ping(`,"timestamp":9223372036854775808`), ErrMalformedControl},
		{"timestamp 2^64", ping(`,"timestamp":18446744073709551616`), ErrMalformedControl},
		{"upper-case member name", ping(`,"TIMESTAMP":5`), ErrMalformedControl},
		{"duplicate timestamp", ping(`,"timestamp":5,"timestamp":6`), ErrMalformedControl},
		{"duplicate unknown member", ping(`,"timestamp":5,"x":1,"x":2`), nil},
		{"unknown members", ping(`,"timestamp":5,"extra":{"a":[1,2,{"b":null}]},"z":true`), nil},
		{"session_id null", ctl(`{"type":"PING","session_id":null,"payload":{},"timestamp":5}`), nil},
		{"session_id absent", ctl(`{"type":"PING","timestamp":5}`), nil},
		{"session_id number", ctl(`{"type":"PING","session_id":5,"timestamp":5}`), ErrMalformedControl},
		{"payload array", ctl(`{"type":"PING","payload":[],"timestamp":5}`), ErrMalformedControl},
		{"payload null", ctl(`{"type":"PING","payload":null,"timestamp":5}`), nil},
		{"DATA type", ctl(`{"type":"DATA","timestamp":5}`), ErrMalformedControl},
		{"lower-case type", ctl(`{"type":"ping","timestamp":5}`), ErrMalformedControl},
		{"missing type", ctl(`{"timestamp":5}`), ErrMalformedControl},
		{"whitespace", ctl(" \t\r\n{ \"type\" : \"PING\" ,\n \"timestamp\" : 5 }\n "), nil},
		{"trailing data", ctl(`{"type":"PING","timestamp":5}{}`), ErrMalformedControl},
		{"not an object", ctl(`["PING",5]`), ErrMalformedControl},
		{"empty", ctl(``), ErrMalformedControl},
		{"truncated", ctl(`{"type":"PING","timestamp":5`), ErrMalformedControl},
		{"trailing comma", ctl(`{"type":"PING","timestamp":5,}`), ErrMalformedControl},
		{"single quotes", ctl(`{'type':"PING","timestamp":5}`), ErrMalformedControl},
		{"depth 32", ping(`,"timestamp":5,"x":` + deep(31)), nil},
		{"depth 33", ping(`,"timestamp":5,"x":` + deep(32)), ErrMalformedControl},
		{"invalid UTF-8", ping(`,"timestamp":5,"x":"` + "\xff" + `"`), ErrMalformedControl},
		{"invalid UTF-8 after escape", ping(`,"timestamp":5,"x":"\n` + "\xc3" + `"`), ErrMalformedControl},
		{"lone high surrogate", ping(`,"timestamp":5,"x":"\ud800"`), ErrMalformedControl},
		{"lone low surrogate", ping(`,"timestamp":5,"x":"\udc00"`), ErrMalformedControl},
		{"surrogate pair", ping(`,"timestamp":5,"x":"\ud83d\ude00"`), nil},
		{"raw control character", ping(`,"timestamp":5,"x":"a` + "\x01" + `"`), ErrMalformedControl},
		{"bad escape", ping(`,"timestamp":5,"x":"\x41"`), ErrMalformedControl},
		{"leading zero", ping(`,"timestamp":05`), ErrMalformedControl},
		{"too large", ping(`,"timestamp":5,"x":"` + strings.Repeat("a", MaxControlSize) + `"`), ErrControlTooLarge},
		{"too many elements", ping(`,"timestamp":5,"x":[` + strings.Repeat("0,", 10000) + `0]`), ErrMalformedControl},
		{"10,000 elements", ping(`,"timestamp":5,"x":[` + strings.Repeat("0,", 9999) + `0]`), nil},
		{"too many members", ping(`,"timestamp":5,"x":{` + strings.Repeat(`"a":0,`, 10000) + `"a":0}`), ErrMalformedControl},
		{"10,000 members", ping(`,"timestamp":5,"x":{` + strings.Repeat(`"a":0,`, 9999) + `"a":0}`), nil},
		{"data kind", append([]byte{byte(KindData)}, `{"type":"PING","timestamp":5}`...), ErrNotControl},
		{"no kind", []byte(`{"type":"PING","timestamp":5}`), ErrNotControl},
		{"close without payload", ctl(`{"type":"CLOSE","session_id":"` + testSID + `","timestamp":5}`), nil},
		{"close reason number", ctl(`{"type":"CLOSE","payload":{"reason":1},"timestamp":5}`), ErrMalformedControl},
		{"reject without payload", ctl(`{"type":"REJECT","timestamp":5}`), ErrMalformedControl},
		{"reject without code", ctl(`{"type":"REJECT","payload":{"message":"x"},"timestamp":5}`), ErrMalformedControl},
		{"reject unknown code", ctl(`{"type":"REJECT","payload":{"code":"FUTURE"},"timestamp":5}`), nil},
		{"hello without payload", ctl(`{"type":"HELLO","timestamp":5}`), ErrMalformedControl},
		{"hello", helloEnvelope(helloPayload), nil},
		{"accept without negotiated", ctl(`{"type":"ACCEPT","session_id":"` + testSID + `","timestamp":5,"payload":` + helloPayload + `}`), ErrMalformedControl},
		{"accept", ctl(`{"type":"ACCEPT","session_id":"` + testSID + `","timestamp":5,"payload":` + withMember(helloPayload, "negotiated", negotiatedJSON) + `}`), nil},
		{"accept with UUID session id", ctl(`{"type":"ACCEPT","session_id":"9b2e6a4c-1f0d-4c3e-8a55-0c1d2e3f4a5b","timestamp":5,"payload":` + withMember(helloPayload, "negotiated", negotiatedJSON) + `}`), ErrMalformedControl},
		{"accept without confirmation", ctl(`{"type":"ACCEPT","session_id":"` + testSID + `","timestamp":5,"payload":` + withMember(helloPayload, "negotiated", strings.Replace(negotiatedJSON, `"confirm"`, `"x"`, 1)) + `}`), ErrMalformedControl},
		{"accept with short confirmation", ctl(`{"type":"ACCEPT","session_id":"` + testSID + `","timestamp":5,"payload":` + withMember(helloPayload, "negotiated", strings.Replace(negotiatedJSON, `"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}`, `"AAEC"}`, 1)) + `}`), ErrMalformedControl},
		{"accept without session id", ctl(`{"type":"ACCEPT","timestamp":5,"payload":` + withMember(helloPayload, "negotiated", negotiatedJSON) + `}`), ErrMalformedControl},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseControl(tc.msg)
			if tc.want == nil && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// withMember adds (or, for an empty value, removes) a top-level member of a
// payload object written as in helloPayload.
func withMember(payload, name, value string) string {
	return strings.TrimSuffix(payload, "}") + `,"` + name + `":` + value + `}`
}

// edit replaces old (which must occur) in s.
func edit(t testing.TB, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("%q not in payload", old)
	}
	return strings.Replace(s, old, new, 1)
}

func TestParseCapabilitiesStrictness(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new string
		ok       bool
	}{
		{"unknown members everywhere", `"streaming":true`, `"streaming":true,"zstd":{"level":3}`, true},
		{"no encodings", `"encodings":["Cl100kBase","O200kBase"],`, ``, true},
		{"no preferred_encoding", `,"preferred_encoding":"Cl100kBase"`, ``, true},
		{"unknown algorithm kept", `["m2m","tokennative"]`, `["brotli","m2m"]`, true},
		{"model_version string", `"model_version":null`, `"model_version":"1.0.0"`, true},
		{"no models", `,"models":["gpt-4o","gpt-4o-mini"]`, ``, true},
		{"no extensions", `"extensions":{},`, ``, true},
		{"no org and proof", `,"org":"acme",`, `,`, true},
		{"missing version", `"version":"3.0",`, ``, false},
		{"numeric version", `"version":"3.0"`, `"version":3.0`, false},
		{"missing agent_type", `"agent_type":"m2md-go",`, ``, false},
		{"missing max_payload", `"max_payload":16777216,`, ``, false},
		{"negative max_payload", `16777216`, `-1`, false},
		{"missing streaming", `"streaming":true,`, ``, false},
		{"missing ml_routing", `"ml_routing":false,`, ``, false},
		{"missing block_threshold", `,"block_threshold":0.8`, ``, false},
		{"missing threat_detection", `"threat_detection":false,`, ``, false},
		{"missing compression", `"compression":{"algorithms":["m2m","tokennative"],"max_payload":16777216,"streaming":true,
   "ml_routing":false,"encodings":["Cl100kBase","O200kBase"],"preferred_encoding":"Cl100kBase"},`, ``, false},
		{"algorithm not a string", `["m2m","tokennative"]`, `["m2m",1]`, false},
		{"missing mode", `"mode":"aead",`, ``, false},
		{"unknown mode", `"mode":"aead"`, `"mode":"AEAD"`, false},
		{"unknown key exchange", `"key_exchange":"x25519"`, `"key_exchange":"mlkem768"`, false},
		{"missing public key", `"public_key":"B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9/AsrhtHHw=",`, ``, false},
		{"short public key", `B6N8vBQgk8i3VdwbEOhstCY3StFqqFPtC9/AsrhtHHw=`, `B6N8vBQgk8i3Vdwb`, false},
		{"public key unpadded", `HHw=`, `HHw`, false},
		{"public key with newline", `B6N8vBQgk8i3Vdwb`, `B6N8vBQg\nk8i3Vdw`, false},
		{"public key URL alphabet", `C9/Asrht`, `C9_Asrht`, false},
		{"public key non-zero trailing bits", `HHw=`, `HHx=`, false},
		{"missing nonce", `"nonce":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",`, ``, false},
		{"short proof", `"proof":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="`, `"proof":"AAEC"`, false},
		{"invalid org", `"org":"acme"`, `"org":"acme corp"`, false},
		{"empty agent id", `"agent_id":"alice"`, `"agent_id":""`, false},
		{"agent id with @", `"agent_id":"alice"`, `"agent_id":"agent@001"`, false},
		{"agent id with slash", `"agent_id":"alice"`, `"agent_id":"agent/001"`, false},
		{"agent id 129 bytes", `"agent_id":"alice"`, `"agent_id":"` + strings.Repeat("a", 129) + `"`, false},
		{"agent id 128 bytes", `"agent_id":"alice"`, `"agent_id":"` + strings.Repeat("a", 128) + `"`, true},
		{"extension not a string", `"extensions":{}`, `"extensions":{"a":1}`, false},
		{"duplicate extension", `"extensions":{}`, `"extensions":{"a":"1","a":"2"}`, false},
		{"empty model", `"gpt-4o-mini"]`, `""]`, false},
		{"model with newline", `"gpt-4o-mini"]`, `"gpt\n4o"]`, false},
		{"model 256 bytes", `"gpt-4o-mini"]`, `"` + strings.Repeat("m", 256) + `"]`, false},
		{"model 255 bytes", `"gpt-4o-mini"]`, `"` + strings.Repeat("m", 255) + `"]`, true},
		{"block_threshold too large for f32", `"block_threshold":0.8`, `"block_threshold":1e39`, false},
		{"duplicate security", `"extensions":{}`, `"extensions":{},"security":{}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseControl(helloEnvelope(edit(t, helloPayload, tc.old, tc.new)))
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrMalformedControl) {
				t.Fatalf("err %v, want ErrMalformedControl", err)
			}
		})
	}
}

// A Rust reference HELLO (wire reference §7.3) lacks m2md's security
// members, and m2md needs them for the key exchange.
func TestRustHelloIsMalformed(t *testing.T) {
	rust := `{"type":"HELLO","payload":{"version":"3.0","agent_id":"9b2e6a4c-1f0d-4c3e-8a55-0c1d2e3f4a5b","agent_type":"m2m-rust","compression":{"algorithms":["m2m","tokennative","brotli","none"],"max_payload":0,"streaming":true,"ml_routing":false,"encodings":["Cl100kBase","O200kBase"],"preferred_encoding":"Cl100kBase"},"security":{"threat_detection":false,"model_version":null,"blocking_mode":false,"block_threshold":0.8},"extensions":{}},"timestamp":1705520400000}`
	_, err := ParseControl(ctl(rust))
	if !errors.Is(err, ErrMalformedControl) || !strings.Contains(err.Error(), "security.mode") {
		t.Fatalf("err %v", err)
	}
}

func TestAppendControlRefuses(t *testing.T) {
	for _, m := range []*ControlMessage{
		{Type: "DATA"},
		{Type: TypePing, Timestamp: -1},
		{Type: TypeHello},
		{Type: TypeAccept, SessionID: testSID, Capabilities: &Capabilities{}},
		{Type: TypeAccept, Capabilities: &Capabilities{Negotiated: &Negotiated{}}},
		{Type: TypeReject},
	} {
		out, err := AppendControl([]byte("x"), m)
		if !errors.Is(err, ErrMalformedControl) || string(out) != "x" {
			t.Errorf("%+v: %v %q", m, err, out)
		}
	}
}

func TestJSONStringEscaping(t *testing.T) {
	in := "\"\\\b\f\n\r\t\x01\x1f/<>&\u2028é\x7f😀"
	want := `"\"\\\b\f\n\r\t\u0001\u001f/<>&` + "\u2028é\x7f😀" + `"`
	if got := string(jsonscan.AppendString(nil, in)); got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	v, err := parseJSON([]byte(want), jsonscan.Limits{MaxDepth: 1, MaxArray: 1, MaxString: 100})
	if err != nil {
		t.Fatal(err)
	}
	if back := v.text(); back != in {
		t.Fatalf("read back %q", back)
	}
	if got := string(jsonscan.AppendString(nil, "a\xffb")); got != "\"a\ufffdb\"" {
		t.Fatalf("invalid UTF-8 written as %q", got)
	}
}

// f32 as serde_json writes it (wire reference §2.5).
func TestJSONFloat32(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		want string
	}{
		{0.8, "0.8"}, {1, "1.0"}, {0, "0.0"}, {-0.5, "-0.5"}, {123456.5, "123456.5"},
		{1e-5, "0.00001"}, {1e-6, "0.000001"}, {1.25e-6, "0.00000125"}, {1e-7, "1e-7"}, {-2.5e-7, "-2.5e-7"},
		{1.5e12, "1500000000000.0"}, {1234567.8, "1234567.8"}, {1e13, "1e13"}, {1.5e30, "1.5e30"}, {1e16, "1e16"},
		{float32(math.SmallestNonzeroFloat32), "1e-45"}, {math.MaxFloat32, "3.4028235e38"}, {float32(math.Copysign(0, -1)), "-0.0"},
		{float32(math.Inf(1)), "null"},
	} {
		if got := string(appendJSONFloat32(nil, tc.f)); got != tc.want {
			t.Errorf("%g: got %s, want %s", tc.f, got, tc.want)
		}
	}
}

func FuzzParseControl(f *testing.F) {
	f.Add(helloEnvelope(helloPayload))
	f.Add(ctl(`{"type":"ACCEPT","session_id":"` + testSID + `","timestamp":5,"payload":` + withMember(helloPayload, "negotiated", negotiatedJSON) + `}`))
	f.Add(ctl(`{"type":"ACCEPT","session_id":"` + testSID + `","timestamp":5,"payload":` + withMember(withMember(helloPayload, "features", `["cancel","x"]`), "negotiated", strings.TrimSuffix(negotiatedJSON, "}")+`,"features":["cancel"]}`) + `}`))
	f.Add(AppendPing(nil, testSID, t0))
	f.Add(AppendClose(nil, testSID, t0, ReasonReplaced, "newer session"))
	f.Add(AppendReject(nil, t0, RejectSecurityPolicy, "authentication failed"))
	f.Add(ctl(`{"type":"PING","session_id":null,"timestamp":5,"x":"\ud83d\ude00\n"}`))
	f.Add(ctl(`{"type":"CLOSE","timestamp":1e3}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		m, err := ParseControl(msg)
		if err != nil {
			if !errors.Is(err, ErrMalformedControl) && !errors.Is(err, ErrNotControl) && !errors.Is(err, ErrControlTooLarge) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// What was accepted can be written, and writing is a fixed point:
		// parse(write(m)) writes the same bytes again.
		b1, err := AppendControl(nil, m)
		if err != nil {
			t.Fatalf("accepted message does not re-encode: %v", err)
		}
		m2, err := ParseControl(b1)
		if err != nil {
			t.Fatalf("re-encoded message refused: %v\n%s", err, b1)
		}
		b2, err := AppendControl(nil, m2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("not a fixed point:\n%s\n%s", b1, b2)
		}
	})
}
