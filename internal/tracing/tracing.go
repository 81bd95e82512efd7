// Package tracing holds the few helpers synclane's packages share to
// emit OpenTelemetry spans through the API only (go.opentelemetry.io/otel
// and its trace, attribute, codes and propagation packages): no SDK and no
// exporter is linked here; the embedder's TracerProvider supplies them.
//
// Tracing is off when the tracer is nil (engine.Config.Tracing unset):
// every helper then returns at once, allocates nothing and hands back a
// non-recording span, so call sites need no branches of their own beyond
// checking Span.IsRecording before they build attributes.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope name of every synclane span.
const Scope = "github.com/synclane/synclane"

// Tracer returns synclane's tracer of tp, nil when tp is nil or a no-op
// provider (tracing off: nothing is allocated per request).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return nil
	}
	return tp.Tracer(Scope)
}

// Propagator is the W3C Trace Context propagator (traceparent,
// tracestate) synclane reads from incoming requests and writes into
// member calls.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Off is the span helpers return when tracing is off or the parent is not
// recorded; it records nothing and costs nothing to end.
var Off trace.Span = noop.Span{}

// Child starts span name as a child of the span in parent, when t is set
// and that span is recording (a sampled request); otherwise it returns
// ctx and Off. The returned context is ctx (for its deadline and values)
// carrying the new span.
func Child(ctx, parent context.Context, t trace.Tracer, name string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, Off
	}
	ps := trace.SpanFromContext(parent)
	if !ps.IsRecording() {
		return ctx, Off
	}
	return t.Start(trace.ContextWithSpan(ctx, ps), name)
}

// Recording reports whether ctx carries a recording span (its request is
// traced and sampled).
func Recording(ctx context.Context) bool { return trace.SpanFromContext(ctx).IsRecording() }

// Fail marks span as failed with err's protocol code (code, "" when
// unknown) and message; a nil err or a non-recording span is left alone.
func Fail(span trace.Span, code string, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	if code != "" {
		span.SetAttributes(ErrorCode.String(code))
	}
	span.SetStatus(codes.Error, err.Error())
}
