package main

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/internal/telemetry"
)

// commandTraces is a command's tracing, from the OTEL_* environment
// (docs/operations.md, "Traces").
type commandTraces struct {
	*telemetry.Traces
	log zerolog.Logger
}

// startTraces sets tracing up for the command that runs as service (the
// default service.name; OTEL_SERVICE_NAME overrides it).
func startTraces(service string, log zerolog.Logger) (*commandTraces, error) {
	t, err := telemetry.NewTraces(context.Background(), service, log)
	if errors.Is(err, telemetry.ErrConfig) {
		return nil, usagef("%v", err)
	}
	if err != nil {
		return nil, err
	}
	if t.Provider != nil {
		log.Info().Str("component", "telemetry").Msg("exporting traces over OTLP (OTEL_* environment)")
	}
	return &commandTraces{Traces: t, log: log}, nil
}

// stop exports the spans still buffered, waiting at most a few seconds for
// the collector.
func (t *commandTraces) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		t.log.Warn().Err(err).Str("component", "telemetry").Msg("last spans not exported")
	}
}
