// Package otlptest is a real OTLP/HTTP trace receiver for tests: an HTTP
// server on loopback that decodes each POST /v1/traces with the official
// OTLP protobuf types (go.opentelemetry.io/proto/otlp) and keeps the spans,
// so that a test checks what an exporter really sent over the wire.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span with the service that sent it.
type Span struct {
	Service string
	*tracepb.Span
}

// TraceID, SpanID and ParentID are the span's ids in lower-case hex, as
// traceparent writes them ("" for no parent).
func (s Span) TraceID() string  { return hex.EncodeToString(s.Span.TraceId) }
func (s Span) SpanID() string   { return hex.EncodeToString(s.Span.SpanId) }
func (s Span) ParentID() string { return hex.EncodeToString(s.Span.ParentSpanId) }

// Attr returns the string form of attribute key, "" if absent.
func (s Span) Attr(key string) string {
	for _, kv := range s.Attributes {
		if kv.Key != key {
			continue
		}
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_DoubleValue:
			return strconv.FormatFloat(v.DoubleValue, 'g', -1, 64)
		case *commonpb.AnyValue_BoolValue:
			return strconv.FormatBool(v.BoolValue)
		}
		return kv.Value.String()
	}
	return ""
}

// Receiver is a running OTLP/HTTP receiver.
type Receiver struct {
	// URL is the endpoint to give an exporter
	// (OTEL_EXPORTER_OTLP_ENDPOINT).
	URL string

	mu    sync.Mutex
	spans []Span
	bad   []string
}

// Start runs a receiver until the test ends.
func Start(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	fail := func(code int, why string) {
		r.mu.Lock()
		r.bad = append(r.bad, why)
		r.mu.Unlock()
		http.Error(w, why, code)
	}
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		fail(http.StatusNotFound, req.Method+" "+req.URL.Path)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		fail(http.StatusUnsupportedMediaType, "content type "+ct)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, 16<<20)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			fail(http.StatusBadRequest, err.Error())
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	var msg coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, Span{Service: service, Span: sp})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(bytes.Clone(out))
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Wait returns the spans once ok holds for them, failing the test after
// timeout or if the receiver refused a request.
func (r *Receiver) Wait(t testing.TB, timeout time.Duration, ok func([]Span) bool) []Span {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		bad := append([]string(nil), r.bad...)
		r.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("OTLP receiver refused requests: %q", bad)
		}
		spans := r.Spans()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			var list strings.Builder
			for _, s := range spans {
				fmt.Fprintf(&list, "\n  %s %q trace %s span %s parent %s", s.Service, s.Name, s.TraceID(), s.SpanID(), s.ParentID())
			}
			t.Fatalf("after %v the OTLP receiver has %d spans, not the ones awaited:%s", timeout, len(spans), list.String())
		}
	}
}
