package partition

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/internal/tracing"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore"
)

// Tracing of the partition's actor (Config.Tracer; see docs/running.md,
// "Observability: tracing").
//
// A request's context travels to the actor inside its SyncJob, and with
// it the request's span: the steps of the job are spans under it
// (queue wait, gate open, apply, commit, reply build, gate verify, and
// the segment builds of a bootstrap under its reply build). A push group
// serves several requests with one storage transaction: the steps it
// shares (gate open, which begins the transaction, the storage commit
// and the gate verify) are one span each, a child of the first traced
// request's span, with a link (trace.Link) to every other traced
// request's span of the group and synclane.group.requests counting the
// group; each request's own steps (queue wait, apply, reply build) stay
// under its own span. A job is traced when Config.Tracer is set and its
// request's span is recording; otherwise nothing is allocated.

// traced reports whether j's steps are traced (see above).
func (p *Partition) traced(j *SyncJob) bool { return p.cfg.Tracer != nil && j.queued != 0 }

// jobSpan starts step name of j's request under its span (tracing.Off
// when j is not traced); the returned context is ctx carrying it.
func (p *Partition) jobSpan(ctx context.Context, j *SyncJob, name string) (context.Context, trace.Span) {
	if !p.traced(j) {
		return ctx, tracing.Off
	}
	return tracing.Child(ctx, j.ctx, p.cfg.Tracer, name)
}

// queueWait records how long j waited for the actor: a span from its
// submission to now.
func (p *Partition) queueWait(j *SyncJob) {
	if !p.traced(j) {
		return
	}
	_, s := p.cfg.Tracer.Start(trace.ContextWithSpan(context.Background(), trace.SpanFromContext(j.ctx)), tracing.SpanQueueWait,
		trace.WithTimestamp(time.Unix(0, j.queued)))
	s.End()
}

// groupSpan starts step name shared by the requests of a push group: a
// child of the first traced request's span, linked to the other traced
// ones (tracing.Off when none is traced).
func (p *Partition) groupSpan(ctx context.Context, jobs []*SyncJob, name string) trace.Span {
	if p.cfg.Tracer == nil {
		return tracing.Off
	}
	var first *SyncJob
	var links []trace.Link
	for _, j := range jobs {
		switch {
		case !p.traced(j) || !tracing.Recording(j.ctx):
		case first == nil:
			first = j
		default:
			links = append(links, trace.Link{SpanContext: trace.SpanContextFromContext(j.ctx)})
		}
	}
	if first == nil {
		return tracing.Off
	}
	_, s := p.cfg.Tracer.Start(trace.ContextWithSpan(ctx, trace.SpanFromContext(first.ctx)), name, trace.WithLinks(links...))
	s.SetAttributes(tracing.GroupSize.Int(len(jobs)), tracing.Partition.String(p.name))
	return s
}

// endSpan ends span, marked failed with err's protocol code when err is
// set.
func endSpan(span trace.Span, err error) {
	failSpan(span, err)
	span.End()
}

// failSpan marks span failed with err's protocol code (nothing when err
// is nil or span is not recording).
func failSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		tracing.Fail(span, string(syncerr.CodeOf(err)), err)
	}
}

// segmentSpan starts a segment build under the span ctx carries (a
// request's reply build, or its sync span for a streamed page).
func (p *Partition) segmentSpan(ctx context.Context) (context.Context, trace.Span) {
	return tracing.Child(ctx, ctx, p.cfg.Tracer, tracing.SpanSegmentBuild)
}

// endSegmentSpan ends a segment build's span with what was built.
func (p *Partition) endSegmentSpan(span trace.Span, src tablePages, lane string, b segstore.Built, err error) {
	if span.IsRecording() {
		span.SetAttributes(tracing.Partition.String(p.name), tracing.Table.String(src.table.Name), tracing.Lane.String(lane),
			tracing.Rows.Int64(b.Meta.RowCount), tracing.Bytes.Int(len(b.Data)))
	}
	endSpan(span, err)
}

// endApplySpan ends a request's apply span with its commits' outcomes.
func endApplySpan(span trace.Span, rep *Reply) {
	if span.IsRecording() {
		span.SetAttributes(tracing.Applied.Int(rep.Applied+rep.Cached), tracing.Rejected.Int(rep.Rejected))
	}
	span.End()
}

// reactionOrigin is a staged commit that scheduled reactions, and the
// span of the request that made it.
type reactionOrigin struct {
	seq int64
	sc  trace.SpanContext
}

// stageOrigin notes that commit rec of j scheduled reactions, when j is
// traced and reaction origins are reported.
func (p *Partition) stageOrigin(j *SyncJob, cs *commitState, rec storage.CommitRecord) {
	if p.cfg.OnReactionOrigin == nil || len(cs.reactions) == 0 || !p.traced(j) {
		return
	}
	p.origins = append(p.origins, reactionOrigin{seq: rec.Seq, sc: trace.SpanContextFromContext(j.ctx)})
}

// reportOrigins reports the staged origins once their transaction
// committed.
func (p *Partition) reportOrigins() {
	for _, o := range p.origins {
		p.cfg.OnReactionOrigin(p.name, o.seq, o.sc)
	}
	p.origins = p.origins[:0]
}

// appliedSpan is groupSpan over the requests of applied (nothing is
// gathered when tracing is off).
func (p *Partition) appliedSpan(ctx context.Context, applied []started, name string) trace.Span {
	if p.cfg.Tracer == nil {
		return tracing.Off
	}
	return p.groupSpan(ctx, requestsOf(applied), name)
}
