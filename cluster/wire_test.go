package cluster

import (
	"bytes"
	"testing"
)

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

// FuzzDecode: no input makes a decoder panic, and what decodes re-encodes
// to the same bytes.
func FuzzDecode(f *testing.F) {
	req, _ := appendRequest(nil, &Request{Seq: 1, From: "a", W: 1, Requester: "r", Target: "p", Frame: []byte("#M2M")})
	rep, _ := appendReply(nil, &Reply{Seq: 2, From: "b", W: 2, End: true, Provider: "p", Frame: []byte{0}})
	f.Add(req)
	f.Add(rep)
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
	f.Add(appendControl(nil, &ctlMsg{T: "up", Node: "a", Seq: 3, Agent: &Agent{ID: "x", Session: "s", Models: []string{"m"}}}))
	f.Add(appendControl(nil, &ctlMsg{T: "snap", Node: "a", Agents: []Agent{{ID: "x", Session: "s"}}, Sent: map[string]uint64{"b": 7}}))
	f.Add(appendControl(nil, &ctlMsg{T: "hb", Node: "a", Seq: 2, Sent: map[string]uint64{"b": 7, "c": 1}}))
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
		if decodeControl(b, &m) == nil {
			// What decodes re-encodes to a message that decodes and
			// re-encodes the same (JSON's bytes need not be b's).
			enc := appendControl(nil, &m)
			var again ctlMsg
			if err := decodeControl(enc, &again); err != nil || !bytes.Equal(appendControl(nil, &again), enc) {
				t.Fatalf("control %q re-encodes to %q, which does not decode to itself (%v)", b, enc, err)
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
