package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/daemontest"
	"github.com/m2md/m2md/negotiate"
)

// tracedProvider records the span context each request's handler got.
type tracedProvider struct {
	mu      sync.Mutex
	seen    []trace.SpanContext
	held    chan struct{} // closed when a held request's context ended
	holdAll bool          // hold every request, not only model "hold"'s
}

func (p *tracedProvider) ServeM2M(ctx context.Context, req *Request, w ResponseWriter) {
	p.mu.Lock()
	p.seen = append(p.seen, trace.SpanContextFromContext(ctx))
	p.mu.Unlock()
	if req.Model == "hold" || p.holdAll {
		<-ctx.Done()
		close(p.held)
		w.Error("cancelled", "cancelled")
		return
	}
	w.Respond(req.Body)
}

func (p *tracedProvider) last(t *testing.T) trace.SpanContext {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) == 0 {
		t.Fatal("the provider's handler never ran")
	}
	return p.seen[len(p.seen)-1]
}

// callerSpan is a sampled span context with a tracestate, as an
// instrumented caller's context holds it.
func callerSpan(t *testing.T) trace.SpanContext {
	ts, err := trace.ParseTraceState("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 15: 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 7: 0xb7},
		TraceFlags: trace.FlagsSampled,
		TraceState: ts,
	})
}

// tracePair starts a daemon (recording its spans in rec, if not nil) with
// a provider of models "echo" and "hold", and returns a requester.
func tracePair(t *testing.T, tr string, rec *tracetest.SpanRecorder) (*Client, *tracedProvider) {
	d := daemontest.Start(t, func(c *daemon.Config) {
		if rec != nil {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { tp.Shutdown(context.Background()) })
			c.TracerProvider = tp
		}
	})
	p := &tracedProvider{held: make(chan struct{})}
	tn := []negotiate.Algorithm{negotiate.AlgorithmM2M, negotiate.AlgorithmTokenNative}
	dial(t, realDaemon{Daemon: d}, tr, Options{AgentID: "prov", Models: []string{"echo", "hold"}, Security: frame.SecurityAEAD, Handler: p, Algorithms: tn})
	return dial(t, realDaemon{Daemon: d}, tr, Options{AgentID: "req", Security: frame.SecurityAEAD, Algorithms: tn}), p
}

// A traced request's provider continues the caller's trace as the child of
// the daemon's span, which is the child of the caller's; the daemon's span
// ends with the request. Over both transports, for an M2M v1 frame and a
// sealed TokenNative one (whose envelope authenticates the trace block).
func TestTraceThroughDaemon(t *testing.T) {
	leakCheck(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			req, p := tracePair(t, tr, rec)
			caller := callerSpan(t)
			ctx := trace.ContextWithSpanContext(testCtx(t), caller)
			for i, opts := range [][]CallOption{nil, {To("prov"), TokenNative()}} {
				if _, err := req.Do(ctx, chatRequest("echo", "hi"), opts...); err != nil {
					t.Fatal(err)
				}
				got := p.last(t)
				spans := waitSpans(t, rec, i+1)
				route := spans[i]
				if !got.IsRemote() || got.TraceID() != caller.TraceID() || got.SpanID() != route.SpanContext().SpanID() {
					t.Fatalf("provider's parent %v, want the daemon's span %v", got, route.SpanContext())
				}
				if route.Parent().SpanID() != caller.SpanID() || route.Parent().TraceID() != caller.TraceID() {
					t.Fatalf("daemon span's parent %v, want the caller's %v", route.Parent(), caller)
				}
				if got.TraceState().String() != caller.TraceState().String() || !got.IsSampled() {
					t.Fatalf("tracestate %q sampled %v, want %q sampled", got.TraceState(), got.IsSampled(), caller.TraceState())
				}
				if route.Status().Code == codes.Error || !hasAttr(route, "m2md.provider", "prov") || !hasAttr(route, "m2md.requester", "req") || !hasAttr(route, "m2md.outcome", "end") || !hasAttr(route, "m2md.queue_seconds", "") {
					t.Fatalf("daemon span %q: status %v, attributes %v", route.Name(), route.Status(), route.Attributes())
				}
			}
			if spans := rec.Ended(); spans[0].Name() != "route echo" {
				t.Fatalf("span name %q, want %q", spans[0].Name(), "route echo")
			}
			// Untraced: nothing reaches the provider, and no span.
			if _, err := req.Do(testCtx(t), chatRequest("echo", "hi")); err != nil {
				t.Fatal(err)
			}
			if got := p.last(t); got.IsValid() {
				t.Fatalf("untraced request reached the provider with %v", got)
			}
			if n := len(rec.Ended()); n != 2 {
				t.Fatalf("%d spans, want 2", n)
			}
		})
	}
}

