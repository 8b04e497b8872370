package daemon

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/internal/buildinfo"
	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/internal/tracectx"
	"github.com/m2md/m2md/negotiate"
)

// Traces (docs/protocol.md §4.8, docs/operations.md "Traces"): a request
// that arrives with a trace block gets a span on this node, a child of the
// block, from its arrival to its end (its final reply, its cancellation,
// an abort or its provider's loss: the router ends it, router.Span); the
// provider, or the provider's node, gets a block that names this span. A
// daemon without Config.TracerProvider makes no span and passes the block
// on as it came. An untraced request costs one length test.

// routeSpan is the span of one traced delivery.
type routeSpan struct {
	span trace.Span
	// queued is when the request entered its provider's send queue; set
	// before it is queued, read by the writer after.
	queued time.Time
}

// traced is a routed request's trace context: the block to send on with
// it and this node's span, both nil when it carries none (and the span
// nil when this daemon records none).
type traced struct {
	block []byte
	span  *routeSpan
}

// written notes that the writer handed the request to the provider's
// connection: m2md.queue_seconds is the time it waited in the send queue.
func (sp *routeSpan) written() {
	wait := time.Since(sp.queued)
	sp.span.SetAttributes(attribute.Float64("m2md.queue_seconds", wait.Seconds()))
	sp.span.AddEvent("written to the provider's connection")
}

// End ends the span with how its delivery ended (router.Span).
func (sp *routeSpan) End(how router.Outcome) {
	switch how {
	case router.OutcomeEnd:
		sp.span.SetAttributes(attribute.String("m2md.outcome", "end"))
	case router.OutcomeCancelled:
		sp.fail("cancelled", "cancelled by its requester")
	case router.OutcomeAborted:
		sp.fail("aborted", "ended by the daemon with an error reply")
	case router.OutcomeProviderGone:
		sp.fail("agent_gone", "provider lost before its final reply")
	}
	sp.span.End()
}

func (sp *routeSpan) fail(kind, description string) {
	sp.span.SetAttributes(attribute.String("m2md.outcome", kind), attribute.String("error.type", kind))
	sp.span.SetStatus(codes.Error, description)
}

// tracerOf is the daemon's tracer, nil when it records no spans.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer("github.com/m2md/m2md/daemon", trace.WithInstrumentationVersion(buildinfo.Get().Version))
}

// traceDelivery starts the span of delivery d of a request that carried
// the trace block parent (from requester, for model, received at start)
// and returns the block to send on with it: one naming the span, or
// parent itself when this daemon records no spans.
func (srv *Server) traceDelivery(d router.Delivery[peer], parent, model []byte, requester string, start time.Time) traced {
	if srv.tracer == nil {
		return traced{block: parent}
	}
	sc, err := tracectx.Parse(parent)
	if err != nil {
		return traced{} // ParseData checked it: unreachable
	}
	attrs := []attribute.KeyValue{
		attribute.String("m2md.requester", requester),
		attribute.String("m2md.provider", d.Provider.AgentID()),
		attribute.Int("m2md.provider.outstanding", d.Provider.Outstanding()),
		attribute.Float64("m2md.routing.wait_seconds", time.Since(start).Seconds()),
	}
	if len(model) > 0 {
		attrs = append(attrs, attribute.String("gen_ai.request.model", string(model)))
	}
	if srv.cluster != nil {
		attrs = append(attrs, attribute.String("m2md.node", srv.cluster.c.Node()))
	}
	if node := d.Provider.Value().homeNode(); node != "" {
		attrs = append(attrs, attribute.String("m2md.provider.node", node))
	}
	name := "route"
	if len(model) > 0 {
		name = "route " + string(model)
	}
	_, span := srv.tracer.Start(trace.ContextWithRemoteSpanContext(context.Background(), sc), name,
		trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	sp := &routeSpan{span: span}
	if !srv.router.Trace(d.Provider, d.ID, sp) {
		sp.End(router.OutcomeAborted) // ended before it could be traced
	}
	block, err := tracectx.Append(make([]byte, 0, negotiate.MaxTraceLen), span.SpanContext())
	if err != nil {
		return traced{block: parent}
	}
	if !span.IsRecording() {
		return traced{block: block} // nothing to note on it
	}
	return traced{block: block, span: sp}
}
