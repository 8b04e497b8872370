package negotiate

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestValidFeature(t *testing.T) {
	for _, tc := range []struct {
		f  Feature
		ok bool
	}{
		{"cancel", true}, {"tn_sealed", true}, {"a", true}, {"x-1_y", true},
		{Feature(strings.Repeat("a", maxFeatureLen)), true},
		{"", false}, {Feature(strings.Repeat("a", maxFeatureLen+1)), false},
		{"Cancel", false}, {"can cel", false}, {"cancel.v2", false}, {"é", false},
	} {
		if got := validFeature(tc.f); got != tc.ok {
			t.Errorf("validFeature(%q) = %t", tc.f, got)
		}
	}
}

// The daemon grants the offered features it has, in the client's order,
// each once; unknown names are ignored; the client adopts the answer.
func TestNegotiateFeatures(t *testing.T) {
	for _, tc := range []struct {
		name              string
		daemon, offered   []Feature
		want              []Feature
		wantAcceptMember  string
		wantHelloFeatures string
	}{
		{"none offered", []Feature{"cancel"}, nil, nil, "", ""},
		{"daemon has none", nil, []Feature{"cancel"}, nil, "", `,"features":["cancel"]`},
		{"client order, unknown ignored", []Feature{"cancel", "delta", "tn_sealed"}, []Feature{"tn_sealed", "zzz", "cancel"},
			[]Feature{"tn_sealed", "cancel"}, `,"features":["tn_sealed","cancel"],"confirm":`, `,"features":["tn_sealed","zzz","cancel"]`},
		{"duplicates once", []Feature{"cancel"}, []Feature{"cancel", "cancel"}, []Feature{"cancel"}, `,"features":["cancel"],"confirm":`, `,"features":["cancel","cancel"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t, func(c *ServerConfig) { c.Features = tc.daemon })
			h, err := NewHello(ClientConfig{AgentID: "alice", Features: tc.offered}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Contains(h.Message(), []byte(`"features"`)); got != (tc.wantHelloFeatures != "") ||
				(got && !bytes.Contains(h.Message(), []byte(tc.wantHelloFeatures+`}`))) {
				t.Fatalf("HELLO %s", h.Message())
			}
			server, reply, err := s.Accept(t0, h.Message(), false)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(server.Params.Features, tc.want) {
				t.Fatalf("daemon negotiated %q, want %q", server.Params.Features, tc.want)
			}
			// The member is written only when non-empty, after authenticated and
			// before the key confirmation.
			if tc.wantAcceptMember == "" && bytes.Contains(reply, []byte(`"features"`)) ||
				tc.wantAcceptMember != "" && !bytes.Contains(reply, []byte(`"authenticated":false`+tc.wantAcceptMember)) {
				t.Fatalf("ACCEPT %s", reply)
			}
			client, err := h.Accept(reply)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(client.Params.Features, tc.want) {
				t.Fatalf("client adopted %q", client.Params.Features)
			}
			for _, f := range []Feature{"cancel", "delta", "tn_sealed"} {
				if client.Params.Has(f) != (len(tc.want) > 0 && bytes.Contains(reply, []byte(`"`+f+`"`))) {
					t.Fatalf("Has(%s) = %t", f, client.Params.Has(f))
				}
			}
		})
	}
}

// A HELLO whose features break the syntax is malformed (REJECT UNKNOWN).
func TestHelloFeaturesMalformed(t *testing.T) {
	s := newTestServer(t, func(c *ServerConfig) { c.Features = []Feature{"cancel"} })
	long := strings.Repeat(`"f",`, maxFeatures) + `"f"`
	for _, tc := range []struct{ name, member string }{
		{"not an array", `"features":"cancel"`},
		{"not strings", `"features":[1]`},
		{"empty name", `"features":[""]`},
		{"upper case", `"features":["Cancel"]`},
		{"33 bytes", `"features":["` + strings.Repeat("a", 33) + `"]`},
		{"33 names", `"features":[` + long + `]`},
		{"twice", `"features":["cancel"],"features":["cancel"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := helloWithMember(t, tc.member)
			_, reply, err := s.Accept(t0, msg, false)
			if rejectCode(err) != RejectUnknown || !bytes.Contains(reply, []byte("features")) {
				t.Fatalf("err %v reply %s", err, reply)
			}
		})
	}
	for _, tc := range []struct {
		name, member string
		want         []Feature
	}{
		{"null is absent", `"features":null`, nil},
		{"empty list", `"features":[]`, nil},
		{"32 names", `"features":[` + strings.Repeat(`"f",`, maxFeatures-1) + `"cancel"]`, []Feature{"cancel"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess, _, err := s.Accept(t0, helloWithMember(t, tc.member), false)
			if err != nil || !reflect.DeepEqual(sess.Params.Features, tc.want) {
				t.Fatalf("err %v features %q", err, sess.Params.Features)
			}
		})
	}
}

// helloWithMember is a valid HELLO with one more member in its payload.
func helloWithMember(t *testing.T, member string) []byte {
	t.Helper()
	h, err := NewHello(ClientConfig{AgentID: "alice"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	msg := h.Message()
	i := bytes.Index(msg, []byte(`"extensions":{}`))
	if i < 0 {
		t.Fatal("no extensions member")
	}
	return append(append(append([]byte{}, msg[:i]...), member+","...), msg[i:]...)
}

func TestClientRefusesFeatureNotOffered(t *testing.T) {
	s := newTestServer(t, func(c *ServerConfig) { c.Features = []Feature{"cancel", "delta"} })
	for _, tc := range []struct {
		name string
		set  []Feature
	}{
		{"not offered", []Feature{"delta"}},
		{"twice", []Feature{"cancel", "cancel"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHello(ClientConfig{AgentID: "alice", Features: []Feature{"cancel"}}, t0)
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
			m.Capabilities.Negotiated.Features = tc.set
			if reply, err = AppendControl(nil, m); err != nil {
				t.Fatal(err)
			}
			if _, err := h.Accept(reply); !errors.Is(err, ErrBadAccept) {
				t.Fatalf("err %v", err)
			}
		})
	}
}

func TestFeaturesConfigValidation(t *testing.T) {
	many := make([]Feature, maxFeatures+1)
	for i := range many {
		many[i] = "f"
	}
	for _, fs := range [][]Feature{{"Cancel"}, {""}, many} {
		if _, err := NewServer(ServerConfig{Features: fs}); !errors.Is(err, ErrConfig) {
			t.Errorf("server %q: %v", fs, err)
		}
		if _, err := NewHello(ClientConfig{AgentID: "a", Features: fs}, t0); !errors.Is(err, ErrConfig) {
			t.Errorf("client %q: %v", fs, err)
		}
	}
}

func TestEnabledFeatures(t *testing.T) {
	impl := []Feature{"cancel", "delta"}
	for _, tc := range []struct {
		disabled, want []Feature
		err            bool
	}{
		{nil, impl, false},
		{[]Feature{"delta"}, []Feature{"cancel"}, false},
		{[]Feature{"delta", "cancel"}, nil, false},
		{[]Feature{"cancle"}, nil, true},
	} {
		got, err := EnabledFeatures(impl, tc.disabled)
		if (err != nil) != tc.err || (err != nil && !errors.Is(err, ErrConfig)) || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("disable %q: %q %v", tc.disabled, got, err)
		}
	}
}
