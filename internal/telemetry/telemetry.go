// Package telemetry sets up the OpenTelemetry SDK for m2md's commands from
// the standard OTEL_* environment variables, in one place: a command asks
// for Traces once at start and hands the TracerProvider to the packages
// that record spans (daemon, openai/ingress, openai/upstream). With none of
// the variables set there is no SDK, no exporter and no goroutine: Traces
// returns a nil provider, and those packages record nothing (they still
// pass a request's trace context on). Libraries never set the SDK up; the
// client package uses only the OpenTelemetry API.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/internal/buildinfo"
)

// ErrConfig is returned for OTEL_* settings this build cannot honour; the
// message names the variable.
var ErrConfig = errors.New("telemetry: configuration")

// Traces is a command's tracing.
type Traces struct {
	// Provider records and exports spans; nil when tracing is off.
	Provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider
}

// Shutdown exports the spans still buffered and stops the exporter; a
// no-op when tracing is off.
func (t *Traces) Shutdown(ctx context.Context) error {
	if t == nil || t.sdk == nil {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER=otlp, and
// neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// NewTraces sets tracing up from the process environment for the service
// named service (OTEL_SERVICE_NAME overrides it). When Enabled is false it
// returns Traces with a nil Provider and starts nothing. Otherwise spans
// are batched (OTEL_BSP_*) and exported over OTLP/HTTP with protobuf
// (OTEL_EXPORTER_OTLP_* and OTEL_EXPORTER_OTLP_TRACES_*: endpoint, headers,
// timeout, compression, certificates), sampled as OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG say (default parentbased_always_on), with the
// resource of OTEL_RESOURCE_ATTRIBUTES. Export errors are logged to log.
func NewTraces(ctx context.Context, service string, log zerolog.Logger) (*Traces, error) {
	if !Enabled(os.Getenv) {
		return &Traces{}, nil
	}
	if v := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); v != "" && v != "otlp" {
		return nil, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: this build exports traces with otlp only (or none)", ErrConfig, v)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := os.Getenv(name); v != "" {
			if v != "http/protobuf" {
				return nil, fmt.Errorf("%w: %s=%q: this build exports over http/protobuf only", ErrConfig, name, v)
			}
			break
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: OTEL_EXPORTER_OTLP_*: %w", ErrConfig, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", buildinfo.Get().Version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, fmt.Errorf("%w: OTEL_RESOURCE_ATTRIBUTES: %w", ErrConfig, err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn().Err(err).Str("component", "telemetry").Msg("trace export failed")
	}))
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Traces{Provider: sdk, sdk: sdk}, nil
}
