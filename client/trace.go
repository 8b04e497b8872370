package client

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/internal/tracectx"
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
	out, err := tracectx.Append(dst, sc)
	if err != nil {
		return dst
	}
	return out
}

// withRemoteTrace returns ctx with the trace block b as its remote parent
// span; ctx itself when b is empty.
func withRemoteTrace(ctx context.Context, b []byte) context.Context {
	if len(b) == 0 {
		return ctx
	}
	sc, err := tracectx.Parse(b)
	if err != nil {
		return ctx // ParseData checked it: unreachable
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
