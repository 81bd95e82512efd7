package partition

import (
	"context"
	"errors"
	"maps"
	"slices"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/synclane/synclane/internal/tracing"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore"
)

// pull serves a request without commits in the partition's order of steps:
// open the gate (the token the reply is built under), read the partition,
// run the request checks, build the reply, verify the gate, and only then
// record the client and release the reply.
//
// The gate is opened by the last gate read that found it open, when that
// read came after every reply built before it (p.lastOpen: the verify of
// the previous pull or push group): it is a read before this reply is
// built as much as a fresh one, so the reply's own verify read still
// decides whether it leaves. A reply whose build or verify fails under
// that token is dropped unanswered and the request is served again under
// a fresh gate read, so its answer is the one a fresh read gives (a
// closed gate's refusal, not an error of building under it).
func (p *Partition) pull(ctx context.Context, j *SyncJob) {
	p.queueWait(j)
	if j.abandoned() {
		return
	}
	if token, ok := p.lastOpen(); ok {
		_, span := p.jobSpan(ctx, j, tracing.SpanGateOpen)
		span.SetAttributes(tracing.GateReused.Bool(true))
		span.End()
		if p.pullUnder(ctx, j, token, true) {
			return
		}
	}
	p.pullFresh(ctx, j)
}

// pullFresh serves j under a fresh gate read.
func (p *Partition) pullFresh(ctx context.Context, j *SyncJob) {
	_, span := p.jobSpan(ctx, j, tracing.SpanGateOpen)
	token, err := p.cfg.Gate.Open(ctx, p.gateReader(), p.name)
	endSpan(span, err)
	if err != nil {
		p.forgetOpen()
		j.answer(nil, err)
		return
	}
	p.pullUnder(ctx, j, token, false)
}

// pullGroup serves bootstrap pulls the actor handed over together (see
// SyncJob.Batchable; bindGroup bound their clients first) as pull serves
// one, with the gate shared: every reply is built under one token (the
// last open read's, else one fresh read), then one verify read decides
// for all of them, as a push group's does: a closed or changed gate
// answers every job of the group with the refusal (under a fresh token)
// or has each served again under a fresh gate read (under a reused one,
// as pull does), and no reply built under the old token leaves. The
// group's jobs with the same subscription share the scope pin and image
// lookups and one read of the partition (groupReads). A job whose build fails under a reused token is
// served again alone under a fresh read, after the group.
func (p *Partition) pullGroup(ctx context.Context, jobs []*SyncJob) {
	switch len(jobs) {
	case 0:
		return
	case 1:
		p.pull(ctx, jobs[0])
		return
	}
	live := jobs[:0:0]
	for _, j := range jobs {
		p.queueWait(j)
		if !j.abandoned() {
			live = append(live, j)
		}
	}
	if len(live) == 0 {
		return
	}
	token, reused := p.lastOpen()
	if reused {
		for _, j := range live {
			_, span := p.jobSpan(ctx, j, tracing.SpanGateOpen)
			span.SetAttributes(tracing.GateReused.Bool(true))
			span.End()
		}
	} else {
		span := p.groupSpan(ctx, live, tracing.SpanGateOpen)
		var err error
		token, err = p.cfg.Gate.Open(ctx, p.gateReader(), p.name)
		endSpan(span, err)
		if err != nil {
			p.forgetOpen()
			for _, j := range live {
				j.answer(nil, err)
			}
			return
		}
	}
	p.group = &groupReads{finds: map[string]segstore.Meta{}}
	defer func() { p.group = nil }()
	var built []started
	var stops []bool
	var again []*SyncJob
	for _, j := range live {
		bctx, span := p.jobSpan(ctx, j, tracing.SpanReplyBuild)
		rep, stop, err := p.buildPull(bctx, j, token)
		endSpan(span, err)
		switch {
		case err != nil && reused:
			again = append(again, j)
		case err != nil:
			j.answer(nil, err)
		default:
			built, stops = append(built, started{job: j, rep: rep}), append(stops, stop)
		}
	}
	if c := p.cfg.Counters; c != nil {
		c.PullGroups.Add(1)
		c.GroupedPulls.Add(uint64(len(built)))
	}
	if len(again) > 0 {
		p.forgetOpen()
	}
	if len(built) > 0 {
		span := p.appliedSpan(ctx, built, tracing.SpanGateVerify)
		vctx := ctx
		if span.IsRecording() {
			vctx = trace.ContextWithSpan(ctx, span)
		}
		var horizon int64
		ok := true
		if reused {
			var now GateToken
			var err error
			now, horizon, err = p.cfg.Gate.Verify(vctx, p.gateReader(), p.name, token)
			if err != nil {
				p.forgetOpen()
				ok = false
				for _, b := range built {
					again = append(again, b.job)
				}
			} else {
				p.adoptVerified(now, horizon)
			}
		} else {
			horizon, ok = p.verified(vctx, token, requestsOf(built))
		}
		span.End()
		if ok {
			for i, b := range built {
				if !stops[i] {
					b.rep.expireBelow(horizon)
					p.bindStreams(b.job.ctx, b.rep, token)
					p.recordClient(ctx, b.job, b.rep)
				}
				b.job.answer(b.rep, nil)
			}
		}
	}
	p.group = nil
	for _, j := range again {
		p.pullFresh(ctx, j)
	}
}

