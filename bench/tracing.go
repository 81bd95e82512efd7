package main

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// benchTracing returns the engine's TracerProvider for --tracing: nil for
// off; for drop an SDK provider sampling every span, with the batch span
// processor a server uses, exporting to dropExporter (the cost measured
// is synclane's spans and the SDK's, not an exporter's network).
func benchTracing(mode string) (*sdktrace.TracerProvider, error) {
	switch mode {
	case "", "off":
		return nil, nil
	case "drop":
		return sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropExporter{}), sdktrace.WithSampler(sdktrace.AlwaysSample())), nil
	}
	return nil, fmt.Errorf("--tracing %q: want off or drop", mode)
}

// dropExporter is a span exporter that drops every span.
type dropExporter struct{}

func (dropExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropExporter) Shutdown(context.Context) error                             { return nil }
