package bench

import (
	"strings"
	"testing"
)

// FuzzTargetURLs: --url, --provider-target and --nats-url never panic, and
// what they accept names a host on a scheme the run can dial.
func FuzzTargetURLs(f *testing.F) {
	for _, s := range []string{
		"ws://127.0.0.1:8080/m2m", "wss://h:1", "quic://[::1]", "quic://127.0.0.1:4433",
		"nats://127.0.0.1:4222", "tls://h:4222", "nats://", "tls:", "ws://%zz", "http://h", "", "nats://u:p@h:1/x?y#z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if ep, err := parseTarget(raw, nil); err == nil {
			if ep.transport != TransportQUIC && ep.transport != TransportWS && ep.transport != TransportWSS {
				t.Fatalf("%q: transport %q", raw, ep.transport)
			}
			if ep.addr == "" {
				t.Fatalf("%q: no address", raw)
			}
		}
		if u, err := parseNATSURL(raw); err == nil {
			if (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
				t.Fatalf("%q accepted as %s://%s", raw, u.Scheme, u.Host)
			}
		} else if !strings.Contains(err.Error(), "--nats-url") {
			t.Fatalf("%q: error %v does not name the flag", raw, err)
		}
	})
}
