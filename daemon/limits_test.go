package daemon

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
)

func TestAdmissionPerIP(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	a := newAdmission(2, 3, 0)
	ip1 := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}
	ip2 := &net.UDPAddr{IP: net.ParseIP("::1"), Port: 2}
	r1, l := a.admit(ip1, now)
	r2, l2 := a.admit(ip1, now)
	if l != "" || l2 != "" {
		t.Fatalf("first two refused: %q %q", l, l2)
	}
	if _, l := a.admit(ip1, now); l != limitSessionsPerIP {
		t.Fatalf("third concurrent: %q", l)
	}
	if _, l := a.admit(ip2, now); l != "" {
		t.Fatalf("other address refused: %q", l)
	}
	r1()
	r1() // idempotent
	// One slot is free again; the third open of the minute is allowed, the
	// fourth is not.
	r3, l := a.admit(ip1, now)
	if l != "" {
		t.Fatalf("third open: %q", l)
	}
	r3()
	if _, l := a.admit(ip1, now); l != limitNewSessionsPerIP {
		t.Fatalf("fourth open in a minute: %q", l)
	}
	// 20 s later one open has refilled (3 per minute).
	if rel, l := a.admit(ip1, now.Add(21*time.Second)); l != "" {
		t.Fatalf("after refill: %q", l)
	} else {
		rel()
	}
	r2()
	a.sweep(now.Add(2 * time.Minute))
	if n := a.size(); n != 1 { // ip2 still holds a session
		t.Fatalf("sweep left %d entries, want 1", n)
	}
}

// IPv6 clients are counted per /64 (security review finding 10): one
// client picking fresh addresses in its /64 is one address to the limits;
// another /64, or an IPv4-mapped address, is not.
func TestAdmissionIPv6PerSlash64(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	a := newAdmission(2, -1, 0)
	addr := func(s string) net.Addr { return &net.UDPAddr{IP: net.ParseIP(s), Port: 4433} }
	for _, s := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"} {
		if _, l := a.admit(addr(s), now); l != "" {
			t.Fatalf("%s refused: %q", s, l)
		}
	}
	if _, l := a.admit(addr("2001:db8:1:2:dead:beef::7"), now); l != limitSessionsPerIP {
		t.Fatalf("third address of the same /64: %q, want %s", l, limitSessionsPerIP)
	}
	for _, s := range []string{"2001:db8:1:3::1", "::ffff:192.0.2.1", "192.0.2.2"} {
		if _, l := a.admit(addr(s), now); l != "" {
			t.Fatalf("%s refused: %q", s, l)
		}
	}
	if got := addrIP(addr("::ffff:192.0.2.1")); got != netip.MustParseAddr("192.0.2.1") {
		t.Fatalf("IPv4-mapped address counted as %v", got)
	}
	if got := addrIP(&net.UDPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}); got != netip.MustParseAddr("fe80::") {
		t.Fatalf("link-local address counted as %v", got)
	}
}

func TestAdmissionUnlimited(t *testing.T) {
	a := newAdmission(-1, -1, 0)
	addr := &net.TCPAddr{IP: net.ParseIP("10.0.0.1")}
	for i := 0; i < 1000; i++ {
		if _, l := a.admit(addr, time.Now()); l != "" {
			t.Fatalf("refused at %d: %s", i, l)
		}
	}
}

func TestSessionRates(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := newSessionRates(60, 1000, 500)
	for i := 0; i < 60; i++ {
		if l := r.allow(now, negotiate.KindData, 1); l != "" {
			t.Fatalf("message %d refused: %s", i, l)
		}
	}
	if l := r.allow(now, negotiate.KindData, 1); l != limitMessageRate {
		t.Fatalf("61st message in a burst: %q", l)
	}
	// Control messages keep the session alive over its rate, within
	// their own bound.
	for i := range 2 * controlPerSecond {
		if l := r.allow(now, negotiate.KindControl, 64); l != "" {
			t.Fatalf("control message %d over the message rate refused: %s", i, l)
		}
	}
	if l := r.allow(now, negotiate.KindControl, 64); l != limitControlRate {
		t.Fatalf("control message past its burst: %q", l)
	}
	later := now.Add(10 * time.Second) // 10 messages refilled
	if l := r.allow(later, negotiate.KindData, 2000); l != limitByteRate {
		t.Fatalf("2000 bytes against a 1000 B/s bucket: %q", l)
	}
	unlimited := newSessionRates(-1, -1, 1<<20)
	if l := unlimited.allow(now, negotiate.KindData, 1<<30); l != "" {
		t.Fatalf("unlimited refused: %s", l)
	}
	// A single maximal message always fits the byte burst.
	big := newSessionRates(-1, 1000, 1<<20)
	if l := big.allow(now, negotiate.KindData, 1<<20); l != "" {
		t.Fatalf("max-size message refused: %s", l)
	}
}

func TestLogOnce(t *testing.T) {
	l := newLogOnce(time.Minute)
	now := time.Now()
	if !l.allow("a", now) || l.allow("a", now.Add(time.Second)) || !l.allow("b", now) || !l.allow("a", now.Add(2*time.Minute)) {
		t.Fatal("logOnce does not log once per key and window")
	}
}

// TestAdmissionBurst: an address may open a burst of sessions at once (the
// default burst is MaxSessions), then perMinute a minute; it is forgotten
// only once the whole burst has refilled.
func TestAdmissionBurst(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	a := newAdmission(-1, 60, 1000)
	addr := &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}
	var rels []func()
	for i := 0; i < 1000; i++ {
		rel, l := a.admit(addr, now)
		if l != "" {
			t.Fatalf("open %d of the burst refused: %s", i, l)
		}
		rels = append(rels, rel)
	}
	if _, l := a.admit(addr, now); l != limitNewSessionsPerIP {
		t.Fatalf("open beyond the burst: %q", l)
	}
	if rel, l := a.admit(addr, now.Add(1100*time.Millisecond)); l != "" {
		t.Fatalf("one second later (60/min): %q", l)
	} else {
		rel()
	}
	for _, r := range rels {
		r()
	}
	a.sweep(now.Add(2 * time.Minute))
	if a.size() != 1 {
		t.Fatal("forgotten before its burst refilled (1000 at 60/min: 16.7 min)")
	}
	a.sweep(now.Add(18 * time.Minute))
	if a.size() != 0 {
		t.Fatal("not forgotten after its burst refilled")
	}
}
