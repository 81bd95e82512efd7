package partition

import (
	"context"
	"errors"

	"go.uber.org/zap"

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
func (p *Partition) pull(ctx context.Context, j *SyncJob) {
	if j.abandoned() {
		return
	}
	token, err := p.cfg.Gate.Open(ctx, p.cfg.Store, p.name)
	if err != nil {
		j.answer(nil, err)
		return
	}
	info, err := p.read(ctx)
	if err != nil {
		j.answer(nil, storageErr(err))
		return
	}
	if token.LogEpoch != "" && info.LogEpoch != token.LogEpoch {
		// Rotated between the two reads: the reply would not be built
		// under the token it is verified against.
		j.answer(nil, (&Refusal{Kind: RefuseEpoch}).Error())
		return
	}
	if err := p.bind(ctx, j); err != nil {
		j.answer(nil, storageErr(err))
		return
	}
	rep, stop, err := p.precheck(ctx, j, info)
	if err != nil {
		j.answer(nil, err)
		return
	}
	if !stop {
		p.addLease(ctx, j, rep) // lease.go
		if err := p.servePulls(ctx, j, info, rep); err != nil {
			j.answer(nil, err)
			return
		}
	}
	horizon, ok := p.verified(ctx, token, []*SyncJob{j})
	if !ok {
		return
	}
	if !stop {
		rep.expireBelow(horizon)
		p.bindStreams(j.ctx, rep, token)
		p.recordClient(j, rep)
	}
	j.answer(rep, nil)
}

// verified re-reads the gate after replies were built under token. When
// it is closed or the token changed, every job is answered with the
// refusal and false is returned: no byte built under the old token leaves.
// Otherwise it returns the partition's horizon as read then: incremental
// sections from a cursor below it may have missed pruned commits, and the
// caller expires them (Reply.expireBelow) before releasing the replies.
func (p *Partition) verified(ctx context.Context, token GateToken, jobs []*SyncJob) (int64, bool) {
	return p.verifiedBy(ctx, p.cfg.Store, token, jobs)
}

// verifiedBy is verified with the gate read by r (a read made after the
// replies were built).
func (p *Partition) verifiedBy(ctx context.Context, r GateReader, token GateToken, jobs []*SyncJob) (int64, bool) {
	now, horizon, err := p.cfg.Gate.Verify(ctx, r, p.name, token)
	if err != nil {
		for _, j := range jobs {
			j.answer(nil, err)
		}
		return 0, false
	}
	p.adopt(now)
	p.tail.dropThrough(horizon)
	return horizon, true
}

// servePulls appends one section per subscription, in request order, to
// rep: revoked, reset, incremental commits or bootstrap segments.
func (p *Partition) servePulls(ctx context.Context, j *SyncJob, info storage.PartitionInfo, rep *Reply) error {
	if j.req.Pull == nil {
		return nil
	}
	lim := j.req.Pull.Clamped()
	for _, sub := range j.req.Subscriptions {
		if err := p.serveSubscription(ctx, j, info, lim, sub, rep); err != nil {
			return storageErr(err)
		}
	}
	return nil
}

func (p *Partition) serveSubscription(ctx context.Context, j *SyncJob, info storage.PartitionInfo, lim ssp2.PullHeader, sub *ssp2.Subscription, rep *Reply) error {
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
		p.deferSection(info, sub, eff, mode, rep)
		return nil
	}
	switch mode {
	case Reset:
		rep.Frames = append(rep.Frames, resetFrames(sub)...)
		return nil
	case Bootstrap:
		return p.bootstrap(ctx, info, lim, sub, eff, rep)
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
	return p.cfg.Store.ScanChanges(ctx, p.name, q)
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
// that cannot be resumed restarts silently with a fresh pin.
//
// Each table is served in one lane, chosen at its first page and carried in
// the token (never switched mid-table): inline SSG2 rows segments, or
// SEGMENT_REFs to rows segments in the segment cache. The ref lane is taken
// when the client accepts refs (bit 1) and either does not accept inline
// rows (bit 0) or the first page exceeds the inline limit.
func (p *Partition) bootstrap(ctx context.Context, info storage.PartitionInfo, lim ssp2.PullHeader, sub *ssp2.Subscription, eff map[string][]string, rep *Reply) error {
	t := p.cfg.Schema.Table(sub.Table)
	tok := bootstrapToken(sub, t.Name, info)
	canRef := p.cfg.Segments != nil && lim.Accept&ssp2.AcceptRefRows != 0
	canInline := lim.Accept&ssp2.AcceptInlineRows != 0 || !canRef
	if (tok.Lane == LaneRef && !canRef) || (tok.Lane == LaneInline && !canInline) {
		// The client no longer accepts the table's lane: start over.
		tok = BootstrapToken{AsOfCommitSeq: info.MaxCommitSeq, Tables: []string{t.Name}}
	}
	canImage := p.cfg.Segments != nil && lim.Accept&ssp2.AcceptSQLite != 0 && !t.HasEncrypted() && tok.RowCursor == nil
	rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff, Bootstrap: true})
	pageRows := int(lim.LimitSnapshotRows)
	digest := ssp2.ScopeDigest(eff)
	signed := lim.Accept&ssp2.AcceptSignedURLs != 0
	done := false
	prevSize := 0 // the last page's bytes (presizes the next streamed page)
	// lastFresh is the section's last inline page when its bytes were built
	// here (not read back from the segment store): the stream reuses its
	// buffer once it is written.
	var lastFresh *ssp2.SegmentInline
	for page := 0; page < int(lim.MaxSnapshotPages) && !done; page++ {
		if page > 0 && rep.full(p.cfg.Limits.MaxResponseBytes) {
			break // the reply is full: the resume token carries on
		}
		if page > 0 && p.cfg.Submit != nil {
			// The rest of the section is streamed page by page as the
			// reply is written (stream.go).
			end := &ssp2.SubEnd{NextCursor: tok.AsOfCommitSeq, BootstrapState: tok.Encode()}
			rep.streams = append(rep.streams, &pageStream{at: len(rep.Frames), end: end, partition: p.name, table: t, eff: eff,
				digest: digest, logEpoch: info.LogEpoch, tok: tok, pageRows: pageRows, signed: signed, pagesLeft: int(lim.MaxSnapshotPages) - page,
				budget: p.cfg.Limits.MaxResponseBytes - rep.built, lastSize: prevSize, recycle: lastFresh})
			rep.Frames = append(rep.Frames, end)
			return nil
		}
		key := segstore.KeyParts{Table: t.Name, ScopeDigest: digest, AsOfCommitSeq: tok.AsOfCommitSeq, RowCursor: tok.RowCursor,
			PageRows: pageRows, SchemaVersion: p.cfg.Schema.Version, LogEpoch: info.LogEpoch, Lane: LaneRef}
		var built *segstore.Built
		fresh := true // built's bytes are in a buffer of our own (see pageBuilder)
		if tok.Lane == "" && canImage {
			m, first, err := p.imageOrFirstPage(ctx, t, eff, digest, tok, pageRows, info.LogEpoch)
			if err != nil {
				return err
			}
			if m != nil {
				// The image is the table's one and last page.
				tok.Lane = LaneSQLite
				p.addRef(*m, tok, signed, rep)
				done = true
				continue
			}
			built = first
		}
		if tok.Lane == "" {
			// First page. A client taking refs only reuses a stored
			// segment without reading; otherwise the page is built here and
			// its size picks the lane (a large one is still stored once).
			if canRef && !canInline && built == nil {
				if m, err := p.cfg.Segments.Lookup(ctx, p.name, key); err == nil {
					tok.Lane = LaneRef
					done = p.addRef(m, tok, signed, rep)
					tok.RowCursor = m.NextRowCursor
					continue
				} else if !errors.Is(err, segstore.ErrNotFound) {
					return err
				}
			}
			if built == nil {
				var b segstore.Built
				var err error
				if canRef {
					b, err = p.buildPage(ctx, t, eff, digest, tok, pageRows, 0, nil)
				} else {
					b, fresh, err = p.inlinePage(info.LogEpoch)(ctx, t, eff, digest, tok, pageRows, 0, nil) // inline only: a large page is stored once
				}
				if err != nil {
					return err
				}
				built = &b
			}
			tok.Lane = LaneInline
			if canRef && (!canInline || len(built.Data) > p.cfg.InlineSegmentMaxBytes) {
				tok.Lane = LaneRef
			}
		}
		if tok.Lane == LaneRef {
			m, _, err := p.cfg.Segments.Obtain(ctx, p.name, key, func(ctx context.Context) (segstore.Built, error) {
				if built != nil {
					return *built, nil
				}
				return p.buildPage(ctx, t, eff, digest, tok, pageRows, 0, nil)
			})
			if err != nil {
				return err
			}
			done = p.addRef(m, tok, signed, rep)
			tok.RowCursor = m.NextRowCursor
			prevSize = int(m.ByteLength)
			continue
		}
		if built == nil {
			b, f, err := p.inlinePage(info.LogEpoch)(ctx, t, eff, digest, tok, pageRows, prevSize, nil)
			if err != nil {
				return err
			}
			built, fresh = &b, f
		}
		rep.built += len(built.Data)
		prevSize = len(built.Data)
		frame := &ssp2.SegmentInline{Payload: built.Data, Verified: true}
		rep.Frames = append(rep.Frames, frame)
		lastFresh = nil
		if fresh {
			lastFresh = frame
		}
		done = built.Meta.NextRowCursor == nil
		tok.RowCursor = built.Meta.NextRowCursor
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

// imageOrFirstPage serves the start of a table for a client accepting
// SQLite images (SPEC §5.3): the first page is read, and only when the
// table exceeds it is the image of (table, scope digest, pin, schema
// version, log epoch) returned: an unexpired one is reused, otherwise it is
// built once (single flight). A table that fits one page returns that page.
func (p *Partition) imageOrFirstPage(ctx context.Context, t *schema.Table, eff map[string][]string, digest string, tok BootstrapToken, pageRows int, logEpoch string) (*segstore.Meta, *segstore.Built, error) {
	key := segstore.KeyParts{Table: t.Name, ScopeDigest: digest, AsOfCommitSeq: tok.AsOfCommitSeq,
		SchemaVersion: p.cfg.Schema.Version, LogEpoch: logEpoch, Lane: LaneSQLite}
	first, err := p.buildPage(ctx, t, eff, digest, tok, pageRows, 0, nil)
	if err != nil {
		return nil, nil, err
	}
	if first.Meta.NextRowCursor == nil {
		return nil, &first, nil
	}
	m, _, err := p.cfg.Segments.Obtain(ctx, p.name, key, func(ctx context.Context) (segstore.Built, error) {
		p.cfg.Segments.CountEncoded()
		var data []byte
		var n int64
		var err error
		if c, ok := p.cfg.Store.(storage.ImageCopier); ok {
			// The store copies the rows into the image itself.
			data, n, err = segstore.BuildSQLiteImageCopy(ctx, t, p.cfg.Schema.Version, tok.AsOfCommitSeq, digest,
				func(ctx context.Context, imagePath string) (int64, error) {
					return c.CopyRowsToImage(ctx, p.name, storage.RowQuery{Table: t, Scopes: eff}, imagePath)
				})
		} else {
			data, n, err = segstore.BuildSQLiteImage(ctx, t, p.cfg.Schema.Version, tok.AsOfCommitSeq, digest,
				func(ctx context.Context, after *string, limit int) ([]storage.RowRecord, error) {
					return p.cfg.Store.ScanRows(ctx, p.name, storage.RowQuery{Table: t, Scopes: eff, AfterRowID: after, Limit: limit})
				})
		}
		if err != nil {
			return segstore.Built{}, err
		}
		return segstore.Built{Meta: segstore.Meta{MediaType: ssp2.MediaSQLite, Table: t.Name, ScopeDigest: digest,
			AsOfCommitSeq: tok.AsOfCommitSeq, RowCount: n}, Data: data}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return &m, nil, nil
}

// inlinePage returns a page builder for the inline lane under logEpoch.
// A page larger than the inline limit (InlineSegmentMaxBytes) is stored in
// the segment store once per build key, exactly as the same page by
// reference would be (same key, same bytes), and a later request for that
// key at the same pin reads it back instead of scanning again: a storm of
// inline-only clients bootstraps one scope with each large page built
// once. Smaller pages are built per request and never stored. A stored
// page that expired or vanished is rebuilt.
func (p *Partition) inlinePage(logEpoch string) pageBuilder {
	return func(ctx context.Context, t *schema.Table, eff map[string][]string, digest string, tok BootstrapToken, pageRows, sizeHint int, buf []byte) (segstore.Built, bool, error) {
		if p.cfg.Segments == nil {
			b, err := p.buildPage(ctx, t, eff, digest, tok, pageRows, sizeHint, buf)
			return b, true, err
		}
		key := segstore.KeyParts{Table: t.Name, ScopeDigest: digest, AsOfCommitSeq: tok.AsOfCommitSeq, RowCursor: tok.RowCursor,
			PageRows: pageRows, SchemaVersion: p.cfg.Schema.Version, LogEpoch: logEpoch, Lane: LaneRef}
		// The segment store is a cache for inline pages: when it fails
		// (disk full, database down), the page is built and sent anyway.
		if m, err := p.cfg.Segments.Lookup(ctx, p.name, key); err == nil {
			if _, data, err := p.cfg.Segments.Get(ctx, p.name, m.ID); err == nil {
				return segstore.Built{Meta: m, Data: data}, false, nil
			} else if !errors.Is(err, segstore.ErrNotFound) && !errors.Is(err, segstore.ErrExpired) {
				p.segmentStoreFailed("read", err)
			}
		} else if !errors.Is(err, segstore.ErrNotFound) {
			p.segmentStoreFailed("lookup", err)
		}
		b, err := p.buildPage(ctx, t, eff, digest, tok, pageRows, sizeHint, buf)
		if err != nil || len(b.Data) <= p.cfg.InlineSegmentMaxBytes {
			return b, err == nil, err
		}
		if _, _, err := p.cfg.Segments.Obtain(ctx, p.name, key, func(context.Context) (segstore.Built, error) { return b, nil }); err != nil {
			p.segmentStoreFailed("store", err)
		}
		return b, true, nil // Put copied the bytes: the buffer is still ours
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

// pageBuilder builds (or reads back) one inline page: see inlinePage. It
// reports whether the page's bytes were built into a buffer of this
// process's own (fresh) and so may be reused once written; bytes read back
// from the segment store may be shared (hot set) and must not be.
type pageBuilder func(ctx context.Context, t *schema.Table, eff map[string][]string, digest string, tok BootstrapToken, pageRows, sizeHint int, buf []byte) (segstore.Built, bool, error)

// buildPage reads one page of the table's in-scope rows after tok's row
// cursor and encodes it as an SSG2 rows segment. Meta.NextRowCursor is set
// when rows remain after the page. A store that is a storage.RowEncoder
// (SQLite) encodes the rows into the segment itself, without a RowRecord
// per row; one that is a storage.RowVisitor (every backend) hands the rows
// one at a time and each is encoded as it comes, so the page is held once,
// encoded; sizeHint (the previous page's bytes in a streamed section, or
// 0) presizes the segment buffer, and buf, when not nil, is a page buffer
// the caller is done with, whose storage the page is written into. Every
// page encoded is counted (segstore.Stats.Encoded).
func (p *Partition) buildPage(ctx context.Context, t *schema.Table, eff map[string][]string, digest string, tok BootstrapToken, pageRows, sizeHint int, buf []byte) (segstore.Built, error) {
	if p.cfg.Segments != nil {
		p.cfg.Segments.CountEncoded()
	}
	q := storage.RowQuery{Table: t, Scopes: eff, AfterRowID: tok.RowCursor, Limit: pageRows + 1}
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
	n, more, last := 0, false, ""
	add := func(rec storage.RowRecord) error {
		if n == pageRows {
			more = true // the one row past the page: rows remain
			return nil
		}
		if err := sb.AddRow(rec.Version, rec.Values); err != nil {
			return err
		}
		n++
		last = rec.RowID
		return nil
	}
	if e, ok := p.cfg.Store.(storage.RowEncoder); ok {
		q.Limit = pageRows
		r, err := e.EncodeRows(ctx, p.name, q, sb)
		if err != nil {
			return segstore.Built{}, err
		}
		n, more, last = r.Rows, r.More, r.LastRowID
	} else if v, ok := p.cfg.Store.(storage.RowVisitor); ok {
		if err := v.VisitRows(ctx, p.name, q, add); err != nil {
			return segstore.Built{}, err
		}
	} else {
		rows, err := p.cfg.Store.ScanRows(ctx, p.name, q)
		if err != nil {
			return segstore.Built{}, err
		}
		for i := range rows {
			if err := add(rows[i]); err != nil {
				return segstore.Built{}, err
			}
		}
	}
	m := segstore.Meta{MediaType: ssp2.MediaRows, Table: t.Name, ScopeDigest: digest, AsOfCommitSeq: tok.AsOfCommitSeq,
		RowCount: int64(n), RowCursor: tok.RowCursor}
	if more {
		m.NextRowCursor = &last
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
// pinned at the partition's max seq when it cannot be resumed.
func bootstrapToken(sub *ssp2.Subscription, table string, info storage.PartitionInfo) BootstrapToken {
	tok, ok := ResumeToken(sub.BootstrapState, table, info.HorizonSeq, info.MaxCommitSeq)
	if !ok {
		tok = BootstrapToken{AsOfCommitSeq: info.MaxCommitSeq, Tables: []string{table}}
	}
	return tok
}

// deferSection answers a subscription that no longer fits in the reply
// with a section that makes no progress: an incremental one keeps its
// cursor; a bootstrap one sends no page and hands back its token.
func (p *Partition) deferSection(info storage.PartitionInfo, sub *ssp2.Subscription, eff map[string][]string, mode PullMode, rep *Reply) {
	if mode != Bootstrap {
		rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff},
			&ssp2.SubEnd{NextCursor: sub.Cursor})
		return
	}
	tok := bootstrapToken(sub, sub.Table, info)
	rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff, Bootstrap: true},
		&ssp2.SubEnd{NextCursor: tok.AsOfCommitSeq, BootstrapState: tok.Encode()})
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
