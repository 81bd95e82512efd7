package backfill

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Spec describes one backfill: how rows of a source table project
// into rows of a target table, under a declared checkpoint.
type Spec struct {
	// Partition and Name identify the checkpoint (it must be declared).
	Partition string
	Name      string
	// Source is the source table; its changes decide activation coverage.
	Source string
	// Target is the projection table written through the push path.
	Target string
	// Project maps a current source row to its projection row (full row in
	// the target's column order; its primary key, rendered as a string
	// (schema.RenderKey), is the target row id).
	// ok false skips the row (and deletes a stale projection of it).
	Project func(src storage.RowRecord) (row ssp2.Row, ok bool)
	// TargetID maps a source row id to the id of its projection row, used
	// for source deletes (default: the same id).
	TargetID func(srcRowID string) string
	// BatchSize is the number of source rows per push (default 500).
	BatchSize int
	// MaxRounds bounds catch-up rounds when activation finds the source
	// changed meanwhile (default 10).
	MaxRounds int
}

// Report summarizes a backfill run.
type Report struct {
	OwnerEpoch   int64
	Watermark    int64
	ObservedRows int64
	Rounds       int
	Outcome      storage.ActivationOutcome
}

// ErrSuperseded reports that another runner claimed the checkpoint
// (a newer owner epoch) while this one was writing.
var ErrSuperseded = partition.ErrBackfillSuperseded

// Run runs a checkpoint's backfill to activation: it claims the
// checkpoint (owner epoch +1), projects every source row in batches, each
// batch one commit through the partition actor's push path with
// AdvanceCheckpoint in the same transaction, and activates at the pin it
// read. When activation finds source changes above the watermark it
// catches up from the stored watermark with the changes since (only those)
// and tries again. After a crash, running it again resumes: a completed
// pass is never repeated, since the stored watermark says what the
// projection already reflects — unless the source's history above the
// watermark was pruned meanwhile, or the crash cut a full pass short; then
// the target is cleared (logged deletes; it is not served before
// activation) and a full pass runs again, so the projection never keeps a
// row whose source changed or vanished in between.
func (s *Service) Run(ctx context.Context, spec Spec) (Report, error) {
	var rep Report
	src, dst := s.deps.Schema.Table(spec.Source), s.deps.Schema.Table(spec.Target)
	if src == nil || dst == nil || spec.Project == nil {
		return rep, fmt.Errorf("engine: backfill %s/%s: source and target must be schema tables and Project set", spec.Partition, spec.Name)
	}
	if spec.BatchSize <= 0 {
		spec.BatchSize = 500
	}
	if spec.MaxRounds <= 0 {
		spec.MaxRounds = 10
	}
	if spec.TargetID == nil {
		spec.TargetID = func(id string) string { return id }
	}
	log := s.deps.Logger.With(zap.String("partition", spec.Partition), zap.String("checkpoint", spec.Name))
	cp, err := s.checkpoints.ClaimCheckpoint(ctx, storage.CheckpointDeclaration{Partition: spec.Partition, Name: spec.Name, SchemaVersion: s.deps.Schema.Version}, s.deps.Now().UnixMilli())
	if err != nil {
		return rep, fmt.Errorf("engine: claim checkpoint %s/%s: %w", spec.Partition, spec.Name, err)
	}
	rep.OwnerEpoch, rep.Watermark, rep.ObservedRows = cp.OwnerEpoch, cp.Watermark, cp.ObservedRows
	log.Info("backfill claimed", zap.Int64("owner_epoch", cp.OwnerEpoch), zap.Int64("watermark", cp.Watermark))
	for rep.Rounds < spec.MaxRounds {
		rep.Rounds++
		info, err := s.commitLog.ReadPartition(ctx, spec.Partition)
		if err != nil {
			return rep, err
		}
		pin := info.MaxCommitSeq
		// A full pass when nothing is projected yet, or when the source's
		// changes since the watermark were pruned (replaying them would
		// silently skip the pruned ones). Over a target an earlier pass
		// wrote to, the target is cleared first: a full pass projects the
		// source rows that exist now and would leave the projection of
		// one deleted meanwhile.
		full := rep.Watermark == 0 || info.HorizonSeq > rep.Watermark
		if full && (rep.Watermark > 0 || rep.ObservedRows > 0) {
			log.Info("backfill restarts with a full pass over a cleared target", zap.Int64("watermark", rep.Watermark),
				zap.Int64("horizon", info.HorizonSeq), zap.Int64("observed_rows", rep.ObservedRows))
			if err := s.clearTarget(ctx, spec, src, dst, &rep); err != nil {
				return rep, err
			}
		}
		if full {
			err = s.full(ctx, spec, src, dst, &rep, pin)
		} else {
			err = s.since(ctx, spec, src, dst, &rep, pin)
		}
		if err != nil {
			return rep, err
		}
		out, err := s.checkpoints.ActivateCheckpoint(ctx, spec.Partition, spec.Name, rep.OwnerEpoch, rep.Watermark, []string{spec.Source}, s.deps.Now().UnixMilli())
		if err != nil {
			return rep, fmt.Errorf("engine: activate checkpoint %s/%s: %w", spec.Partition, spec.Name, err)
		}
		rep.Outcome = out
		log.Info("backfill activation", zap.String("outcome", string(out)), zap.Int64("watermark", rep.Watermark),
			zap.Int64("observed_rows", rep.ObservedRows), zap.Int("round", rep.Rounds))
		if out != storage.Stale {
			return rep, nil
		}
	}
	return rep, nil
}

