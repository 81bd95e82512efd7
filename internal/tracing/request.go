package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/protocol/ssp2"
)

// Request kinds (attribute synclane.request.kind).
const (
	KindPush      = "push"      // commits only
	KindPull      = "pull"      // subscriptions only
	KindMixed     = "mixed"     // commits and subscriptions
	KindOther     = "other"     // neither (an epoch handshake)
	KindForwarded = "forwarded" // sent on undecoded to the partition's owner
)

// StartServer starts a server span name for an incoming HTTP request:
// the child of the traceparent (and tracestate) header h carries, a new
// root without a valid one. t must not be nil.
func StartServer(ctx context.Context, t trace.Tracer, h http.Header, name string) (context.Context, trace.Span) {
	ctx = Propagator.Extract(ctx, propagation.HeaderCarrier(h))
	return t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
}

// Inject writes the span context of ctx into h as traceparent (and
// tracestate); nothing when ctx carries no valid span context.
func Inject(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		Propagator.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// SetRequest sets the attributes of a decoded sync request on its
// span: partition, kind, commit, operation and subscription counts. A nil
// m is a request not decoded here: forwarded reports that it was sent on
// to its partition's owner (kind forwarded; other otherwise).
func SetRequest(span trace.Span, partition string, m *ssp2.Message, forwarded bool) {
	if !span.IsRecording() {
		return
	}
	commits, ops, subs := 0, 0, 0
	if m != nil {
		for _, f := range m.Frames {
			switch f := f.(type) {
			case *ssp2.PushCommit:
				commits++
				ops += len(f.Operations)
			case *ssp2.Subscription:
				subs++
			}
		}
	}
	kind := KindOther
	switch {
	case m == nil && forwarded:
		kind = KindForwarded
	case m == nil:
	case commits > 0 && subs > 0:
		kind = KindMixed
	case commits > 0:
		kind = KindPush
	case subs > 0:
		kind = KindPull
	}
	span.SetAttributes(Partition.String(partition), RequestKind.String(kind))
	if m != nil {
		span.SetAttributes(Commits.Int(commits), Operations.Int(ops), Subscriptions.Int(subs))
	}
}

// ChildKind is Child with a span kind.
func ChildKind(ctx, parent context.Context, t trace.Tracer, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if t == nil {
		return ctx, Off
	}
	ps := trace.SpanFromContext(parent)
	if !ps.IsRecording() {
		return ctx, Off
	}
	return t.Start(trace.ContextWithSpan(ctx, ps), name, trace.WithSpanKind(kind))
}