// pullUnder builds the reply of j under the gate token token, verifies the
// gate and answers j. When reused (token is p.lastOpen's) a failed build
// or verify answers nothing and pullUnder returns false: the caller serves
// j again under a fresh gate read. Otherwise it returns true.
func (p *Partition) pullUnder(ctx context.Context, j *SyncJob, token GateToken, reused bool) bool {
	bctx, span := p.jobSpan(ctx, j, tracing.SpanReplyBuild)
	rep, stop, err := p.buildPull(bctx, j, token)
	endSpan(span, err)
	if err != nil {
		if reused {
			p.forgetOpen()
			return false
		}
		j.answer(nil, err)
		return true
	}
	vctx, span := p.jobSpan(ctx, j, tracing.SpanGateVerify)
	var horizon int64
	ok := true
	if reused {
		var now GateToken
		now, horizon, err = p.cfg.Gate.Verify(vctx, p.gateReader(), p.name, token)
		if err != nil {
			span.End()
			p.forgetOpen()
			return false
		}
		p.adoptVerified(now, horizon)
	} else {
		horizon, ok = p.verified(vctx, token, []*SyncJob{j})
	}
	span.End()
	if !ok {
		return true
	}
	if !stop {
		rep.expireBelow(horizon)
		p.bindStreams(j.ctx, rep, token)
		p.recordClient(ctx, j, rep)
	}
	j.answer(rep, nil)
	return true
}

// buildPull reads the partition, runs the request checks and builds the
// reply of a pull under the gate token token; stop reports that the
// checks answered the request (rep is the answer, nothing to record).
func (p *Partition) buildPull(ctx context.Context, j *SyncJob, token GateToken) (rep *Reply, stop bool, err error) {
	info, err := p.readPull(ctx)
	if err != nil {
		return nil, false, storageErr(err)
	}
	if token.LogEpoch != "" && info.LogEpoch != token.LogEpoch {
		// Rotated between the two reads: the reply would not be built
		// under the token it is verified against.
		return nil, false, (&Refusal{Kind: RefuseEpoch}).Error()
	}
	if err := p.bind(ctx, j); err != nil {
		return nil, false, storageErr(err)
	}
	rep, stop, err = p.precheck(ctx, j, info)
	if err != nil {
		return nil, false, err
	}
	if !stop {
		p.addLease(ctx, j, rep) // lease.go
		if err := p.servePulls(ctx, j, token, info, rep); err != nil {
			return nil, false, err
		}
	}
	return rep, stop, nil
}

// verified re-reads the gate after replies were built under token. When
// it is closed or the token changed, every job is answered with the
// refusal and false is returned: no byte built under the old token leaves.
// Otherwise it returns the partition's horizon as read then: incremental
// sections from a cursor below it may have missed pruned commits, and the
// caller expires them (Reply.expireBelow) before releasing the replies.
func (p *Partition) verified(ctx context.Context, token GateToken, jobs []*SyncJob) (int64, bool) {
	return p.verifiedBy(ctx, p.gateReader(), token, jobs)
}

// verifiedBy is verified with the gate read by r (a read made after the
// replies were built).
func (p *Partition) verifiedBy(ctx context.Context, r GateReader, token GateToken, jobs []*SyncJob) (int64, bool) {
	now, horizon, err := p.cfg.Gate.Verify(ctx, r, p.name, token)
	if err != nil {
		p.forgetOpen()
		failSpan(trace.SpanFromContext(ctx), err) // the gate verify span, when traced
		for _, j := range jobs {
			j.answer(nil, err)
		}
		return 0, false
	}
	p.adoptVerified(now, horizon)
	return horizon, true
}

// adoptVerified records a verify read that found the gate open with token
// now after the replies were built: the token and horizon are adopted,
// and the read may open the next pull's gate (lastOpen).
func (p *Partition) adoptVerified(now GateToken, horizon int64) {
	p.adopt(now)
	p.tail.dropThrough(horizon)
	p.open, p.openOK = now, true
}

// lastOpen returns the token of the last gate read that found the gate
// open after every reply built before it (false: none since the actor
// started, the log epoch changed, or a gate read or a reply under it
// failed).
func (p *Partition) lastOpen() (GateToken, bool) { return p.open, p.openOK }

// forgetOpen makes the next pull read the gate afresh.
func (p *Partition) forgetOpen() { p.open, p.openOK = GateToken{}, false }

// servePulls appends one section per subscription, in request order, to
// rep: revoked, reset, incremental commits or bootstrap segments, built
// under the gate token token.
func (p *Partition) servePulls(ctx context.Context, j *SyncJob, token GateToken, info storage.PartitionInfo, rep *Reply) error {
	if j.req.Pull == nil {
		return nil
	}
	lim := j.req.Pull.Clamped()
	for _, sub := range j.req.Subscriptions {
		if err := p.serveSubscription(ctx, j, token, info, lim, sub, rep); err != nil {
			return storageErr(err)
		}
	}
	return nil
}

