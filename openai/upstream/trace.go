package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/buildinfo"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/openai"
)

// Traces (docs/operations.md, "Traces"). With Config.TracerProvider, each
// request to the model server gets a client span after the OpenTelemetry
// GenAI conventions: "chat {model}" ("embeddings {model}",
// "text_completion {model}"), the child
// of the span the delivery carried (the daemon's), with the request's and
// the response's model, the tokens of the answer's usage, the time to the
// first stream chunk and, when it fails, error.type. The server gets a
// traceparent naming that span, so that its own trace (vLLM's, Ollama's)
// joins. Without a provider the delivery's trace context still goes to the
// server as its traceparent.

var w3c = propagation.TraceContext{}

func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer("github.com/m2md/m2md/openai/upstream", trace.WithInstrumentationVersion(buildinfo.Get().Version))
}

// trace starts the span of delivery req and returns its context, the writer
// that notes what the answer says, and the function that ends the span.
// Untraced, it returns ctx and w as they are.
func (u *Upstream) trace(ctx context.Context, req *client.Request, w client.ResponseWriter) (context.Context, client.ResponseWriter, func()) {
	if u.tracer == nil {
		return ctx, w, func() {}
	}
	op := semconv.GenAIOperationNameChat // chat completions and the Responses API
	switch {
	case req.Embeddings:
		op = semconv.GenAIOperationNameEmbeddings
	case req.API == frame.APICompletions:
		op = semconv.GenAIOperationNameTextCompletion
	}
	name := op.Value.AsString()
	attrs := []attribute.KeyValue{op, attribute.String("m2md.requester", req.From)}
	if req.Model != "" {
		name += " " + req.Model
		attrs = append(attrs, semconv.GenAIRequestModel(req.Model))
	}
	if host, port, err := net.SplitHostPort(u.hostPort); err == nil {
		attrs = append(attrs, semconv.ServerAddress(host))
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.ServerPort(p))
		}
	}
	start := time.Now()
	ctx, span := u.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	tw := &tracedWriter{ResponseWriter: w, span: span, start: start}
	return ctx, tw, func() { tw.end(ctx) }
}

// hostPortOf is the server's host:port, for server.address and
// server.port.
func hostPortOf(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// tracedWriter passes replies on and notes, for the span, when the first
// came and what the answer says of its model and usage.
type tracedWriter struct {
	client.ResponseWriter
	span  trace.Span
	start time.Time

	mu      sync.Mutex
	first   bool
	model   bool
	errCode negotiate.ErrorCode
}

func (tw *tracedWriter) Chunk(json []byte) error {
	tw.note(json, true)
	return tw.ResponseWriter.Chunk(json)
}

func (tw *tracedWriter) Chunks(jsons ...[]byte) error {
	for _, j := range jsons {
		tw.note(j, true)
	}
	return tw.ResponseWriter.Chunks(jsons...)
}

func (tw *tracedWriter) Respond(json []byte) error {
	if string(json) != openai.Done {
		tw.note(json, false)
	}
	return tw.ResponseWriter.Respond(json)
}

// Headers passes the headers reply on (client.HeaderWriter), when the
// writer it wraps sends them.
func (tw *tracedWriter) Headers(json []byte) error {
	if hw, ok := tw.ResponseWriter.(client.HeaderWriter); ok {
		return hw.Headers(json)
	}
	return errNoHeaders
}

func (tw *tracedWriter) Error(code negotiate.ErrorCode, message string) error {
	tw.mu.Lock()
	if tw.errCode == "" {
		tw.errCode = code
	}
	tw.mu.Unlock()
	return tw.ResponseWriter.Error(code, message)
}

// note reads a chunk's or an answer's model and usage.
func (tw *tracedWriter) note(b []byte, chunk bool) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if chunk && !tw.first {
		tw.first = true
		tw.span.SetAttributes(semconv.GenAIResponseTimeToFirstChunkKey.Float64(time.Since(tw.start).Seconds()))
		tw.span.AddEvent("first chunk")
	}
	hasUsage := bytes.Contains(b, []byte(`"usage"`))
	if tw.model && !hasUsage {
		return
	}
	var r struct {
		Model string `json:"model"`
		Usage *struct {
			PromptTokens     *int `json:"prompt_tokens"`
			CompletionTokens *int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(b, &r) != nil {
		return
	}
	if r.Model != "" && !tw.model {
		tw.model = true
		tw.span.SetAttributes(semconv.GenAIResponseModel(r.Model))
	}
	if r.Usage != nil {
		if r.Usage.PromptTokens != nil {
			tw.span.SetAttributes(semconv.GenAIUsageInputTokens(*r.Usage.PromptTokens))
		}
		if r.Usage.CompletionTokens != nil {
			tw.span.SetAttributes(semconv.GenAIUsageOutputTokens(*r.Usage.CompletionTokens))
		}
	}
}

// end ends the span: an error reply's code, or the delivery's cancellation
// and its cause, is its error.type.
func (tw *tracedWriter) end(ctx context.Context) {
	tw.mu.Lock()
	code := tw.errCode
	tw.mu.Unlock()
	switch {
	case ctx.Err() != nil:
		tw.span.SetAttributes(semconv.ErrorTypeKey.String("cancelled"))
		tw.span.SetStatus(codes.Error, context.Cause(ctx).Error())
	case code != "":
		tw.span.SetAttributes(semconv.ErrorTypeKey.String(string(code)))
		tw.span.SetStatus(codes.Error, "answered with error "+string(code))
	}
	tw.span.End()
}
