package cluster

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/m2md/m2md/negotiate"
)

// testTrace is a trace block (docs/protocol.md §4.8) with a tracestate.
func testTrace(t testing.TB) []byte {
	b, err := negotiate.AppendTrace(nil, &negotiate.Trace{TraceID: [16]byte{1, 15: 2}, SpanID: [8]byte{3, 7: 4}, Flags: 1, State: "k=v"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A traced request carries its trace block between target and frame,
// flagged in its algo byte; a malformed block is refused.
func TestWireTracedRequest(t *testing.T) {
	tr := testTrace(t)
	in := Request{Seq: 5, From: "node-a", W: 77, Requester: "req", Target: "prov", Algo: 1, Trace: tr, Frame: []byte("#M2M|1|frame")}
	b, err := appendRequest(nil, &in)
	if err != nil {
		t.Fatal(err)
	}
	if b[17] != 0x81 {
		t.Fatalf("algo byte %#02x, want 81", b[17])
	}
	var out Request
	if err := decodeRequest(b, &out); err != nil || !bytes.Equal(out.Trace, tr) || out.Algo != 1 || !bytes.Equal(out.Frame, in.Frame) {
		t.Fatalf("traced request: %+v, %v", out, err)
	}
	// Untraced: no bit, no block, and a decoded Request forgets an
	// earlier one's trace.
	in.Trace = nil
	if b, err = appendRequest(nil, &in); err != nil || b[17] != 1 {
		t.Fatalf("untraced algo byte %#02x, %v", b[17], err)
	}
	if err := decodeRequest(b, &out); err != nil || out.Trace != nil {
		t.Fatalf("untraced request: %+v, %v", out, err)
	}
	in.Trace = tr[:20]
	if _, err := appendRequest(nil, &in); err == nil {
		t.Fatal("a truncated trace block was encoded")
	}
	in.Trace = tr
	b, _ = appendRequest(nil, &in)
	bad := bytes.Clone(b)
	copy(bad[len(b)-len(in.Frame)-len(tr):], make([]byte, 16))
	if decodeRequest(bad, &out) == nil {
		t.Fatal("decoded a zero trace-id")
	}
	if decodeRequest(b[:len(b)-len(in.Frame)-10], &out) == nil {
		t.Fatal("decoded a truncated trace block")
	}
}

func TestWireRoundTrip(t *testing.T) {
	in := Request{Seq: 5, From: "node-a", W: 77, Org: "acme", Requester: "req", Target: "prov", Algo: 1, Frame: []byte("#M2M|1|frame")}
	b, err := appendRequest(nil, &in)
	if err != nil {
		t.Fatal(err)
	}
	var out Request
	if err := decodeRequest(b, &out); err != nil || out.Seq != 5 || out.From != in.From || out.W != in.W || out.Org != in.Org || out.Requester != in.Requester ||
		out.Target != in.Target || out.Algo != in.Algo || !bytes.Equal(out.Frame, in.Frame) {
		t.Fatalf("request: %+v, %v", out, err)
	}
	rin := Reply{Seq: 6, From: "node-b", W: 77, N: 3, End: true, Provider: "prov", Frame: []byte{1, 2, 3}}
	if b, err = appendReply(nil, &rin); err != nil {
		t.Fatal(err)
	}
	var rout Reply
	if err := decodeReply(b, &rout); err != nil || rout.Seq != 6 || rout.N != 3 || rout.From != rin.From || rout.W != 77 || !rout.End || rout.Provider != "prov" || !bytes.Equal(rout.Frame, rin.Frame) {
		t.Fatalf("reply: %+v, %v", rout, err)
	}
	for _, bad := range [][]byte{nil, {kindRequest}, b[:len(b)-3], append([]byte{kindReply}, make([]byte, 20)...)} {
		if decodeReply(bad, &rout) == nil || decodeRequest(bad, &out) == nil {
			t.Fatalf("decoded %x", bad)
		}
	}
	nin := Notice{Seq: 7, From: "node-b", W: 9, About: 4, Code: "queue_full", Message: "requester is not reading fast enough"}
	if b, err = appendNotice(nil, &nin); err != nil {
		t.Fatal(err)
	}
	var nout Notice
	if err := decodeNotice(b, &nout); err != nil || nout != nin {
		t.Fatalf("notice: %+v, %v", nout, err)
	}
	if decodeNotice(b[:28], &nout) == nil || decodeNotice(append([]byte{kindNotice}, make([]byte, 28)...), &nout) == nil {
		t.Fatal("truncated notice decoded")
	}
	for _, g := range []gapMsg{{Kind: kindLost, Seq: 8, First: 3, Last: 5, From: "node-a"}, {Kind: kindForgot, Seq: 9, First: 1, Last: 1, From: "node-b"},
		{Kind: kindVoid, Seq: 1, From: "node-c"}} {
		if b, err = appendGap(nil, &g); err != nil {
			t.Fatal(err)
		}
		var gout gapMsg
		if err := decodeGap(b, &gout); err != nil || gout != g {
			t.Fatalf("gap: %+v, %v", gout, err)
		}
		if decodeGap(b[:len(b)-1], &gout) == nil {
			t.Fatal("truncated gap decoded")
		}
	}
	if b, _ = appendGap(nil, &gapMsg{Kind: kindLost, Seq: 1, First: 5, Last: 4, From: "a"}); decodeGap(b, &gapMsg{}) == nil {
		t.Fatal("gap with last before first decoded")
	}
	if b, _ = appendGap(nil, &gapMsg{Kind: kindVoid, Seq: 1, First: 1, Last: 1, From: "a"}); decodeGap(b, &gapMsg{}) == nil {
		t.Fatal("void with a range decoded")
	}
	if _, err := appendRequest(nil, &Request{W: 1, From: "", Requester: "r", Target: "t"}); err == nil {
		t.Fatal("empty node id encoded")
	}
}

// TestDecodeRefusesZeroIDs: a data message must name its request (w) and
// carry its place in its sender's series (seq): neither is ever 0, and a
// message claiming 0 is refused as malformed rather than taken as request
// 0 or the start of a series.
func TestDecodeRefusesZeroIDs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		decode func() error
	}{
		{"cancel w 0", func() error { b, _ := appendCancel(nil, &Cancel{Seq: 1, From: "a"}); return decodeCancel(b, &Cancel{}) }},
		{"cancel seq 0", func() error { b, _ := appendCancel(nil, &Cancel{W: 1, From: "a"}); return decodeCancel(b, &Cancel{}) }},
		{"notice w 0", func() error {
			b, _ := appendNotice(nil, &Notice{Seq: 1, From: "a", Code: "c"})
			return decodeNotice(b, &Notice{})
		}},
		{"notice seq 0", func() error {
			b, _ := appendNotice(nil, &Notice{W: 1, From: "a", Code: "c"})
			return decodeNotice(b, &Notice{})
		}},
		{"request w 0", func() error {
			b, _ := appendRequest(nil, &Request{Seq: 1, From: "a", Requester: "r", Target: "t", Frame: []byte{1}})
			return decodeRequest(b, &Request{})
		}},
		{"reply seq 0", func() error {
			b, _ := appendReply(nil, &Reply{W: 1, From: "a", Provider: "p", Frame: []byte{1}})
			return decodeReply(b, &Reply{})
		}},
	} {
		if err := tc.decode(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", tc.name, err)
		}
	}
}

// FuzzDecode: no input makes a decoder panic, and what decodes re-encodes
// to the same bytes.
func FuzzDecode(f *testing.F) {
	req, _ := appendRequest(nil, &Request{Seq: 1, From: "a", W: 1, Requester: "r", Target: "p", Frame: []byte("#M2M")})
	rep, _ := appendReply(nil, &Reply{Seq: 2, From: "b", W: 2, End: true, Provider: "p", Frame: []byte{0}})
	f.Add(req)
	f.Add(rep)
	traced, _ := appendRequest(nil, &Request{Seq: 1, From: "a", W: 1, Requester: "r", Target: "p", Trace: testTrace(f), Frame: []byte("#M2M")})
	f.Add(traced)
	cn, _ := appendCancel(nil, &Cancel{Seq: 3, From: "a", W: 9})
	f.Add(cn)
	nt, _ := appendNotice(nil, &Notice{Seq: 4, From: "b", W: 3, About: 2, Code: "queue_full", Message: "m"})
	f.Add(nt)
	for _, k := range []byte{kindLost, kindForgot} {
		g, _ := appendGap(nil, &gapMsg{Kind: k, Seq: 5, First: 1, Last: 3, From: "a"})
		f.Add(g)
	}
	vd, _ := appendGap(nil, &gapMsg{Kind: kindVoid, Seq: 1, From: "a"})
	f.Add(vd)
	auth := func(m ctlMsg) []byte {
		m.Inc, m.Ctr, m.TS, m.Born, m.KX, m.Cert = "0123456789abcdef", 3, 1700000000000, 1700000000000000000, make([]byte, 32), [][]byte{[]byte("not a certificate")}
		return appendControl(nil, marshalControl(&m), []byte("signature"))
	}
	f.Add(auth(ctlMsg{T: "up", Node: "a", Seq: 3, Agent: &Agent{Org: "acme", ID: "x", Session: "s", Models: []string{"m"}, Proof: make([]byte, 32)}}))
	f.Add(auth(ctlMsg{T: "snap", Node: "a", To: "b", Agents: []Agent{{ID: "x", Session: "s"}}, Sent: map[string]uint64{"b": 7}}))
	f.Add(auth(ctlMsg{T: "hb", Node: "a", Seq: 2, Sent: map[string]uint64{"b": 7, "c": 1}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var q Request
		if decodeRequest(b, &q) == nil {
			again, err := appendRequest(nil, &q)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("request re-encodes to %x (%v), from %x", again, err, b)
			}
		}
		var p Reply
		if decodeReply(b, &p) == nil {
			again, err := appendReply(nil, &p)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("reply re-encodes to %x (%v), from %x", again, err, b)
			}
		}
		var cn Cancel
		if decodeCancel(b, &cn) == nil {
			again, err := appendCancel(nil, &cn)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("cancel re-encodes to %x (%v), from %x", again, err, b)
			}
		}
		var nt Notice
		if decodeNotice(b, &nt) == nil {
			again, err := appendNotice(nil, &nt)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("notice re-encodes to %x (%v), from %x", again, err, b)
			}
		}
		var g gapMsg
		if decodeGap(b, &g) == nil {
			again, err := appendGap(nil, &g)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("gap re-encodes to %x (%v), from %x", again, err, b)
			}
		}
		var m ctlMsg
		if body, sig, err := decodeControl(b, &m); err == nil {
			// The signature covers the JSON as sent: what decodes is
			// those bytes, and they re-encode to b.
			if again := appendControl(nil, body, sig); !bytes.Equal(again, b) {
				t.Fatalf("control %q re-encodes to %q", b, again)
			}
			var m2 ctlMsg
			if _, _, err := decodeControl(appendControl(nil, marshalControl(&m), sig), &m2); err != nil {
				t.Fatalf("control %q does not decode once re-marshalled: %v", b, err)
			}
		}
	})
}