func (p *Partition) serveSubscription(ctx context.Context, j *SyncJob, token GateToken, info storage.PartitionInfo, lim ssp2.PullHeader, sub *ssp2.Subscription, rep *Reply) error {
	t := p.cfg.Schema.Table(sub.Table)
	eff, revoked := Effective(sub.Scopes, j.allowed, j.resolved)
	if revoked {
		rep.Frames = append(rep.Frames,
			&ssp2.SubStart{ID: sub.ID, Status: ssp2.SubRevoked, ReasonCode: string(syncerr.ScopeRevoked), EffectiveScopes: map[string][]string{}},
			&ssp2.SubEnd{NextCursor: sub.Cursor})
		return nil
	}
	mode := ChoosePullMode(sub.Cursor, sub.BootstrapState != nil, info.HorizonSeq, info.MaxCommitSeq)
	if mode != Reset && rep.built > 0 && rep.full(p.cfg.Limits.MaxResponseBytes) {
		// Earlier sections filled the reply: this one makes no progress now
		// and the client's next pull continues it.
		return p.deferSection(ctx, info, lim, sub, eff, mode, rep)
	}
	switch mode {
	case Reset:
		rep.Frames = append(rep.Frames, resetFrames(sub)...)
		return nil
	case Bootstrap:
		return p.bootstrap(ctx, token, info, lim, sub, eff, rep)
	}
	q := storage.ChangeQuery{Table: t.Name, Scopes: eff, AfterSeq: sub.Cursor, UpToSeq: info.MaxCommitSeq, LimitChanges: int(lim.LimitCommits)}
	scan, err := p.scanChanges(ctx, q)
	if err != nil {
		return err
	}
	start := len(rep.Frames)
	rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff})
	next := max(sub.Cursor, info.MaxCommitSeq)
	rep.Frames, rep.built, scan = appendCommits(rep.Frames, rep.built, p.cfg.Limits.MaxResponseBytes, t.Name, scan)
	if scan.Truncated && len(scan.Commits) > 0 {
		next = scan.Commits[len(scan.Commits)-1].Seq
	}
	rep.Frames = append(rep.Frames, &ssp2.SubEnd{NextCursor: next})
	rep.incremental = append(rep.incremental, incrementalSection{start: start, end: len(rep.Frames), sub: sub})
	return nil
}

// resetFrames answers a subscription whose cursor is below the horizon:
// status reset with sync.cursor_expired, {} and the cursor echoed.
func resetFrames(sub *ssp2.Subscription) []ssp2.Frame {
	return []ssp2.Frame{
		&ssp2.SubStart{ID: sub.ID, Status: ssp2.SubReset, ReasonCode: string(syncerr.CursorExpired), EffectiveScopes: map[string][]string{}},
		&ssp2.SubEnd{NextCursor: sub.Cursor},
	}
}

// scanChanges answers q from the log tail when it covers the window, from
// storage otherwise.
func (p *Partition) scanChanges(ctx context.Context, q storage.ChangeQuery) (storage.ChangeScan, error) {
	if p.tail.covers(q.AfterSeq, q.UpToSeq) {
		return p.tail.scan(q), nil
	}
	return p.cfg.Backend.Log.ScanChanges(ctx, p.name, q)
}

// appendCommits appends one COMMIT frame per scanned commit (each with the
// one table of its section) while the estimated bytes built stay under
// budget (the first commit always goes). A scan cut short by the budget is
// returned truncated to the commits sent.
func appendCommits(frames []ssp2.Frame, built, budget int, table string, scan storage.ChangeScan) ([]ssp2.Frame, int, storage.ChangeScan) {
	tables := []string{table}
	for n, c := range scan.Commits {
		if n > 0 && built >= budget {
			// The reply is full: the client resumes after the last commit sent.
			scan.Truncated, scan.Commits = true, scan.Commits[:n]
			break
		}
		built += commitSize(&c)
		changes := make([]ssp2.Change, len(c.Changes))
		for i := range c.Changes {
			ch := &c.Changes[i]
			changes[i] = ssp2.Change{RowID: ch.RowID, Op: ch.Op, Scopes: ch.Scopes}
			if ch.Op == ssp2.OpUpsert {
				v := ch.RowVersion
				changes[i].RowVersion = &v
				changes[i].Row = ch.Row
			}
		}
		frames = append(frames, &ssp2.Commit{CommitSeq: c.Seq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, Tables: tables, Changes: changes})
	}
	return frames, built, scan
}

