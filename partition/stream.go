package partition

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/segstore"
)

// A bootstrap section is streamed: the actor builds its first page with
// the rest of the reply; every further page is built while the reply is
// being written, one PageJob on the partition's actor at a time, and each
// is verified against the gate token the reply was released under before
// its bytes leave. A reply therefore holds one page of a section in memory,
// not all of them. When the gate closed or its token changed, the stream
// ends with an ERROR frame (sync.schema_not_ready) and END, and the client
// drops the section (SPEC §1.4 abort rule).

// pageStream is the state of one streamed bootstrap section.
type pageStream struct {
	// at is the index in Reply.Frames of the section's SUB_END; the pages
	// are written before it and its token is updated as they go.
	at        int
	end       *ssp2.SubEnd
	partition string
	// src is what the section's pages are built from and keyed by.
	src       tablePages
	tok       BootstrapToken
	signed    bool
	pagesLeft int
	// budget is the page bytes the section may still add.
	budget int
	// lastSize is the size of the last page built for the stream (the
	// next page's buffer is presized to it).
	lastSize int
	// recycle is the section's page written just before the stream starts
	// (in the reply's frames) when its buffer may be reused; spare is a
	// written page's buffer that the next page is built into, so a stream
	// keeps one page buffer instead of allocating one per page (and a
	// collector that counts the page being written and the page being
	// built as live at once sees one of them). Only buffers this request
	// built itself are reused: bytes read back from the segment store or
	// kept in memory (inline pages) are shared. spare is handed from the writer to the actor through the
	// job submission, never used by both at once.
	recycle   *ssp2.SegmentInline
	spare     []byte
	lastFresh bool

	// gate, ctx and submit are bound when the reply is released.
	gate   GateToken
	ctx    context.Context
	submit func(partition string, job Job)
}

// bindStreams attaches the released reply's streams to the gate token it
// was verified under and to the actor that builds their pages.
func (p *Partition) bindStreams(ctx context.Context, rep *Reply, token GateToken) {
	for _, s := range rep.streams {
		s.gate, s.ctx, s.submit = token, ctx, p.cfg.Submit
	}
}

// next builds the stream's next page on the partition's actor. It returns
// nil when the section is complete or its page or byte budget is spent.
func (s *pageStream) next() (ssp2.Frame, error) {
	if s.pagesLeft <= 0 || s.budget <= 0 || s.tok.RowCursor == nil {
		return nil, nil
	}
	j := &PageJob{ctx: s.ctx, s: s}
	j.init()
	s.submit(s.partition, j)
	r, err := j.wait(s.ctx, "request abandoned while streaming")
	if err != nil {
		return nil, err
	}
	s.pagesLeft--
	s.budget -= r.size
	s.tok.RowCursor = r.next
	return r.frame, nil
}

// written hands a page back after the writer wrote it (a page of the
// stream, or recycle, the page just before it): when its bytes were built
// by this process, the next page is built into them. io.Writer's contract
// (Write must not retain its argument) makes that safe.
func (s *pageStream) written(f ssp2.Frame) {
	si, ok := f.(*ssp2.SegmentInline)
	if !ok {
		return
	}
	if si == s.recycle || s.lastFresh {
		s.spare = si.Payload[:0]
	}
	s.recycle, s.lastFresh = nil, false
}

// finish sets the section's SUB_END token: absent once the table is done.
func (s *pageStream) finish() {
	s.end.BootstrapState = nil
	if s.tok.RowCursor != nil {
		s.end.BootstrapState = s.tok.Encode()
	}
}

// PageJob builds one page of a streamed bootstrap section on the
// partition's actor and verifies the gate before handing it out.
type PageJob struct {
	ctx context.Context
	s   *pageStream
	completion[pageResult]
}

type pageResult struct {
	frame ssp2.Frame
	next  *string
	size  int
}

// Batchable implements Job: a page never joins a group commit.
func (*PageJob) Batchable() bool { return false }

// Fail implements Job.
func (j *PageJob) Fail(err error) {
	var coded *syncerr.Error
	if !errors.As(err, &coded) {
		err = syncerr.Wrap(syncerr.InternalError, err, "the partition failed while streaming this response; retry")
	}
	j.answer(pageResult{}, err)
}

func (j *PageJob) push() *SyncJob { return nil }

func (j *PageJob) run(ctx context.Context, p *Partition) {
	if j.ctx.Err() != nil {
		j.answer(pageResult{}, j.ctx.Err())
		return
	}
	if p.cfg.Tracer != nil {
		// The page's segment build is a span of the request's (trace.go).
		ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(j.ctx))
	}
	s := j.s
	var r pageResult
	if s.tok.Lane == LaneRef {
		tok := s.tok
		var built []byte
		m, _, err := p.cfg.Segments.Obtain(ctx, p.name, s.src.key(tok), func(ctx context.Context) (segstore.Built, error) {
			b, err := p.buildPage(ctx, s.src, tok, s.lastSize, s.spare)
			built = b.Data
			return b, err
		})
		if err != nil {
			j.answer(pageResult{}, storageErr(err))
			return
		}
		if built != nil {
			s.spare = built[:0] // stored (Put keeps no reference): reuse it
		}
		r.frame, r.next, r.size = p.refFrame(m, s.tok, s.signed), m.NextRowCursor, refSize(m)
		s.lastSize = int(m.ByteLength)
	} else {
		b, fresh, err := p.inlinePage(ctx, s.src, s.tok, s.lastSize, s.spare)
		if err != nil {
			j.answer(pageResult{}, storageErr(err))
			return
		}
		if s.lastFresh = fresh; fresh {
			s.spare = nil // now the page's; handed back once it is written
		}
		r.frame, r.next, r.size = &ssp2.SegmentInline{Payload: b.Data, Verified: true}, b.Meta.NextRowCursor, len(b.Data)
		s.lastSize = len(b.Data)
	}
	// Read, verify, release: no page built under another token leaves.
	now, horizon, err := p.cfg.Gate.Verify(ctx, p.gateReader(), p.name, s.gate)
	if err != nil {
		j.answer(pageResult{}, err)
		return
	}
	p.adopt(now)
	p.tail.dropThrough(horizon) // (a bootstrap page reads rows, not the log)
	j.answer(r, nil)
}

func (j *PageJob) requestContext() context.Context { return j.ctx }