// full projects every current source row; the watermark moves to
// pin with the last batch (the projection reflects every source commit up
// to pin only once the pass is complete).
func (s *Service) full(ctx context.Context, spec Spec, src, dst *schema.Table, rep *Report, pin int64) error {
	var after *string
	for batch := 0; ; batch++ {
		rows, err := s.rows.ScanRows(ctx, spec.Partition, storage.RowQuery{Table: src, Scopes: map[string][]string{}, AfterRowID: after, Limit: spec.BatchSize + 1})
		if err != nil {
			return err
		}
		last := len(rows) <= spec.BatchSize
		if !last {
			rows = rows[:spec.BatchSize]
		}
		writes := make([]partition.BackfillWrite, len(rows))
		for i := range rows {
			writes[i] = partition.BackfillWrite{Src: &rows[i], SrcID: rows[i].RowID}
		}
		wm := rep.Watermark
		if last {
			wm = pin
		}
		ccid := fmt.Sprintf("%d:full:%d:%d", rep.OwnerEpoch, pin, batch)
		if err := s.commit(ctx, spec, src, dst, nil, rep.OwnerEpoch, ccid, writes, wm, rep.ObservedRows+int64(len(rows))); err != nil {
			return err
		}
		rep.Watermark, rep.ObservedRows = wm, rep.ObservedRows+int64(len(rows))
		if len(rows) > 0 {
			id := rows[len(rows)-1].RowID
			after = &id
		}
		if last {
			return nil
		}
	}
}

// clearTarget deletes every row of the projection table, in batches
// through the partition's push path (so the deletes are logged), keeping
// the checkpoint's watermark. The target is not served before its
// checkpoint activates, so no client sees it emptied.
func (s *Service) clearTarget(ctx context.Context, spec Spec, src, dst *schema.Table, rep *Report) error {
	drop := func(_ *storage.RowRecord, id string) (string, ssp2.Row, bool) { return id, nil, true }
	var after *string
	for batch := 0; ; batch++ {
		rows, err := s.rows.ScanRows(ctx, spec.Partition, storage.RowQuery{Table: dst, Scopes: map[string][]string{}, AfterRowID: after, Limit: spec.BatchSize})
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		writes := make([]partition.BackfillWrite, len(rows))
		for i := range rows {
			writes[i] = partition.BackfillWrite{SrcID: rows[i].RowID} // the target row's id, for drop
		}
		ccid := fmt.Sprintf("%d:clear:%d", rep.OwnerEpoch, batch)
		if err := s.commit(ctx, spec, src, dst, drop, rep.OwnerEpoch, ccid, writes, rep.Watermark, rep.ObservedRows); err != nil {
			return err
		}
		id := rows[len(rows)-1].RowID
		after = &id
	}
}

// since replays only the source changes in (watermark, pin].
func (s *Service) since(ctx context.Context, spec Spec, src, dst *schema.Table, rep *Report, pin int64) error {
	if pin <= rep.Watermark {
		return nil
	}
	scan, err := s.commitLog.ScanChanges(ctx, spec.Partition, storage.ChangeQuery{Table: src.Name, Scopes: map[string][]string{}, AfterSeq: rep.Watermark, UpToSeq: pin, LimitChanges: 1 << 30})
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var order []string // source rows changed since the watermark
	for _, c := range scan.Commits {
		for _, ch := range c.Changes {
			if !seen[ch.RowID] {
				seen[ch.RowID] = true
				order = append(order, ch.RowID)
			}
		}
	}
	writes := make([]partition.BackfillWrite, len(order))
	for i, id := range order {
		writes[i] = partition.BackfillWrite{SrcID: id} // read and projected inside the transaction
	}
	ccid := fmt.Sprintf("%d:since:%d:%d", rep.OwnerEpoch, rep.Watermark, pin)
	if err := s.commit(ctx, spec, src, dst, nil, rep.OwnerEpoch, ccid, writes, pin, rep.ObservedRows+int64(len(order))); err != nil {
		return err
	}
	rep.Watermark, rep.ObservedRows = pin, rep.ObservedRows+int64(len(order))
	return nil
}

// projection returns the partition-side projection of spec: the target
// row (and its id) a source row projects to, or a delete.
func projection(spec *Spec, dst *schema.Table) partition.Projection {
	return func(src *storage.RowRecord, srcID string) (string, ssp2.Row, bool) {
		if src == nil {
			return spec.TargetID(srcID), nil, true
		}
		row, ok := spec.Project(*src)
		if !ok {
			return spec.TargetID(srcID), nil, true
		}
		id, _ := dst.RowID(row) // a key that renders none fails the row's encoding
		return id, row, false
	}
}

// commit writes one batch through the partition's actor.
func (s *Service) commit(ctx context.Context, spec Spec, src, dst *schema.Table, proj partition.Projection, epoch int64, ccid string, writes []partition.BackfillWrite, watermark, observed int64) error {
	if proj == nil {
		proj = projection(&spec, dst)
	}
	j := partition.NewBackfillJob(ctx)
	j.Checkpoint, j.OwnerEpoch, j.CommitID = spec.Name, epoch, ccid
	j.Source, j.Target, j.Project, j.Writes = src, dst, proj, writes
	j.Watermark, j.Observed = watermark, observed
	start := time.Now()
	s.deps.Actors.Submit(spec.Partition, j)
	err := j.Wait(ctx)
	s.deps.Logger.Debug("backfill batch", zap.String("checkpoint", spec.Name), zap.Int("rows", len(writes)),
		zap.Int64("watermark", watermark), zap.Duration("took", time.Since(start)), zap.Error(err))
	return err
}