// bootstrap serves up to maxSnapshotPages pages of the table's in-scope rows
// at a pinned asOfCommitSeq, and a resume token while rows remain. A token
// that cannot be resumed restarts silently with a fresh pin. token is the
// gate token the reply is built under.
//
// Each table is served in one lane, chosen at its first page and carried in
// the token (never switched mid-table): inline SSG2 rows segments, or
// SEGMENT_REFs to rows segments in the segment cache. The ref lane is taken
// when the client accepts refs (bit 1) and either does not accept inline
// rows (bit 0) or the first page exceeds the inline limit. Every page is
// answered with what is already built for its key when there is one
// (openTable, inlinePage, Obtain), and encoded only when there is none.
func (p *Partition) bootstrap(ctx context.Context, token GateToken, info storage.PartitionInfo, lim ssp2.PullHeader, sub *ssp2.Subscription, eff map[string][]string, rep *Reply) error {
	t := p.cfg.Schema.Table(sub.Table)
	tok, err := p.bootstrapToken(ctx, sub, t, eff, lim.Accept, info)
	if err != nil {
		return err
	}
	canRef := p.cfg.Segments != nil && lim.Accept&ssp2.AcceptRefRows != 0
	canInline := lim.Accept&ssp2.AcceptInlineRows != 0 || !canRef
	if (tok.Lane == LaneRef && !canRef) || (tok.Lane == LaneInline && !canInline) {
		// The client no longer accepts the table's lane: start over.
		if tok, err = p.freshToken(ctx, t, eff, lim.Accept, info); err != nil {
			return err
		}
	}
	canImage := p.cfg.Segments != nil && p.cfg.Images != nil && lim.Accept&ssp2.AcceptSQLite != 0 && !t.HasEncrypted() && tok.RowCursor == nil
	rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff, Bootstrap: true})
	src := tablePages{table: t, eff: eff, digest: ssp2.ScopeDigest(eff), pageRows: int(lim.LimitSnapshotRows),
		logEpoch: info.LogEpoch, schemaVersion: p.cfg.Schema.Version, storedVersion: token.StoredVersion,
		maxSeq: info.MaxCommitSeq, horizon: info.HorizonSeq}
	signed := lim.Accept&ssp2.AcceptSignedURLs != 0
	done := false
	prevSize := 0 // the last page's bytes (presizes the next streamed page)
	// lastFresh is the section's last inline page when its bytes were built
	// here (not shared with the segment store or the inline pages kept in
	// memory): the stream reuses its buffer once it is written.
	var lastFresh *ssp2.SegmentInline
	addInline := func(b segstore.Built, fresh bool) {
		rep.built += len(b.Data)
		prevSize = len(b.Data)
		frame := &ssp2.SegmentInline{Payload: b.Data, Verified: true}
		rep.Frames = append(rep.Frames, frame)
		lastFresh = nil
		if fresh {
			lastFresh = frame
		}
		done = b.Meta.NextRowCursor == nil
		tok.RowCursor = b.Meta.NextRowCursor
	}
	addRef := func(m segstore.Meta) {
		done = p.addRef(m, tok, signed, rep)
		tok.RowCursor = m.NextRowCursor
		prevSize = int(m.ByteLength)
	}
	for page := 0; page < int(lim.MaxSnapshotPages) && !done; page++ {
		if page > 0 && rep.full(p.cfg.Limits.MaxResponseBytes) {
			break // the reply is full: the resume token carries on
		}
		if page > 0 && p.cfg.Submit != nil {
			// The rest of the section is streamed page by page as the
			// reply is written (stream.go).
			end := &ssp2.SubEnd{NextCursor: tok.AsOfCommitSeq, BootstrapState: tok.Encode()}
			rep.streams = append(rep.streams, &pageStream{at: len(rep.Frames), end: end, partition: p.name, src: src,
				tok: tok, signed: signed, pagesLeft: int(lim.MaxSnapshotPages) - page,
				budget: p.cfg.Limits.MaxResponseBytes - rep.built, lastSize: prevSize, recycle: lastFresh})
			rep.Frames = append(rep.Frames, end)
			return nil
		}
		switch tok.Lane {
		case "":
			st, err := p.openTable(ctx, src, tok, canImage, canRef, canInline)
			if err != nil {
				return err
			}
			tok.Lane = st.lane
			switch {
			case st.lane == LaneSQLite:
				// The image is the table's one and last page.
				p.addRef(*st.ref, tok, signed, rep)
				done = true
			case st.ref != nil:
				addRef(*st.ref)
			default:
				addInline(st.page, st.fresh)
			}
		case LaneRef:
			m, _, err := p.cfg.Segments.Obtain(ctx, p.name, src.key(tok), func(ctx context.Context) (segstore.Built, error) {
				return p.buildPage(ctx, src, tok, 0, nil)
			})
			if err != nil {
				return err
			}
			addRef(m)
		default:
			b, fresh, err := p.inlinePage(ctx, src, tok, prevSize, nil)
			if err != nil {
				return err
			}
			addInline(b, fresh)
		}
	}
	end := &ssp2.SubEnd{NextCursor: tok.AsOfCommitSeq}
	if !done {
		end.BootstrapState = tok.Encode()
	}
	rep.Frames = append(rep.Frames, end)
	return nil
}

// Bootstrap lanes, as carried in the resume token.
const (
	LaneInline = "inline"
	LaneRef    = "ref"
	LaneSQLite = "sqlite"
)

// tablePages is what the pages of one bootstrap section are built from
// and keyed by.
type tablePages struct {
	table    *schema.Table
	eff      map[string][]string
	digest   string // of eff
	pageRows int
	logEpoch string
	// schemaVersion is the running schema version (the page's columns).
	schemaVersion int32
	// storedVersion is the stored schema version of the gate token the
	// reply is built under (inline pages kept in memory are keyed by it).
	storedVersion int32
	// maxSeq and horizon are the partition's max seq and horizon as read
	// for the reply (the rows read are the rows at maxSeq).
	maxSeq, horizon int64
}

