// Package tracectx converts between OpenTelemetry span contexts and the
// trace block a traced request carries on the wire (negotiate.Trace,
// docs/protocol.md §4.8), for the daemon and the client alike.
package tracectx

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/negotiate"
)

// Append appends the trace block naming sc to dst. A tracestate longer than
// a block holds loses list members from its end, as W3C lets a hop do.
func Append(dst []byte, sc trace.SpanContext) ([]byte, error) {
	return negotiate.AppendTrace(dst, &negotiate.Trace{
		TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags()), State: bounded(sc.TraceState()),
	})
}

// Parse returns the remote span context the trace block b names. A
// tracestate W3C's grammar refuses is dropped.
func Parse(b []byte) (trace.SpanContext, error) {
	t, err := negotiate.ParseTrace(b)
	if err != nil {
		return trace.SpanContext{}, err
	}
	state, _ := trace.ParseTraceState(t.State)
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: t.TraceID, SpanID: t.SpanID, TraceFlags: trace.TraceFlags(t.Flags), TraceState: state, Remote: true,
	}), nil
}

func bounded(ts trace.TraceState) string {
	for ts.Len() > 0 {
		if s := ts.String(); len(s) <= negotiate.MaxTraceStateLen {
			return s
		}
		var last string
		ts.Walk(func(k, _ string) bool { last = k; return true })
		ts = ts.Delete(last)
	}
	return ""
}
