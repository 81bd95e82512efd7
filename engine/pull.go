package engine

import (
	"context"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// servePulls appends one section per subscription, in request order, to
// rep: revoked, reset, incremental commits or bootstrap segments.
func (w *worker) servePulls(ctx context.Context, j *syncJob, info storage.PartitionInfo, rep *Reply) error {
	if j.req.Pull == nil {
		return nil
	}
	lim := j.req.Pull.Clamped()
	for _, sub := range j.req.Subscriptions {
		if err := w.serveSubscription(ctx, j, info, lim, sub, rep); err != nil {
			return storageErr(err)
		}
	}
	return nil
}

func (w *worker) serveSubscription(ctx context.Context, j *syncJob, info storage.PartitionInfo, lim ssp2.PullHeader, sub *ssp2.Subscription, rep *Reply) error {
	t := w.e.cfg.Schema.Table(sub.Table)
	eff, revoked := partition.Effective(sub.Scopes, j.allowed, j.resolved)
	if revoked {
		rep.Frames = append(rep.Frames,
			&ssp2.SubStart{ID: sub.ID, Status: ssp2.SubRevoked, ReasonCode: string(syncerr.ScopeRevoked), EffectiveScopes: map[string][]string{}},
			&ssp2.SubEnd{NextCursor: sub.Cursor})
		return nil
	}
	switch partition.ChoosePullMode(sub.Cursor, sub.BootstrapState != nil, info.HorizonSeq, info.MaxCommitSeq) {
	case partition.Reset:
		rep.Frames = append(rep.Frames,
			&ssp2.SubStart{ID: sub.ID, Status: ssp2.SubReset, ReasonCode: string(syncerr.CursorExpired), EffectiveScopes: map[string][]string{}},
			&ssp2.SubEnd{NextCursor: sub.Cursor})
		return nil
	case partition.Bootstrap:
		return w.bootstrap(ctx, info, lim, sub, eff, rep)
	}
	q := storage.ChangeQuery{Table: t.Name, Scopes: eff, AfterSeq: sub.Cursor, UpToSeq: info.MaxCommitSeq, LimitChanges: int(lim.LimitCommits)}
	var scan storage.ChangeScan
	if w.tail.covers(q.AfterSeq, q.UpToSeq) {
		scan = w.tail.scan(q)
	} else {
		var err error
		if scan, err = w.e.cfg.Store.ScanChanges(ctx, w.partition, q); err != nil {
			return err
		}
	}
	rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff})
	tables := []string{t.Name}
	next := max(sub.Cursor, info.MaxCommitSeq)
	for _, c := range scan.Commits {
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
		rep.Frames = append(rep.Frames, &ssp2.Commit{CommitSeq: c.Seq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, Tables: tables, Changes: changes})
	}
	if scan.Truncated && len(scan.Commits) > 0 {
		next = scan.Commits[len(scan.Commits)-1].Seq
	}
	rep.Frames = append(rep.Frames, &ssp2.SubEnd{NextCursor: next})
	return nil
}

// bootstrap serves up to maxSnapshotPages pages of the table's in-scope rows
// at a pinned asOfCommitSeq, as inline SSG2 rows segments, and a resume
// token while rows remain. A token that cannot be resumed restarts silently
// with a fresh pin.
func (w *worker) bootstrap(ctx context.Context, info storage.PartitionInfo, lim ssp2.PullHeader, sub *ssp2.Subscription, eff map[string][]string, rep *Reply) error {
	t := w.e.cfg.Schema.Table(sub.Table)
	tok, ok := partition.ResumeToken(sub.BootstrapState, t.Name, info.HorizonSeq, info.MaxCommitSeq)
	if !ok {
		tok = partition.BootstrapToken{AsOfCommitSeq: info.MaxCommitSeq, Tables: []string{t.Name}}
	}
	rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff, Bootstrap: true})
	pageRows := int(lim.LimitSnapshotRows)
	done := false
	for page := 0; page < int(lim.MaxSnapshotPages) && !done; page++ {
		rows, err := w.e.cfg.Store.ScanRows(ctx, w.partition, storage.RowQuery{
			Table: t, Scopes: eff, AfterRowID: tok.RowCursor, Limit: pageRows + 1,
		})
		if err != nil {
			return err
		}
		if len(rows) <= pageRows {
			done = true
		} else {
			rows = rows[:pageRows]
		}
		sb := ssp2.NewSegmentBuilder(t.Name, w.e.cfg.Schema.Version, t.Columns)
		for i := range rows {
			if err := sb.AddRow(rows[i].Version, rows[i].Values); err != nil {
				return err
			}
		}
		rep.Frames = append(rep.Frames, &ssp2.SegmentInline{Payload: sb.Finish()})
		if len(rows) > 0 {
			last := rows[len(rows)-1].RowID
			tok.RowCursor = &last
		}
	}
	end := &ssp2.SubEnd{NextCursor: tok.AsOfCommitSeq}
	if !done {
		end.BootstrapState = tok.Encode()
	}
	rep.Frames = append(rep.Frames, end)
	return nil
}