// key is the build key of the rows page at tok's pin and row cursor
// (whichever lane sends it: a rows segment and an inline page of the same
// key are the same bytes).
func (s tablePages) key(tok BootstrapToken) segstore.KeyParts {
	return segstore.KeyParts{Table: s.table.Name, ScopeDigest: s.digest, AsOfCommitSeq: tok.AsOfCommitSeq, RowCursor: tok.RowCursor,
		PageRows: s.pageRows, SchemaVersion: s.schemaVersion, LogEpoch: s.logEpoch, Lane: LaneRef}
}

// imageKey is the build key of the table's SQLite image at tok's pin.
func (s tablePages) imageKey(tok BootstrapToken) segstore.KeyParts {
	return segstore.KeyParts{Table: s.table.Name, ScopeDigest: s.digest, AsOfCommitSeq: tok.AsOfCommitSeq,
		SchemaVersion: s.schemaVersion, LogEpoch: s.logEpoch, Lane: LaneSQLite}
}

// inlineKey names the inline page at tok's pin and row cursor among the
// pages kept in memory.
func (s tablePages) inlineKey(partition string, tok BootstrapToken) segstore.InlineKey {
	return segstore.InlineKey{Partition: partition, Build: s.key(tok), StoredVersion: s.storedVersion}
}

// tableStart is how a table's bootstrap starts: its lane and either the
// segment its first page references (the ref and sqlite lanes) or its
// inline first page, whose bytes are fresh when they are in a buffer of
// this request's own (see inlinePage).
type tableStart struct {
	lane  string
	ref   *segstore.Meta
	page  segstore.Built
	fresh bool
}

// openTable starts a table's bootstrap at tok's pin. It looks for what is
// already built for the pin before it encodes anything, in this order:
//
//  1. the inline first page kept in memory (a client taking inline rows);
//  2. the SQLite image stored for (table, scope digest, pin, schema
//     version, log epoch), when the client takes images and the image
//     holds more rows than one page (a table that fits one page goes as
//     rows, as when it is built);
//  3. the first page stored as a rows segment (by an earlier request by
//     ref, or an inline page over the inline limit): referenced, or read
//     back for the inline lane.
//
// Only when none is there is the first page encoded; it is then stored or
// kept for the next request of its key (keepPage). A first page that shows
// the table exceeds one page gets a client taking images the image
// instead (built once per key, single flight). The lane rule is the same
// for a page found and a page built: by ref when the client takes refs and
// either not inline rows or the page exceeds the inline limit.
func (p *Partition) openTable(ctx context.Context, src tablePages, tok BootstrapToken, canImage, canRef, canInline bool) (tableStart, error) {
	segs := p.cfg.Segments
	byRef := func(size int) bool { return canRef && (!canInline || size > p.cfg.InlineSegmentMaxBytes) }
	key := src.key(tok)
	var page *segstore.Built
	fresh := false
	var lookupErr error // a segment store failure the page outlives if it goes inline
	if canInline && segs != nil {
		if b, ok := segs.InlinePage(src.inlineKey(p.name, tok)); ok {
			page = &b
		} else if b, ok := p.patchFirstPage(ctx, src, tok); ok {
			// The table's whole first page, patched from the one kept for
			// an older pin (patch.go): no image (it fits one page), no
			// stored segment to look for (the same bytes). Under the
			// inline limit it is kept already (its bytes are shared).
			page, fresh = &b, len(b.Data) > p.cfg.InlineSegmentMaxBytes
		}
	}
	if page == nil && canImage {
		m, err := p.findSegment(ctx, src.imageKey(tok))
		switch {
		case err == nil && m.RowCount > int64(src.pageRows):
			segs.CountReused()
			return tableStart{lane: LaneSQLite, ref: &m}, nil
		case err != nil && !errors.Is(err, segstore.ErrNotFound):
			lookupErr = err
		}
	}
	if page == nil && segs != nil {
		m, err := p.findSegment(ctx, key)
		switch {
		case err == nil && canImage && m.NextRowCursor != nil:
			return p.imageStart(ctx, src, tok)
		case err == nil && byRef(int(m.ByteLength)):
			segs.CountReused()
			return tableStart{lane: LaneRef, ref: &m}, nil
		case err == nil:
			if _, data, err := segs.Get(ctx, p.name, m.ID); err == nil {
				segs.CountReused()
				page = &segstore.Built{Meta: m, Data: data}
			} else if !errors.Is(err, segstore.ErrNotFound) && !errors.Is(err, segstore.ErrExpired) {
				lookupErr = err
			}
		case !errors.Is(err, segstore.ErrNotFound):
			lookupErr = err
		}
	}
	if page == nil {
		b, err := p.buildPage(ctx, src, tok, 0, nil)
		if err != nil {
			return tableStart{}, err
		}
		page, fresh = &b, true
	}
	if canImage && page.Meta.NextRowCursor != nil {
		return p.imageStart(ctx, src, tok)
	}
	if byRef(len(page.Data)) {
		b := *page
		m, _, err := segs.Obtain(ctx, p.name, key, func(context.Context) (segstore.Built, error) { return b, nil })
		if err != nil {
			return tableStart{}, err
		}
		return tableStart{lane: LaneRef, ref: &m}, nil
	}
	if lookupErr != nil {
		p.segmentStoreFailed("lookup", lookupErr)
	}
	if fresh {
		p.keepPage(ctx, src, tok, *page)
	}
	return tableStart{lane: LaneInline, page: *page, fresh: fresh}, nil
}

