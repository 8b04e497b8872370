package negotiate

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// The example of docs/protocol.md §4.8, byte by byte: W3C's own
// traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 and
// tracestate congo=t61rcWkgMzE on request 7, routed by model.
const docTraceHeader = "02 20 07 00" +
	" 4b f9 2f 35 77 b3 4d a6 a3 ce 92 9d 0e 0e 47 36" +
	" 00 f0 67 aa 0b a9 02 b7" +
	" 01 11" +
	" 63 6f 6e 67 6f 3d 74 36 31 72 63 57 6b 67 4d 7a 45"

func docTrace() *Trace {
	return &Trace{
		TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		Flags:   1,
		State:   "congo=t61rcWkgMzE",
	}
}

func TestTraceDocExample(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	from, to := strings.Index(text, "### 4.8 "), strings.Index(text, "## 5. ")
	if from < 0 || to < from {
		t.Fatal("docs/protocol.md has no §4.8")
	}
	listing := "```\n02 20 07 00\n4b f9 2f 35 77 b3 4d a6 a3 ce 92 9d 0e 0e 47 36\n00 f0 67 aa 0b a9 02 b7\n01 11\n63 6f 6e 67 6f 3d 74 36 31 72 63 57 6b 67 4d 7a 45\n```"
	if !strings.Contains(text[from:to], listing) || strings.Join(strings.Fields(listing[3:len(listing)-3]), " ") != docTraceHeader {
		t.Fatal("docs/protocol.md §4.8 does not show the example header this test checks")
	}
	block, err := AppendTrace(nil, docTrace())
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := AppendTracedDataHeader(nil, 0, 7, "", block)
	if err != nil {
		t.Fatal(err)
	}
	want := unhex(t, strings.ReplaceAll(docTraceHeader, " ", ""))
	if !bytes.Equal(hdr, want) {
		t.Fatalf("header\n%x\nwant\n%x", hdr, want)
	}
	fr := frameA(t)
	h, got, err := ParseData(append(hdr, fr...))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, fr) || !bytes.Equal(h.Trace, block) || h.Flags != FlagTrace {
		t.Fatalf("parsed %+v", h)
	}
	tr, err := ParseTrace(h.Trace)
	if err != nil || tr != *docTrace() {
		t.Fatalf("ParseTrace: %+v %v", tr, err)
	}
	// Without tracestate: 26 bytes, length byte 00.
	noState := docTrace()
	noState.State = ""
	if block, _ := AppendTrace(nil, noState); len(block) != 26 || block[25] != 0 {
		t.Fatalf("block without tracestate: %x", block)
	}
}

func TestTraceRefused(t *testing.T) {
	fr := frameA(t)
	good, _ := AppendTrace(nil, docTrace())
	zeroTrace := bytes.Clone(good)
	clear(zeroTrace[:16])
	zeroSpan := bytes.Clone(good)
	clear(zeroSpan[16:24])
	badState := bytes.Clone(good)
	badState[30] = '\n'
	long := bytes.Clone(good)
	long[25] = 200 // more tracestate than the message holds
	for name, msg := range map[string][]byte{
		"zero trace-id":    append(unhex(t, "02200700"), append(zeroTrace, fr...)...),
		"zero parent-id":   append(unhex(t, "02200700"), append(zeroSpan, fr...)...),
		"tracestate byte":  append(unhex(t, "02200700"), append(badState, fr...)...),
		"tracestate long":  append(unhex(t, "02200700"), long...),
		"truncated":        append(unhex(t, "02200700"), good[:20]...),
		"no frame":         append(unhex(t, "02200700"), good...),
		"on a reply":       append(unhex(t, "02230700"), append(good, fr...)...),
		"on a stream part": append(unhex(t, "02210700"), append(good, fr...)...),
	} {
		if _, _, err := ParseData(msg); !errors.Is(err, ErrBadDataHeader) {
			t.Errorf("%s: %v, want ErrBadDataHeader", name, err)
		}
	}
	if _, err := AppendDataHeader(nil, FlagTrace, 1, ""); !errors.Is(err, ErrBadDataHeader) {
		t.Errorf("FlagTrace without a block: %v", err)
	}
	if _, err := AppendTracedDataHeader(nil, FlagReply, 1, "", good); !errors.Is(err, ErrBadDataHeader) {
		t.Errorf("traced reply: %v", err)
	}
	tr := docTrace()
	tr.State = strings.Repeat("a", MaxTraceStateLen+1)
	if _, err := AppendTrace(nil, tr); !errors.Is(err, ErrBadDataHeader) {
		t.Errorf("long tracestate: %v", err)
	}
	if _, err := AppendTrace(nil, &Trace{SpanID: [8]byte{1}}); !errors.Is(err, ErrBadDataHeader) {
		t.Errorf("zero trace-id: %v", err)
	}
}

func TestParseTracedDataDoesNotAllocate(t *testing.T) {
	block, _ := AppendTrace(nil, docTrace())
	msg, _ := AppendTracedDataHeader(nil, 0, 123456, "provider-7", block)
	msg = append(msg, frameA(t)...)
	if allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := ParseData(msg); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("%v allocations per ParseData", allocs)
	}
}
