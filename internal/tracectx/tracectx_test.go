package tracectx

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/negotiate"
)

// A span context survives the trace block; a tracestate too long for one
// loses members from its end, never from its start.
func TestRoundTrip(t *testing.T) {
	long := "a=" + strings.Repeat("1", 100) + ",b=" + strings.Repeat("2", 100) + ",c=" + strings.Repeat("3", 100)
	for _, tc := range []struct{ state, want string }{
		{"", ""},
		{"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
		{long, long[:len(long)-103]},
	} {
		ts, err := trace.ParseTraceState(tc.state)
		if err != nil {
			t.Fatal(err)
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 15: 2}, SpanID: trace.SpanID{3, 7: 4}, TraceFlags: trace.FlagsSampled, TraceState: ts})
		b, err := Append(nil, sc)
		if err != nil || len(b) > negotiate.MaxTraceLen {
			t.Fatalf("Append: %d bytes, %v", len(b), err)
		}
		got, err := Parse(b)
		if err != nil || !got.IsRemote() || got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() || got.TraceState().String() != tc.want {
			t.Fatalf("state %q: got %v (%q), %v", tc.state, got, got.TraceState().String(), err)
		}
	}
	if _, err := Parse(make([]byte, 26)); err == nil {
		t.Fatal("a zero trace-id parsed")
	}
}