// findSegment is Segments.Find of key in the partition, shared within a
// group of pulls (pullGroup): a segment one job of the group found is
// the answer for the others, which are served in the same moment under
// the same gate token (a lookup that finds nothing is not remembered).
func (p *Partition) findSegment(ctx context.Context, key segstore.KeyParts) (segstore.Meta, error) {
	if p.group == nil {
		return p.cfg.Segments.Find(ctx, p.name, key)
	}
	k := key.Key()
	if m, ok := p.group.finds[k]; ok {
		return m, nil
	}
	m, err := p.cfg.Segments.Find(ctx, p.name, key)
	if err == nil {
		p.group.finds[k] = m
	}
	return m, err
}

// groupReads are the reads the pulls of one group (pullGroup) share: the
// partition's registry entry, read once for the group (readPull), and
// the segments found (findSegment).
type groupReads struct {
	info  storage.PartitionInfo
	read  bool
	finds map[string]segstore.Meta
}

// readPull is read for a pull: once per group when serving one.
func (p *Partition) readPull(ctx context.Context) (storage.PartitionInfo, error) {
	g := p.group
	if g == nil {
		return p.read(ctx)
	}
	if g.read {
		return g.info, nil
	}
	info, err := p.read(ctx)
	if err == nil {
		g.info, g.read = info, true
	}
	return info, err
}

// imageStart serves the start of a table for a client accepting SQLite
// images (SPEC §5.3) whose table exceeds one page: the image of (table,
// scope digest, pin, schema version, log epoch) is returned, an unexpired
// one reused, otherwise built once (single flight).
func (p *Partition) imageStart(ctx context.Context, src tablePages, tok BootstrapToken) (tableStart, error) {
	t, digest := src.table, src.digest
	m, _, err := p.cfg.Segments.Obtain(ctx, p.name, src.imageKey(tok), func(ctx context.Context) (segstore.Built, error) {
		p.cfg.Segments.CountEncoded()
		ctx, span := p.segmentSpan(ctx)
		data, n, err := p.cfg.buildImage(p, ctx, src, tok)
		b := segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaSQLite, Table: t.Name, ScopeDigest: digest,
			AsOfCommitSeq: tok.AsOfCommitSeq, RowCount: n}, Data: data}
		p.endSegmentSpan(span, src, LaneSQLite, b, err)
		if err != nil {
			return segstore.Built{}, err
		}
		return b, nil
	})
	if err != nil {
		return tableStart{}, err
	}
	return tableStart{lane: LaneSQLite, ref: &m}, nil
}

// copyImage builds the SQLite image of src at tok with the backend's
// ImageCopier: the store copies the rows into the image itself.
func (p *Partition) copyImage(ctx context.Context, src tablePages, tok BootstrapToken) ([]byte, int64, error) {
	c, t := p.cfg.Backend.ImageCopier, src.table
	return p.cfg.Images.BuildCopy(ctx, t, p.cfg.Schema.Version, tok.AsOfCommitSeq, src.digest,
		func(ctx context.Context, imagePath string) (int64, error) {
			return c.CopyRowsToImage(ctx, p.name, storage.RowQuery{Table: t, Scopes: src.eff}, imagePath)
		})
}

// scanImage builds the SQLite image of src at tok from pages of
// Rows.ScanRows (a backend without ImageCopier).
func (p *Partition) scanImage(ctx context.Context, src tablePages, tok BootstrapToken) ([]byte, int64, error) {
	t := src.table
	return p.cfg.Images.Build(ctx, t, p.cfg.Schema.Version, tok.AsOfCommitSeq, src.digest,
		func(ctx context.Context, after *string, limit int) ([]storage.RowRecord, error) {
			return p.cfg.Backend.Rows.ScanRows(ctx, p.name, storage.RowQuery{Table: t, Scopes: src.eff, AfterRowID: after, Limit: limit})
		})
}

// inlinePage returns the inline page at tok's row cursor: the one kept in
// memory for its key, else the one stored in the segment store for it (an
// inline page over the inline limit, or the same page by reference),
// else one built here and kept for the next request (keepPage). A stored
// page that expired or vanished is rebuilt. It reports whether the page's
// bytes were built into a buffer of this request's own (fresh), which the
// caller may reuse once the page is written (buf, when not nil, is such a
// buffer the caller is done with: the page is built into it); bytes kept
// in memory or read back from the segment store are shared and must not
// be. sizeHint presizes a page built here (see buildPage).
func (p *Partition) inlinePage(ctx context.Context, src tablePages, tok BootstrapToken, sizeHint int, buf []byte) (segstore.Built, bool, error) {
	segs := p.cfg.Segments
	if segs == nil {
		b, err := p.buildPage(ctx, src, tok, sizeHint, buf)
		return b, true, err
	}
	if b, ok := segs.InlinePage(src.inlineKey(p.name, tok)); ok {
		return b, false, nil
	}
	// The segment store is a cache for inline pages: when it fails
	// (disk full, database down), the page is built and sent anyway.
	if m, err := segs.Find(ctx, p.name, src.key(tok)); err == nil {
		if _, data, err := segs.Get(ctx, p.name, m.ID); err == nil {
			segs.CountReused()
			return segstore.Built{Meta: m, Data: data}, false, nil
		} else if !errors.Is(err, segstore.ErrNotFound) && !errors.Is(err, segstore.ErrExpired) {
			p.segmentStoreFailed("read", err)
		}
	} else if !errors.Is(err, segstore.ErrNotFound) {
		p.segmentStoreFailed("lookup", err)
	}
	b, err := p.buildPage(ctx, src, tok, sizeHint, buf)
	if err != nil {
		return b, false, err
	}
	p.keepPage(ctx, src, tok, b)
	return b, true, nil // both keepers copy the bytes: the buffer is still ours
}

