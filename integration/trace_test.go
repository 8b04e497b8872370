package integration

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/otlptest"
	"github.com/m2md/m2md/openai/ingress"
	"github.com/m2md/m2md/openai/upstream"
)

// otlpProvider exports the spans of service to the OTLP receiver rcv over
// OTLP/HTTP, as m2md's commands do from OTEL_EXPORTER_OTLP_ENDPOINT. It
// shuts down (exporting what is left) after everything started later.
func otlpProvider(t *testing.T, rcv *otlptest.Receiver, service string) *sdktrace.TracerProvider {
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(rcv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(20*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tp.Shutdown(ctx)
	})
	return tp
}

// traceMesh is one HTTP client's path through the mesh: the OpenAI
// endpoint beside node 1, node 1, node 2, and m2md upstream on node 2 in
// front of the test model server; each exports its spans as its own
// service to one OTLP receiver.
type traceMesh struct {
	rcv   *otlptest.Receiver
	nodes []*testDaemon
	model *testUpstream
	edge  *edges
}

func startTraceMesh(t *testing.T) *traceMesh {
	m := &traceMesh{rcv: otlptest.Start(t), model: newTestUpstream(t)}
	tps := []*sdktrace.TracerProvider{otlpProvider(t, m.rcv, "node-1"), otlpProvider(t, m.rcv, "node-2")}
	n := 0
	m.nodes = startCluster(t, 2, nil, func(c *daemon.Config) { c.TracerProvider = tps[n]; n++ })
	models := []string{"gpt-4o", "slow-stream"}
	up, err := upstream.New(upstream.Config{BaseURL: m.model.srv.URL + "/v1", Models: models, Logger: testLogger(t),
		TracerProvider: otlpProvider(t, m.rcv, "upstream")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	dialClient(t, m.nodes[1].url("quic"), client.Options{AgentID: "upstream", Models: models, Handler: up,
		Security: frame.SecurityAEAD, TLSConfig: m.nodes[1].clientTLS(t)})
	waitAgentAt(t, m.nodes[0], "", "upstream", m.nodes[1])
	edgeTP := otlpProvider(t, m.rcv, "openai-edge")
	in, base := serveIngressWith(t, m.nodes[0], "quic", frame.SecurityAEAD, nil, nil, func(c *ingress.Config) { c.TracerProvider = edgeTP })
	m.edge = &edges{d: m.nodes[0], in: in, base: base, upstream: m.model}
	return m
}

// callerParent is the traceparent of the HTTP client's own span.
const (
	callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan   = "00f067aa0ba902b7"
	callerParent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// hops returns the spans of one request in hop order (endpoint, node 1,
// node 2, upstream) once all four have arrived, checking that each is the
// child of the one before and the first the child of the caller's span.
func (m *traceMesh) hops(t *testing.T, trace, parent string) [4]otlptest.Span {
	t.Helper()
	services := [4]string{"openai-edge", "node-1", "node-2", "upstream"}
	var chain [4]otlptest.Span
	m.rcv.Wait(t, 10*time.Second, func(spans []otlptest.Span) bool {
		want := parent
		for i, svc := range services {
			found := false
			for _, s := range spans {
				if s.Service == svc && s.TraceID() == trace && s.ParentID() == want {
					chain[i], want, found = s, s.SpanID(), true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	})
	if chain[0].Kind != tracepb.Span_SPAN_KIND_SERVER || chain[3].Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Fatalf("span kinds: endpoint %v, upstream %v", chain[0].Kind, chain[3].Kind)
	}
	if chain[1].Attr("m2md.provider") != "upstream" || chain[1].Attr("m2md.provider.node") != m.nodes[1].Cluster().Node ||
		chain[2].Attr("m2md.node") != m.nodes[1].Cluster().Node || chain[2].Attr("m2md.provider") != "upstream" || chain[2].Attr("m2md.queue_seconds") == "" {
		t.Fatalf("route spans: node 1 %v, node 2 %v", chain[1].Attributes, chain[2].Attributes)
	}
	return chain
}

// One HTTP request with a traceparent, answered, streamed and cancelled:
// every hop's span reaches the OTLP receiver in the caller's trace, each
// the child of the one before; the model server gets a traceparent whose
// parent is upstream's span, and the HTTP client the trace in
// traceresponse.
func TestTraceAcrossMesh(t *testing.T) {
	t.Parallel()
	m := startTraceMesh(t)
	c := m.edge.sdk("unused", option.WithHeader("traceparent", callerParent), option.WithHeader("tracestate", "congo=t61rcWkgMzE"))

	t.Run("answer", func(t *testing.T) {
		var resp *http.Response
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Chat.Completions.New(ctx, chatParams("gpt-4o"), option.WithResponseInto(&resp)); err != nil {
			t.Fatal(err)
		}
		chain := m.hops(t, callerTrace, callerSpan)
		if got, want := resp.Header.Get(ingress.TraceResponseHeader), "00-"+callerTrace+"-"+chain[0].SpanID()+"-01"; got != want {
			t.Fatalf("traceresponse %q, want %q", got, want)
		}
		// The server's headers still cross a traced upstream (its headers
		// reply goes through the span's writer).
		if got := resp.Header.Get("x-request-id"); got != "req_/v1/chat/completions" {
			t.Fatalf("x-request-id %q through a traced upstream", got)
		}
		if got, want := m.model.lastParent(), "00-"+callerTrace+"-"+chain[3].SpanID()+"-01"; got != want {
			t.Fatalf("model server got traceparent %q, want %q (upstream's span)", got, want)
		}
		up := chain[3]
		if up.Name != "chat gpt-4o" || up.Attr("gen_ai.operation.name") != "chat" || up.Attr("gen_ai.request.model") != "gpt-4o" ||
			up.Attr("gen_ai.response.model") != "gpt-4o-mini-2024-07-18" || up.Attr("gen_ai.usage.input_tokens") != "187" ||
			up.Attr("gen_ai.usage.output_tokens") != "33" || up.Attr("error.type") != "" {
			t.Fatalf("upstream span %q: %v", up.Name, up.Attributes)
		}
		if chain[0].Attr("http.response.status_code") != "200" || chain[0].Attr("gen_ai.request.model") != "gpt-4o" {
			t.Fatalf("endpoint span: %v", chain[0].Attributes)
		}
	})

	t.Run("new trace", func(t *testing.T) {
		// No traceparent: the endpoint starts the trace and says which.
		var resp *http.Response
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		plain := m.edge.sdk("unused")
		if _, err := plain.Chat.Completions.New(ctx, chatParams("gpt-4o"), option.WithResponseInto(&resp)); err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(resp.Header.Get(ingress.TraceResponseHeader), "-")
		if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || parts[1] == callerTrace || len(parts[2]) != 16 {
			t.Fatalf("traceresponse %q", resp.Header.Get(ingress.TraceResponseHeader))
		}
		chain := m.hops(t, parts[1], "")
		if chain[0].SpanID() != parts[2] {
			t.Fatalf("traceresponse names span %s, the endpoint's is %s", parts[2], chain[0].SpanID())
		}
	})

	t.Run("stream", func(t *testing.T) {
		const trace, span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st := c.Chat.Completions.NewStreaming(ctx, chatParams("gpt-4o"), option.WithHeader("traceparent", "00-"+trace+"-"+span+"-01"))
		n := 0
		for st.Next() {
			n++
		}
		if err := st.Err(); err != nil || n != len(streamChunks) {
			t.Fatalf("%d chunks, %v", n, err)
		}
		chain := m.hops(t, trace, span)
		if chain[3].Attr("gen_ai.response.time_to_first_chunk") == "" || chain[3].Attr("error.type") != "" {
			t.Fatalf("streamed upstream span: %v", chain[3].Attributes)
		}
		if got, want := m.model.lastParent(), "00-"+trace+"-"+chain[3].SpanID()+"-01"; got != want {
			t.Fatalf("model server got traceparent %q, want %q", got, want)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		const trace, span = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st := c.Chat.Completions.NewStreaming(ctx, chatParams("slow-stream"), option.WithHeader("traceparent", "00-"+trace+"-"+span+"-01"))
		if !st.Next() {
			t.Fatalf("no first chunk: %v", st.Err())
		}
		cancel()
		for st.Next() {
		}
		if err := st.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("stream ended with %v, want context.Canceled", err)
		}
		chain := m.hops(t, trace, span)
		for i, s := range chain {
			if s.Attr("error.type") != "cancelled" || s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || s.Status.GetMessage() == "" {
				t.Fatalf("hop %d (%s) of a cancelled request: status %v, attributes %v", i, s.Service, s.Status, s.Attributes)
			}
		}
		if msg := chain[3].Status.GetMessage(); !strings.Contains(msg, "cancel") {
			t.Fatalf("upstream's span ends with %q, not the cancellation", msg)
		}
	})
}

// lastParent is the traceparent of the last request the model server got.
func (u *testUpstream) lastParent() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.parents) == 0 {
		return ""
	}
	return u.parents[len(u.parents)-1]
}

// Where nothing exports traces, the caller's traceparent still reaches the
// model server unchanged, through the endpoint, the daemon and upstream,
// and the endpoint sends no traceresponse.
func TestTracePassesThroughUntraced(t *testing.T) {
	t.Parallel()
	e := startEdges(t, "quic", frame.SecurityAEAD, nil, nil)
	var resp *http.Response
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := e.sdk("unused", option.WithHeader("traceparent", callerParent), option.WithHeader("tracestate", "congo=t61rcWkgMzE"))
	if _, err := c.Chat.Completions.New(ctx, chatParams("gpt-4o"), option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	if got := e.upstream.lastParent(); got != callerParent {
		t.Fatalf("model server got traceparent %q, want the caller's %q", got, callerParent)
	}
	if h := resp.Header.Get(ingress.TraceResponseHeader); h != "" {
		t.Fatalf("traceresponse %q from an endpoint that records no span", h)
	}
	// Untraced, nothing is sent.
	plain := e.sdk("unused")
	if _, err := plain.Chat.Completions.New(ctx, chatParams("gpt-4o")); err != nil {
		t.Fatal(err)
	}
	if got := e.upstream.lastParent(); got != "" {
		t.Fatalf("model server got traceparent %q for an untraced request", got)
	}
}
