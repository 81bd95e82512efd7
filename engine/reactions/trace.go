package reactions

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/internal/tracing"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/storage"
)

// Tracing of reaction deliveries.
//
// A reaction runs after its commit's request has been answered, possibly
// much later and in another process, so its delivery is not a child of
// that request: each attempt is a root span (synclane.reaction, a
// consumer span) linked (trace.Link) to the span of the request whose
// commit scheduled it. The link comes from a bounded in-memory table
// this process fills as its commits become durable (maxOrigins entries,
// oldest out): a reaction delivered by another process, after a restart
// or once its entry was pushed out has no link, and is still found by its
// attributes synclane.partition and synclane.commit_seq, which the
// scheduling request's synclane.commit span carries too. The traceparent
// is not stored with the reaction: that would take a column in every
// backend's reaction queue.

// maxOrigins bounds the table of scheduling spans (about 100 bytes an
// entry).
const maxOrigins = 4096

// origins maps a commit (partition, seq) to the span of the request that
// made it. It is safe for concurrent use.
type origins struct {
	mu   sync.Mutex
	m    map[originKey]trace.SpanContext
	ring []originKey // insertion order, for eviction
	next int
}

type originKey struct {
	partition string
	seq       int64
}

func newOrigins() *origins {
	return &origins{m: make(map[originKey]trace.SpanContext, maxOrigins), ring: make([]originKey, 0, maxOrigins)}
}

// put records sc as the origin of commit seq of partition.
func (o *origins) put(partition string, seq int64, sc trace.SpanContext) {
	k := originKey{partition, seq}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.m[k]; ok {
		o.m[k] = sc
		return
	}
	if len(o.ring) < maxOrigins {
		o.ring = append(o.ring, k)
	} else {
		delete(o.m, o.ring[o.next])
		o.ring[o.next] = k
		o.next = (o.next + 1) % maxOrigins
	}
	o.m[k] = sc
}

// get returns the origin of commit seq of partition, if known.
func (o *origins) get(partition string, seq int64) (trace.SpanContext, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	sc, ok := o.m[originKey{partition, seq}]
	return sc, ok
}

// Trace turns on delivery spans made with t (nil: off, the default). Call
// it before Configure.
func (s *Service) Trace(t trace.Tracer) {
	if s.w == nil || t == nil {
		return
	}
	s.w.tracer, s.w.origins = t, newOrigins()
}

// configureTrace has pc report the requests behind durable commits that
// scheduled reactions.
func (w *worker) configureTrace(pc *partition.Config) {
	if w.origins == nil {
		return
	}
	pc.OnReactionOrigin = w.origins.put
}

// deliver runs one attempt of r's handler under its span.
func (w *worker) deliver(ctx context.Context, r storage.Reaction) error {
	if w.tracer == nil {
		return w.call(ctx, r)
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer)}
	if sc, ok := w.origins.get(r.Partition, r.CommitSeq); ok {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := w.tracer.Start(ctx, tracing.SpanReaction, opts...)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(tracing.Partition.String(r.Partition), tracing.CommitSeq.Int64(r.CommitSeq),
			tracing.ReactionID.Int64(r.ID), tracing.ReactionName.String(r.Name), tracing.Attempt.Int(r.Attempts))
	}
	err := w.call(ctx, r)
	tracing.Fail(span, "", err)
	return err
}