// keepPage keeps an inline page just built for the next request of its
// key. A page larger than the inline limit (InlineSegmentMaxBytes) is
// stored in the segment store once per build key, exactly as the same
// page by reference would be (same key, same bytes), so a storm of
// inline-only clients bootstraps one scope with each large page built
// once; a smaller one is offered to the inline pages kept in memory
// (segstore.Cache.OfferInlinePage: a table's first page is kept at once,
// a later page on its second build), so N clients bootstrapping or
// reconnecting on one scope at one pin cost one encode. Both copy the
// bytes.
func (p *Partition) keepPage(ctx context.Context, src tablePages, tok BootstrapToken, b segstore.Built) {
	if p.cfg.Segments == nil {
		return
	}
	if len(b.Data) <= p.cfg.InlineSegmentMaxBytes {
		p.cfg.Segments.OfferInlinePage(src.inlineKey(p.name, tok), b, tok.RowCursor == nil)
		return
	}
	if _, _, err := p.cfg.Segments.Obtain(ctx, p.name, src.key(tok), func(context.Context) (segstore.Built, error) { return b, nil }); err != nil {
		p.segmentStoreFailed("store", err)
	}
}

// segmentStoreFailed logs a segment store failure that an inline page
// outlives (the page is served without being stored or reused); a
// cancelled request is not a store failure.
func (p *Partition) segmentStoreFailed(op string, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	p.cfg.Segments.CountBypassed()
	p.log().Warn("segment store failed; inline page served without it", zap.String("op", op), zap.Error(err))
}

// buildPage reads one page of the table's in-scope rows after tok's row
// cursor and encodes it as an SSG2 rows segment. Meta.NextRowCursor is set
// when rows remain after the page. A backend with the RowEncoder fast path
// (SQLite, PostgreSQL) encodes the rows into the segment itself, without a
// RowRecord per row; any other encodes them with storage.VisitEncoder
// (Rows.VisitRows, one row at a time, each encoded as it comes), so the
// page is held once, encoded (the choice is made once, by NewConfig);
// sizeHint (the previous page's bytes in a streamed section, or
// 0) presizes the segment buffer, and buf, when not nil, is a page buffer
// the caller is done with, whose storage the page is written into. Every
// page encoded is counted (segstore.Stats.Encoded).
func (p *Partition) buildPage(ctx context.Context, src tablePages, tok BootstrapToken, sizeHint int, buf []byte) (b segstore.Built, err error) {
	ctx, span := p.segmentSpan(ctx)
	defer func() { p.endSegmentSpan(span, src, LaneInline, b, err) }()
	t, eff, digest, pageRows := src.table, src.eff, src.digest, src.pageRows
	if p.cfg.Segments != nil {
		p.cfg.Segments.CountEncoded()
	}
	q := storage.RowQuery{Table: t, Scopes: eff, AfterRowID: tok.RowCursor, Limit: pageRows}
	sb := ssp2.NewSegmentBuilderBuffer(buf, t.Name, p.cfg.Schema.Version, t.Columns)
	// A page buffer gets a quarter of headroom, so that the pages of a
	// stream, which vary a little in size, all fit the one buffer they
	// reuse: a page that outgrew it would hold its old and its regrown
	// buffer at once.
	switch {
	case sizeHint > 0 && cap(buf) >= sizeHint+sizeHint/8+4096:
		// The spare buffer holds a page of this size with room: no allocation.
	case sizeHint > 0:
		sb.Grow(sizeHint + sizeHint/4 + 4096)
	default:
		sb.ExpectRows(pageRows) // sized once, with the same headroom, after its first block
	}
	r, err := p.cfg.encoder.EncodeRows(ctx, p.name, q, sb)
	if err != nil {
		return segstore.Built{}, err
	}
	m := segstore.Meta{MediaType: ssp2.MediaRows, Table: t.Name, ScopeDigest: digest, AsOfCommitSeq: tok.AsOfCommitSeq,
		RowCount: int64(r.Rows), RowCursor: tok.RowCursor}
	if r.More {
		m.NextRowCursor = &r.LastRowID
	}
	return segstore.Built{Meta: m, Data: sb.Finish()}, nil
}

// addRef appends a SEGMENT_REF for m and reports whether it was the
// table's last page.
func (p *Partition) addRef(m segstore.Meta, tok BootstrapToken, signed bool, rep *Reply) bool {
	rep.built += refSize(m)
	rep.Frames = append(rep.Frames, p.refFrame(m, tok, signed))
	return m.NextRowCursor == nil
}