// BenchmarkDecode is the per-message decoding on the receiving node.
func BenchmarkDecode(b *testing.B) {
	fr := make([]byte, 671)
	req, _ := appendRequest(nil, &Request{Seq: 1, From: "0123456789abcdef", W: 1, Org: "acme", Requester: "requester-1", Target: "provider-1", Frame: fr})
	rep, _ := appendReply(nil, &Reply{Seq: 1, From: "fedcba9876543210", W: 1, End: true, Provider: "provider-1", Frame: fr})
	b.ReportAllocs()
	var q Request
	var p Reply
	for b.Loop() {
		if decodeRequest(req, &q) != nil || decodeReply(rep, &p) != nil {
			b.Fatal("decode")
		}
	}
}

// Every bound of the wire format is inclusive: strings of 255 bytes, a
// reply's algo 1, an incarnation of 64, a chain of maxChain certificates;
// one more is refused (at encoding for a string, at decoding otherwise).
func TestWireBounds(t *testing.T) {
	long := strings.Repeat("r", 255)
	in := Request{Seq: 1, From: "a", W: 1, Requester: long, Target: long, Frame: []byte{1}}
	b, err := appendRequest(nil, &in)
	if err != nil {
		t.Fatal(err)
	}
	var out Request
	if err := decodeRequest(b, &out); err != nil || out.Requester != long || out.Target != long {
		t.Fatalf("255-byte ids: %v", err)
	}
	in.Target += "x"
	if _, err := appendRequest(nil, &in); err == nil {
		t.Fatal("a 256-byte id encoded")
	}
	// Algo is 0 or 1 (M2M or TokenNative) in a reply as in a request.
	for algo, ok := range []bool{true, true, false} {
		b, err := appendReply(nil, &Reply{Seq: 1, From: "b", W: 1, Provider: "p", Algo: int8(algo), Frame: []byte{1}})
		if err != nil {
			t.Fatal(err)
		}
		var rep Reply
		if err := decodeReply(b, &rep); (err == nil) != ok || (ok && rep.Algo != int8(algo)) {
			t.Errorf("reply of algo %d: %+v, %v", algo, rep, err)
		}
	}
	ctl := func(inc string, certs int) []byte {
		m := ctlMsg{T: "hb", Node: "a", Inc: inc, Ctr: 1, TS: 1700000000000, Born: 1, KX: make([]byte, 32)}
		for range certs {
			m.Cert = append(m.Cert, []byte("der"))
		}
		return appendControl(nil, marshalControl(&m), []byte("sig"))
	}
	// A signature length past the message's end, or reaching it exactly
	// (no body), is malformed, not a slice out of range.
	good := ctl("i", 1)
	for _, cut := range []int{len(good) - 3, len(good) - 3 + 1} {
		b := bytes.Clone(good)
		b[1], b[2] = byte(cut>>8), byte(cut)
		if _, _, err := decodeControl(b, &ctlMsg{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("signature length %d of %d bytes after it: %v", cut, len(good)-3, err)
		}
	}
	for _, tc := range []struct {
		inc   string
		certs int
		ok    bool
	}{
		{strings.Repeat("i", 64), maxChain, true},
		{strings.Repeat("i", 65), 1, false},
		{"i", maxChain + 1, false},
	} {
		var m ctlMsg
		if _, _, err := decodeControl(ctl(tc.inc, tc.certs), &m); (err == nil) != tc.ok {
			t.Errorf("incarnation of %d bytes, %d certificates: %v", len(tc.inc), tc.certs, err)
		}
	}
}