// A daemon that records no spans passes the caller's context on as it
// came.
func TestTracePassesThroughUntracingDaemon(t *testing.T) {
	leakCheck(t)
	req, p := tracePair(t, "ws", nil)
	caller := callerSpan(t)
	if _, err := req.Do(trace.ContextWithSpanContext(testCtx(t), caller), chatRequest("echo", "hi")); err != nil {
		t.Fatal(err)
	}
	if got := p.last(t); got.TraceID() != caller.TraceID() || got.SpanID() != caller.SpanID() || !got.IsRemote() {
		t.Fatalf("provider's parent %v, want the caller's %v", got, caller)
	}
}

// A cancelled request's daemon span ends at once, with the reason.
func TestTraceCancelled(t *testing.T) {
	leakCheck(t)
	rec := tracetest.NewSpanRecorder()
	req, p := tracePair(t, "quic", rec)
	ctx, cancel := context.WithCancel(trace.ContextWithSpanContext(testCtx(t), callerSpan(t)))
	done := make(chan error, 1)
	go func() {
		_, err := req.Do(ctx, chatRequest("hold", "hi"))
		done <- err
	}()
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		n := len(p.seen)
		p.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("request never reached the provider")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v, want context.Canceled", err)
	}
	<-p.held
	route := waitSpans(t, rec, 1)[0]
	if route.Status().Code != codes.Error || !hasAttr(route, "error.type", "cancelled") {
		t.Fatalf("cancelled request's span: status %v, attributes %v", route.Status(), route.Attributes())
	}
}

// A request delivered again to another provider (failover) is traced
// again: the second provider's parent is a second daemon span in the
// caller's trace, and the first span ended with agent_gone.
func TestTraceFailover(t *testing.T) {
	leakCheck(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	d := realDaemon{Daemon: daemontest.Start(t, func(c *daemon.Config) { c.TracerProvider = tp })}
	first := &tracedProvider{held: make(chan struct{}), holdAll: true}
	firstC := dial(t, d, "ws", Options{AgentID: "first", Models: []string{"echo"}, Handler: first})
	req := dial(t, d, "ws", Options{AgentID: "req"})
	caller := callerSpan(t)
	done := make(chan error, 1)
	go func() {
		_, err := req.Do(trace.ContextWithSpanContext(testCtx(t), caller), chatRequest("echo", "hi"))
		done <- err
	}()
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(5 * time.Millisecond) {
		first.mu.Lock()
		n := len(first.seen)
		first.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("request never reached the first provider")
		}
	}
	second := &tracedProvider{held: make(chan struct{})}
	dial(t, d, "ws", Options{AgentID: "second", Models: []string{"echo"}, Handler: second})
	firstC.Close()
	if err := <-done; err != nil {
		t.Fatalf("request after failover: %v", err)
	}
	spans := waitSpans(t, rec, 2)
	lost, routed := spans[0], spans[1]
	if !hasAttr(lost, "error.type", "agent_gone") || !hasAttr(lost, "m2md.provider", "first") || !hasAttr(routed, "m2md.provider", "second") || !hasAttr(routed, "m2md.outcome", "end") {
		t.Fatalf("spans: %v, then %v", lost.Attributes(), routed.Attributes())
	}
	got := second.last(t)
	if got.TraceID() != caller.TraceID() || got.SpanID() != routed.SpanContext().SpanID() || routed.Parent().SpanID() != caller.SpanID() {
		t.Fatalf("second provider's parent %v, want the second daemon span %v, child of the caller's", got, routed.SpanContext())
	}
}

func waitSpans(t *testing.T, rec *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(2 * time.Millisecond) {
		if spans := rec.Ended(); len(spans) >= n {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans ended, want %d", len(rec.Ended()), n)
		}
	}
}

// hasAttr reports whether s has attribute key with value ("": any value).
func hasAttr(s sdktrace.ReadOnlySpan, key, value string) bool {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key && (value == "" || kv.Value.Emit() == value) {
			return true
		}
	}
	return false
}