// refFrame renders a SEGMENT_REF; signed adds a signed URL (accept bit 3,
// when signing is configured).
func (p *Partition) refFrame(m segstore.Meta, tok BootstrapToken, signed bool) *ssp2.SegmentRef {
	ref := &ssp2.SegmentRef{SegmentID: m.ID, MediaType: m.MediaType, Table: m.Table, ByteLength: m.ByteLength,
		RowCount: m.RowCount, AsOfCommitSeq: tok.AsOfCommitSeq, ScopeDigest: m.ScopeDigest,
		RowCursor: m.RowCursor, NextRowCursor: m.NextRowCursor}
	if signed && p.cfg.SignURL != nil {
		u, exp := p.cfg.SignURL(p.name, m)
		ref.URL, ref.URLExpiresAtMs = &u, &exp
	}
	return ref
}

// refSize estimates the encoded size of a SEGMENT_REF.
func refSize(m segstore.Meta) int { return 128 + len(m.ID) + len(m.Table) }

// bootstrapToken resumes sub's bootstrap token, or starts a fresh one
// (freshToken) when it cannot be resumed.
func (p *Partition) bootstrapToken(ctx context.Context, sub *ssp2.Subscription, t *schema.Table, eff map[string][]string, accept uint8, info storage.PartitionInfo) (BootstrapToken, error) {
	if tok, ok := ResumeToken(sub.BootstrapState, t.Name, info.HorizonSeq, info.MaxCommitSeq); ok {
		return tok, nil
	}
	return p.freshToken(ctx, t, eff, accept, info)
}

// freshToken starts a bootstrap of table t: pinned at the partition's max
// seq, or, for a bootstrap eligible for the SQLite lane, at its scope pin
// (scopePin).
func (p *Partition) freshToken(ctx context.Context, t *schema.Table, eff map[string][]string, accept uint8, info storage.PartitionInfo) (BootstrapToken, error) {
	pin := info.MaxCommitSeq
	if ImageEligible(t, accept) {
		var err error
		if pin, err = p.scopePin(ctx, t, eff, info); err != nil {
			return BootstrapToken{}, err
		}
	}
	return BootstrapToken{AsOfCommitSeq: pin, Tables: []string{t.Name}}, nil
}

// ImageEligible reports whether a bootstrap of t by a client accepting
// accept is eligible for the SQLite lane (SPEC §4.7, §5.3): the client
// advertises accept bit 2 and t has no encrypted column. Such a bootstrap
// pins at its scope pin, whether or not this server builds images.
func ImageEligible(t *schema.Table, accept uint8) bool {
	return accept&ssp2.AcceptSQLite != 0 && !t.HasEncrypted()
}

// scopePin is the pin of a bootstrap eligible for the SQLite lane (SPEC
// §4.7): the newest commit up to the partition's max seq with a change of
// t carrying one of the effective values of the subscription's first scope
// variable (in name order) — the candidates an incremental pull of the
// subscription reads (storage.Log.LatestScopeCommit) — raised to the
// horizon. No change the subscription would receive lies between it and
// the max seq, so the snapshot at the scope pin is the snapshot at the max
// seq, and the next incremental pull replays an empty window; the pin, and
// with it a stored image's key, stays put across commits outside the
// subscription's scopes. A subscription with no effective scope (none
// reaches here) pins at the max seq.
func (p *Partition) scopePin(ctx context.Context, t *schema.Table, eff map[string][]string, info storage.PartitionInfo) (int64, error) {
	if len(eff) == 0 {
		return info.MaxCommitSeq, nil
	}
	v := slices.Sorted(maps.Keys(eff))[0]
	q := storage.ScopeCommitQuery{Table: t.Name, Var: v, Values: eff[v], UpToSeq: info.MaxCommitSeq}
	seq, ok := p.pins.get(q, info.LogEpoch, &p.tail)
	if !ok {
		var err error
		if seq, err = p.cfg.Backend.Log.LatestScopeCommit(ctx, p.name, q); err != nil {
			return 0, err
		}
	}
	p.pins.put(q, info.LogEpoch, seq)
	return min(max(seq, info.HorizonSeq), info.MaxCommitSeq), nil
}

// deferSection answers a subscription that no longer fits in the reply
// with a section that makes no progress: an incremental one keeps its
// cursor; a bootstrap one sends no page and hands back its token.
func (p *Partition) deferSection(ctx context.Context, info storage.PartitionInfo, lim ssp2.PullHeader, sub *ssp2.Subscription, eff map[string][]string, mode PullMode, rep *Reply) error {
	if mode != Bootstrap {
		rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff},
			&ssp2.SubEnd{NextCursor: sub.Cursor})
		return nil
	}
	tok, err := p.bootstrapToken(ctx, sub, p.cfg.Schema.Table(sub.Table), eff, lim.Accept, info)
	if err != nil {
		return err
	}
	rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff, Bootstrap: true},
		&ssp2.SubEnd{NextCursor: tok.AsOfCommitSeq, BootstrapState: tok.Encode()})
	return nil
}

// commitSize estimates the encoded size of a commit frame.
func commitSize(c *storage.CommitChanges) int {
	n := 64 + len(c.ActorID)
	for i := range c.Changes {
		ch := &c.Changes[i]
		n += 24 + len(ch.RowID) + len(ch.Row)
		for k, v := range ch.Scopes {
			n += 4 + len(k) + len(v)
		}
	}
	return n
}
