package engine

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/internal/tracing"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Tracing (Config.Tracing; docs/running.md, "Observability: tracing").
//
// The transports start a request's server span (synclane.sync) and hand
// its context to Sync; the job that carries the request to its
// partition's actor carries that context, so the actor's steps are spans
// under it (package partition, trace.go). A request forwarded to its
// partition's owner gets a client span (synclane.forward) whose context
// the member call carries as a W3C traceparent header; the owner's sync
// span continues the same trace.

// tracer returns the engine's tracer, nil when tracing is off.
func (e *Engine) tracer() trace.Tracer { return tracing.Tracer(e.cfg.Tracing) }

// Tracer returns the tracer synclane's spans are made with, from
// Config.Tracing; nil when tracing is off (a transport then skips its
// spans: nothing is allocated).
func (e *Engine) Tracer() trace.Tracer { return e.pcfg.Tracer }

// forwardSpan starts the client span of a call forwarding a request to
// its partition's owner, under the request's span.
func (e *Engine) forwardSpan(ctx context.Context, owner string, id Identity) (context.Context, trace.Span) {
	ctx, span := tracing.ChildKind(ctx, ctx, e.pcfg.Tracer, tracing.SpanForward, trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(tracing.Member.String(owner), tracing.Partition.String(id.Partition))
	}
	return ctx, span
}

// endForwardSpan ends a forward span, failed with err when set.
func endForwardSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		tracing.Fail(span, string(syncerr.CodeOf(err)), err)
	}
	span.End()
}
