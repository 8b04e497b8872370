package client

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/negotiate"
)

// Trace context (feature trace, docs/protocol.md §4.8). A request carries
// the span of its context (trace.SpanContextFromContext), so that the
// daemon's span, the provider's and the model server's join the caller's
// trace; a provider's handler gets the requester's as the remote parent of
// its context (trace.SpanContextFromContext there). The client records no
// span of its own and needs no OpenTelemetry SDK: the caller's spans come
// from whatever TracerProvider it set up. A context without a span sends
// no block: not one byte more on the wire.

// appendTrace appends the trace block of ctx's span to dst, or nothing when
// ctx carries no valid span or the session did not negotiate trace.
func (s *session) appendTrace(dst []byte, ctx context.Context) []byte {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !s.info.Params.Has(negotiate.FeatureTrace) {
		return dst
	}
	t := negotiate.Trace{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
	if ts := sc.TraceState(); ts.Len() > 0 {
		t.State = boundedState(ts)
	}
	out, err := negotiate.AppendTrace(dst, &t)
	if err != nil {
		return dst
	}
	return out
}

// boundedState is ts as a trace block carries it: W3C lets a hop drop
// list members from the end until it fits.
func boundedState(ts trace.TraceState) string {
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

// withRemoteTrace returns ctx with the trace block b as its remote parent
// span; ctx itself when b is empty or unreadable.
func withRemoteTrace(ctx context.Context, b []byte) context.Context {
	if len(b) == 0 {
		return ctx
	}
	t, err := negotiate.ParseTrace(b)
	if err != nil {
		return ctx
	}
	state, _ := trace.ParseTraceState(t.State) // one W3C rejects is dropped
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: t.TraceID, SpanID: t.SpanID, TraceFlags: trace.TraceFlags(t.Flags), TraceState: state, Remote: true,
	}))
}
