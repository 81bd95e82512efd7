package partition

import (
	"context"
	"errors"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// The two write helpers below are the only code that writes rows and log
// entries of a partition: pushes and backfill batches both go through them.

// putRow stores row (payload is its row-codec encoding) as the next
// version of its row (1 when existing is nil) and returns the change to
// log. A row that cannot be stored for a reason the writer must hear
// (its scope columns do not hold scope values, a table constraint) is a
// rejection; storage failures are errors.
func (p *Partition) putRow(ctx context.Context, tx storage.PushTx, t *schema.Table, rowID string, existing *storage.RowRecord, row ssp2.Row, payload []byte) (storage.ChangeRecord, *syncerr.Error, error) {
	scopes, rej := ExtractScopes(t, row)
	if rej != nil {
		return storage.ChangeRecord{}, rej, nil
	}
	var old ssp2.Row
	if existing != nil {
		old = existing.Values
	}
	if rej, err := p.syncBlobRefs(ctx, tx, t, rowID, old, row, scopes); err != nil || rej != nil {
		return storage.ChangeRecord{}, rej, err
	}
	version := int64(1)
	if existing != nil {
		version = existing.Version + 1
	}
	if err := tx.PutRow(ctx, t, storage.RowRecord{RowID: rowID, Version: version, Values: row}); err != nil {
		if errors.Is(err, storage.ErrConstraint) {
			return storage.ChangeRecord{}, syncerr.New(syncerr.ConstraintViolation, "%q row %q violates a constraint of the table", t.Name, rowID), nil
		}
		return storage.ChangeRecord{}, nil, err
	}
	return storage.ChangeRecord{Table: t.Name, RowID: rowID, Op: ssp2.OpUpsert, RowVersion: version, Scopes: scopes, Row: payload}, nil, nil
}

// deleteRow deletes the stored row existing and returns the change to log,
// its scopes taken from the stored values.
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
