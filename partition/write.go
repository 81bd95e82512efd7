package partition

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// The write helpers below are the only code that writes rows, tombstones
// and log entries of a partition: pushes and backfill batches both go
// through them.

// putRow stores rec (payload is the full-row encoding of rec.Values; rec
// carries the new version and column versions) over existing (nil for an
// insert) and returns the change to log. A row that cannot be stored for a
// reason the writer must hear (its scope columns do not hold scope values,
// a table constraint) is a rejection; storage failures are errors.
func (p *Partition) putRow(ctx context.Context, tx storage.PushTx, t *schema.Table, existing *storage.RowRecord, rec storage.RowRecord, payload []byte) (storage.ChangeRecord, *syncerr.Error, error) {
	scopes, rej := ExtractScopes(t, rec.Values)
	if rej != nil {
		return storage.ChangeRecord{}, rej, nil
	}
	var old ssp2.Row
	if existing != nil {
		old = existing.Values
	}
	if rej, err := p.syncBlobRefs(ctx, tx, t, rec.RowID, old, rec.Values, scopes); err != nil || rej != nil {
		return storage.ChangeRecord{}, rej, err
	}
	if err := tx.PutRow(ctx, t, rec); err != nil {
		if errors.Is(err, storage.ErrConstraint) {
			return storage.ChangeRecord{}, syncerr.New(syncerr.ConstraintViolation, "%q row %q violates a constraint of the table", t.Name, rec.RowID), nil
		}
		return storage.ChangeRecord{}, nil, err
	}
	return storage.ChangeRecord{Table: t.Name, RowID: rec.RowID, Op: ssp2.OpUpsert, RowVersion: rec.Version, Scopes: scopes, Row: payload}, nil, nil
}

// deleteRow deletes the stored row existing, leaving its tombstone at the
// seq of the commit being built (SPEC §2.2), and returns the change to
// log, its scopes taken from the stored values.
func (p *Partition) deleteRow(ctx context.Context, tx storage.PushTx, t *schema.Table, existing *storage.RowRecord) (storage.ChangeRecord, *syncerr.Error, error) {
	scopes, rej := ExtractScopes(t, existing.Values)
	if rej != nil {
		return storage.ChangeRecord{}, rej, nil
	}
	if _, err := p.syncBlobRefs(ctx, tx, t, existing.RowID, existing.Values, nil, scopes); err != nil {
		return storage.ChangeRecord{}, nil, err
	}
	if err := tx.DeleteRow(ctx, t, existing.RowID, tx.Partition().MaxCommitSeq+1); err != nil {
		return storage.ChangeRecord{}, nil, err
	}
	return storage.ChangeRecord{Table: t.Name, RowID: existing.RowID, Op: ssp2.OpDelete, Scopes: scopes}, nil, nil
}

// columnVersions returns the version of every column of a stored row (SPEC
// §2.2; a row stored before column versions reads as every column at its
// server_version). Versions that do not decode (a damaged store) are logged
// and read that same conservative way: every column as recent as the row,
// so a versioned patch conflicts rather than overwrites.
func (p *Partition) columnVersions(t *schema.Table, rec *storage.RowRecord) []int64 {
	v, err := rec.ColumnVersions.Decode(len(t.Columns), rec.Version)
	if err != nil {
		p.log().Error("stored column versions do not decode; reading every column at the row's version",
			zap.String("table", t.Name), zap.String("row_id", rec.RowID), zap.Error(err))
		v, _ = storage.ColumnVersions(nil).Decode(len(t.Columns), rec.Version)
	}
	return v
}

// nextVersion returns the version and column versions of a row written
// over existing (nil: an insert, every column at 1) whose columns in
// written (never the primary key) take the new version.
func (p *Partition) nextVersion(t *schema.Table, existing *storage.RowRecord, written ssp2.ColumnSet) (int64, storage.ColumnVersions) {
	if existing == nil {
		return 1, storage.InsertedColumnVersions()
	}
	versions := p.columnVersions(t, existing)
	next := existing.Version + 1
	for c := range versions {
		if c != t.PK && written.Has(c) {
			versions[c] = next
		}
	}
	return next, storage.EncodeColumnVersions(versions, next)
}

// appendCommit appends the partition's next commit with changes and stores
// its applied outcome (ops results) under (clientID, clientCommitID), both
// in tx, and returns the appended record.
func (p *Partition) appendCommit(ctx context.Context, tx storage.PushTx, actorID, clientID, clientCommitID string, changes []storage.ChangeRecord, ops int) (storage.CommitRecord, error) {
	seq := tx.Partition().MaxCommitSeq + 1
	rec := storage.CommitRecord{
		Seq: seq, CreatedAtMs: p.cfg.Now().UnixMilli(), ActorID: actorID,
		ClientID: clientID, ClientCommitID: clientCommitID, Changes: changes,
	}
	if err := tx.AppendCommit(ctx, rec); err != nil {
		return rec, err
	}
	err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{
		ClientID: clientID, ClientCommitID: clientCommitID,
		Status: ssp2.CommitApplied, CommitSeq: seq, Result: encodeApplied(ops),
	})
	return rec, err
}
