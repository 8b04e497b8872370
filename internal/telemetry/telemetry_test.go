package telemetry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/internal/otlptest"
)

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		if got := Enabled(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("%v: Enabled %v, want %v", tc.env, got, tc.want)
		}
	}
}

// Off: no provider, nothing started.
func TestOffByDefault(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	tr, err := NewTraces(context.Background(), "m2md-test", zerolog.Nop())
	if err != nil || tr.Provider != nil {
		t.Fatalf("NewTraces = %+v, %v; want no provider", tr, err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestUnsupportedSettingsNamed(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if _, err := NewTraces(context.Background(), "m2md-test", zerolog.Nop()); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Fatalf("grpc: %v", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := NewTraces(context.Background(), "m2md-test", zerolog.Nop()); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Fatalf("zipkin: %v", err)
	}
}

// On: spans reach a real OTLP receiver, under the service name the
// environment gives, sampled as it says.
func TestExportsToOTLPEndpoint(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "edge-1")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	tr, err := NewTraces(context.Background(), "m2md-test", zerolog.Nop())
	if err != nil || tr.Provider == nil {
		t.Fatalf("NewTraces = %+v, %v", tr, err)
	}
	_, sp := tr.Provider.Tracer("test").Start(context.Background(), "hello")
	sp.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Wait(t, 10*time.Second, func(s []otlptest.Span) bool { return len(s) == 1 })
	if spans[0].Name != "hello" || spans[0].Service != "edge-1" {
		t.Fatalf("received %q from %q", spans[0].Name, spans[0].Service)
	}
}
