package partition

import (
	"context"
	"errors"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// BackfillClientID is the clientId (and actor id) under which backfill
// commits are logged.
const BackfillClientID = "synclane-backfill"

// ErrBackfillSuperseded reports that another runner claimed the checkpoint
// (a newer owner epoch) while this one was writing; the batch wrote nothing.
var ErrBackfillSuperseded = errors.New("backfill superseded by a newer owner")

// Projection maps a source row to the target row it projects to: the
// target row id and its full row, or del when the target row must be
// deleted (src is nil when the source row is gone).
type Projection func(src *storage.RowRecord, srcID string) (id string, row ssp2.Row, del bool)

// BackfillWrite is one source row to project: given (a full pass) or, when
// Src is nil, read by SrcID inside the batch's transaction (a catch-up).
type BackfillWrite struct {
	Src   *storage.RowRecord
	SrcID string
}

// BackfillJob is one backfill batch: projection writes, the checkpoint's
// advance (compare-and-set on its owner epoch) and one logged commit, in
// one push transaction under the partition lock.
type BackfillJob struct {
	ctx context.Context
	// Checkpoint and OwnerEpoch identify the claim the batch writes under.
	Checkpoint string
	OwnerEpoch int64
	// CommitID is the batch's clientCommitId: a batch already applied (a
	// rerun after a crash) is skipped.
	CommitID string
	// Source and Target are the source and projection tables.
	Source, Target *schema.Table
	Project        Projection
	Writes         []BackfillWrite
	// Watermark and Observed are the checkpoint progress the batch records.
	Watermark, Observed int64
	completion[struct{}]
}

// NewBackfillJob returns a batch job; fill its exported fields before
// submitting it.
func NewBackfillJob(ctx context.Context) *BackfillJob {
	j := &BackfillJob{ctx: ctx}
	j.init()
	return j
}

// Wait returns the batch's outcome, or ctx's error when ctx ends first.
func (j *BackfillJob) Wait(ctx context.Context) error {
	_, err := j.wait(ctx, "")
	return err
}

// Batchable is false: a backfill batch is its own transaction.
func (*BackfillJob) Batchable() bool { return false }

// AfterQueued reports true: a backfill batch runs after the pushes queued
// before it.
func (*BackfillJob) AfterQueued() bool { return true }

func (*BackfillJob) push() *SyncJob { return nil }

func (j *BackfillJob) run(ctx context.Context, p *Partition) {
	if err := j.ctx.Err(); err != nil {
		j.Fail(err)
		return
	}
	j.answer(struct{}{}, p.backfill(ctx, j))
}

func (j *BackfillJob) requestContext() context.Context { return j.ctx }

// backfill applies one batch: open the transaction and the gate, skip a
// batch already applied, write the projections, advance the checkpoint,
// append the commit, commit.
func (p *Partition) backfill(ctx context.Context, j *BackfillJob) error {
	tx, err := p.cfg.Backend.Log.BeginPush(ctx, p.name)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	p.adoptEpoch(tx.Partition().LogEpoch)
	token, err := p.cfg.Gate.OpenTx(ctx, tx)
	if err != nil {
		return err
	}
	p.adopt(token)
	ccid := j.Checkpoint + "/" + j.CommitID
	if rec, err := tx.LookupIdempotency(ctx, BackfillClientID, ccid); err != nil || rec != nil {
		return err // already applied by an earlier attempt
	}
	codec := p.cfg.Codecs[j.Target.Name]
	changes := make([]storage.ChangeRecord, 0, len(j.Writes))
	for _, wr := range j.Writes {
		src := wr.Src
		if src == nil {
			if src, err = tx.GetRow(ctx, j.Source, wr.SrcID); err != nil {
				return err
			}
		}
		id, row, del := j.Project(src, wr.SrcID)
		existing, err := tx.GetRow(ctx, j.Target, id)
		if err != nil {
			return err
		}
		var ch storage.ChangeRecord
		var rej *syncerr.Error
		switch {
		case del && existing == nil:
			continue
		case del:
			ch, rej, err = p.deleteRow(ctx, tx, j.Target, existing)
		default:
			payload, perr := codec.Append(nil, row)
			if perr != nil {
				return syncerr.Wrap(syncerr.InvalidRequest, perr, "backfill projection row %q does not fit table %q", id, j.Target.Name)
			}
			version, versions := p.nextVersion(j.Target, existing, changedColumns(j.Target, existing, row))
			ch, rej, err = p.putRow(ctx, tx, j.Target, existing, storage.RowRecord{RowID: id, Version: version, Values: row, ColumnVersions: versions}, payload)
		}
		if err != nil {
			return err
		}
		if rej != nil {
			return rej
		}
		changes = append(changes, ch)
	}
	ok, err := tx.AdvanceCheckpoint(ctx, j.Checkpoint, j.OwnerEpoch, j.Watermark, j.Observed)
	if err != nil {
		return err
	}
	if !ok {
		return ErrBackfillSuperseded
	}
	rec, err := p.appendCommit(ctx, tx, BackfillClientID, BackfillClientID, ccid, changes, max(len(changes), 1))
	if err != nil {
		return err
	}
	announced := p.announceKeys([]storage.CommitRecord{rec})
	if err := tx.Commit(ctx); err != nil {
		p.settleKeys(announced, false)
		return err
	}
	p.settleKeys(announced, true)
	p.tail.reset() // backfill commits are not kept in the tail
	p.commitDurable(rec.Seq)
	return nil
}

// changedColumns returns the columns of row whose values differ from the
// stored row's (every column when there is none): what a backfill's
// projection wrote, whose column versions move (SPEC §2.2).
func changedColumns(t *schema.Table, existing *storage.RowRecord, row ssp2.Row) ssp2.ColumnSet {
	if existing == nil {
		return ssp2.FullColumnSet(len(t.Columns))
	}
	out := ssp2.NewColumnSet(len(t.Columns))
	for c := range t.Columns {
		if !equalValue(existing.Values[c], row[c]) {
			out.Add(c)
		}
	}
	return out
}
