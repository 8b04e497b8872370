package ingress

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/buildinfo"
	"github.com/m2md/m2md/internal/jsonscan"
)

// Traces (docs/openai.md, "Traces"). With Config.TracerProvider, each
// request to a model gets a server span: the child of the request's
// traceparent (and tracestate) when it has one, else the root of a new
// trace. Its context goes with the request onto the mesh (feature trace,
// docs/protocol.md §4.8), and the response's TraceResponseHeader names it,
// so that the HTTP client learns the trace id. Without a provider a
// request's traceparent still goes onto the mesh as it came, and nothing
// else is done.

// TraceResponseHeader is the response header naming the endpoint's span:
// W3C Trace Context Level 2's traceresponse, in traceparent's format
// 00-<trace-id>-<span-id>-<flags>.
const TraceResponseHeader = "traceresponse"

var w3c = propagation.TraceContext{}

// trace starts the span of request r (to endpoint ep), answered through
// w, and returns r with the span's context and the function that ends the
// span with the status w wrote.
func (in *Ingress) trace(w *deadlineWriter, r *http.Request, ep endpoint) (*http.Request, func()) {
	if in.tracer == nil {
		if r.Header.Get("traceparent") == "" {
			return r, func() {}
		}
		return r.WithContext(w3c.Extract(r.Context(), propagation.HeaderCarrier(r.Header))), func() {}
	}
	ctx := w3c.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	route := r.URL.Path // one of endpoints' paths, matched exactly
	op := "chat"        // chat completions and the Responses API
	switch {
	case ep.schema == frame.SchemaEmbeddingRequest:
		op = "embeddings"
	case ep.api == frame.APICompletions:
		op = "text_completion"
	}
	ctx, span := in.tracer.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", r.Method),
		attribute.String("http.route", route),
		attribute.String("url.path", r.URL.Path),
		attribute.String("gen_ai.operation.name", op),
	))
	sc := span.SpanContext()
	w.Header().Set(TraceResponseHeader, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-"+sc.TraceFlags().String())
	return r.WithContext(ctx), func() {
		status := w.status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		switch {
		case r.Context().Err() != nil:
			// The client left before the answer ended: the request was
			// cancelled on the mesh.
			span.SetAttributes(attribute.String("error.type", "cancelled"))
			span.SetStatus(codes.Error, "the HTTP client disconnected: "+context.Cause(r.Context()).Error())
		case status >= 500:
			span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)))
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		span.End()
	}
}

// traceModel names the requested model on the request's span, if any.
func traceModel(ctx context.Context, sum *jsonscan.Summary) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("gen_ai.request.model", string(sum.Model.AppendDecoded(nil))))
	}
}

func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer("github.com/m2md/m2md/openai/ingress", trace.WithInstrumentationVersion(buildinfo.Get().Version))
}
