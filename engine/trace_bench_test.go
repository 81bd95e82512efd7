package engine_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/engine"
)

// dropExporter drops every span.
type dropExporter struct{}

func (dropExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropExporter) Shutdown(context.Context) error                             { return nil }

func init() {
	// "drop": a real SDK provider, every round sampled, its spans batched
	// to an exporter that drops them; each round runs under a server span
	// as the HTTP handler starts one.
	pushPullModes = append(pushPullModes, pushPullMode{name: "drop",
		configure: func(b *testing.B, cfg *engine.Config) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropExporter{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			cfg.Tracing = tp
		},
		around: func(ctx context.Context, eng *engine.Engine) (context.Context, func()) {
			ctx, span := eng.Tracer().Start(ctx, "synclane.sync", trace.WithSpanKind(trace.SpanKindServer))
			return ctx, func() { span.End() }
		}})
}
