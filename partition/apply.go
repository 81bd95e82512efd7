package partition

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// One operation of a push, under wire version 3's write rules (SPEC §2.2,
// §6.1-§6.3), whatever the request's wire version: an older request's
// payload is a full row, which is a sparse row presenting every column.
//
// An upsert against an existing row runs, in the SPEC's order:
// authorization against the stored row (§3.4 step 2); the scope-column
// rule (a present scope column may not change: sync.invalid_request; equal
// is a no-op); baseVersion above server_version (sync.invalid_request);
// the conflict check over the present non-crdt, non-key columns' versions
// (DecideUpdate, ContendedColumns); then the apply: present columns laid
// over the stored row, present crdt columns merged, blob references
// checked, the row validator on the merged row, the full row re-encoded
// and stored at server_version+1 with the present non-key columns'
// versions moved to it.
//
// An upsert of an absent row follows DecideInsert (baseVersion, the row's
// tombstone, whether every column is present); an insert is authorized on
// its own values, stores every column at version 1 and clears the
// tombstone. A delete of an existing row is authorized against it,
// validated, and leaves a tombstone at the commit's seq; a delete of an
// absent row is applied and changes nothing.

// applyOp applies one operation of a commit. It returns a rejection record
// (the commit is then rolled back) or a storage error.
func (p *Partition) applyOp(ctx context.Context, tx storage.PushTx, j *SyncJob, cs *commitState, i int32, op *ssp2.Operation, changes *[]storage.ChangeRecord) (*ssp2.OpResult, error) {
	t := p.cfg.Schema.Table(op.Table)
	if t == nil {
		return opError(i, syncerr.New(syncerr.UnknownTable, "operation %d names unknown table %q", i, op.Table)), nil
	}
	existing, err := tx.GetRow(ctx, t, op.RowID)
	if err != nil {
		return nil, err
	}
	if op.Op == ssp2.OpDelete {
		return p.applyDelete(ctx, tx, j, cs, i, t, op.RowID, existing, changes)
	}
	sr, rej := p.decodePayload(j.req.WireVersion, i, t, op)
	if rej != nil {
		return rej, nil
	}
	if existing != nil {
		return p.applyUpdate(ctx, tx, j, cs, i, t, op, sr, existing, changes)
	}
	return p.applyInsert(ctx, tx, j, cs, i, t, op, sr, changes)
}

// payload is a decoded upsert payload: its sparse row and, when it
// presents every column, its full-row encoding (aliasing the request).
type payload struct {
	ssp2.SparseRow
	full []byte
}

// decodePayload decodes an upsert's payload: a sparse row at wire version
// 3, a full row (every column present) before. Its values must be
// storable and its primary key, rendered as a string (schema.RenderKey:
// an integer in decimal, a boolean as true/false, json as its raw text),
// must be the operation's rowId.
func (p *Partition) decodePayload(wire uint16, i int32, t *schema.Table, op *ssp2.Operation) (payload, *ssp2.OpResult) {
	codec := p.cfg.Codecs[t.Name]
	n := len(t.Columns)
	var pl payload
	var err error
	if wire >= ssp2.WireV3 {
		if pl.SparseRow, err = codec.DecodeSparse(op.Payload, t.PK); err == nil && pl.Present.Full(n) {
			// A full sparse row is its presence bitmap, then the full-row
			// encoding (SPEC §2.4).
			pl.full = op.Payload[(n+7)/8:]
		}
	} else {
		pl.Row, err = codec.Decode(op.Payload)
		pl.Present, pl.full = ssp2.FullColumnSet(n), op.Payload
	}
	if err != nil {
		return pl, opError(i, syncerr.New(syncerr.InvalidRequest, "operation %d: payload is not a valid %q row: %s", i, t.Name, syncerr.As(err).Message))
	}
	if rej := checkRowStrings(t.Columns, pl.Row); rej != nil {
		return pl, writeRejection(i, rej)
	}
	if pk, ok := t.RowID(pl.Row); !ok || pk != op.RowID {
		return pl, opError(i, syncerr.New(syncerr.InvalidRequest, "operation %d: rowId %q differs from the payload's primary key %q", i, op.RowID, pk))
	}
	return pl, nil
}

// applyDelete deletes an existing row (authorized against it, validated)
// and leaves its tombstone; an absent row is applied and changes nothing.
func (p *Partition) applyDelete(ctx context.Context, tx storage.PushTx, j *SyncJob, cs *commitState, i int32, t *schema.Table, rowID string, existing *storage.RowRecord, changes *[]storage.ChangeRecord) (*ssp2.OpResult, error) {
	if existing == nil {
		cs.stage(StagedOp{OpIndex: i, Origin: i, Table: t.Name, Op: ssp2.OpDelete, RowID: rowID})
		return nil, nil
	}
	if aerr := AuthorizeRow(t, existing.Values, j.allowed, j.resolved); aerr != nil {
		return opError(i, aerr), nil
	}
	if rej, err := p.validateRow(ctx, cs, &RowWrite{OpIndex: i, Origin: i, Table: t, Op: ssp2.OpDelete, RowID: rowID, Stored: existing}); err != nil || rej != nil {
		return cs.rejected(rej), err
	}
	ch, rej, err := p.deleteRow(ctx, tx, t, existing)
	if err != nil || rej != nil {
		return writeRejection(i, rej), err
	}
	*changes = append(*changes, ch)
	cs.stage(StagedOp{OpIndex: i, Origin: i, Table: t.Name, Op: ssp2.OpDelete, RowID: rowID, Stored: existing})
	return nil, nil
}

// applyUpdate applies an upsert to an existing row.
func (p *Partition) applyUpdate(ctx context.Context, tx storage.PushTx, j *SyncJob, cs *commitState, i int32, t *schema.Table, op *ssp2.Operation, sr payload, existing *storage.RowRecord, changes *[]storage.ChangeRecord) (*ssp2.OpResult, error) {
	if aerr := AuthorizeRow(t, existing.Values, j.allowed, j.resolved); aerr != nil {
		return opError(i, aerr), nil
	}
	for _, sv := range t.Scopes {
		if sr.Present.Has(sv.Column) && !equalValue(sr.Row[sv.Column], existing.Values[sv.Column]) {
			return opError(i, syncerr.New(syncerr.InvalidRequest, "operation %d: scope column %q may not change on update (SPEC §3.4)", i, t.Columns[sv.Column].Name)), nil
		}
	}
	var contended ssp2.ColumnSet
	if op.BaseVersion != nil {
		contended = ContendedColumns(t, sr.Present, p.columnVersions(t, existing), *op.BaseVersion)
	}
	switch v := DecideUpdate(existing.Version, op.BaseVersion, contended); v {
	case Conflict:
		serverRow, err := p.cfg.Codecs[t.Name].Append(nil, existing.Values)
		if err != nil {
			return nil, fmt.Errorf("encode stored row %s/%s: %w", t.Name, op.RowID, err)
		}
		return &ssp2.OpResult{OpIndex: i, Status: ssp2.OpConflict, Code: string(syncerr.VersionConflict), Message: ConflictMessage,
			ServerVersion: existing.Version, ServerRow: serverRow, ConflictColumns: contended}, nil
	case ApplyUpdate:
	default:
		return opError(i, VerdictError(v, i, existing.Version, op.BaseVersion)), nil
	}
	row, merged, rej := p.mergeCRDT(i, t, op.RowID, existing.Values, overlay(existing.Values, sr.SparseRow), sr.Present)
	if rej != nil {
		return rej, nil
	}
	if rej, err := p.checkRowBlobs(ctx, tx, t, op.RowID, existing.Values, row); err != nil || rej != nil {
		return writeRejection(i, rej), err
	}
	if rej, err := p.validateRow(ctx, cs, &RowWrite{OpIndex: i, Origin: i, Table: t, Op: ssp2.OpUpsert, RowID: op.RowID, Row: row, Present: sr.Present, Stored: existing}); err != nil || rej != nil {
		return cs.rejected(rej), err
	}
	enc, err := p.encodeRow(t, sr.full, merged, row)
	if err != nil {
		return nil, err
	}
	version, versions := p.nextVersion(t, existing, sr.Present)
	rec := storage.RowRecord{RowID: op.RowID, Version: version, Values: row, ColumnVersions: versions}
	ch, rej2, err := p.putRow(ctx, tx, t, existing, rec, enc)
	if err != nil || rej2 != nil {
		return writeRejection(i, rej2), err
	}
	*changes = append(*changes, ch)
	cs.stage(StagedOp{OpIndex: i, Origin: i, Table: t.Name, Op: ssp2.OpUpsert, RowID: op.RowID, Row: row, Present: sr.Present, Stored: existing})
	return nil, nil
}

// applyInsert applies an upsert to an absent row (SPEC §6.2's absent-row
// table).
func (p *Partition) applyInsert(ctx context.Context, tx storage.PushTx, j *SyncJob, cs *commitState, i int32, t *schema.Table, op *ssp2.Operation, sr payload, changes *[]storage.ChangeRecord) (*ssp2.OpResult, error) {
	var tomb int64
	if op.BaseVersion != nil && *op.BaseVersion != 0 {
		// The payload is authorized first, so an actor without the scope
		// does not learn that the row is absent (SPEC §6.2).
		if aerr := AuthorizeRow(t, sr.Row, j.allowed, j.resolved); aerr != nil {
			return opError(i, aerr), nil
		}
	} else {
		var err error
		if tomb, err = tx.Tombstone(ctx, t, op.RowID); err != nil {
			return nil, err
		}
	}
	full := sr.Present.Full(len(t.Columns))
	if v := DecideInsert(op.BaseVersion, tomb, tx.Partition().HorizonSeq, full); v != ApplyInsert {
		return opError(i, VerdictError(v, i, 0, op.BaseVersion)), nil
	}
	if aerr := AuthorizeRow(t, sr.Row, j.allowed, j.resolved); aerr != nil {
		return opError(i, aerr), nil
	}
	row, merged, rej := p.mergeCRDT(i, t, op.RowID, nil, sr.Row, sr.Present)
	if rej != nil {
		return rej, nil
	}
	if rej, err := p.checkRowBlobs(ctx, tx, t, op.RowID, nil, row); err != nil || rej != nil {
		return writeRejection(i, rej), err
	}
	if rej, err := p.validateRow(ctx, cs, &RowWrite{OpIndex: i, Origin: i, Table: t, Op: ssp2.OpUpsert, RowID: op.RowID, Row: row, Present: sr.Present}); err != nil || rej != nil {
		return cs.rejected(rej), err
	}
	if tomb != 0 {
		if err := tx.ClearTombstone(ctx, t, op.RowID); err != nil {
			return nil, err
		}
	}
	enc, err := p.encodeRow(t, sr.full, merged, row)
	if err != nil {
		return nil, err
	}
	version, versions := p.nextVersion(t, nil, sr.Present)
	rec := storage.RowRecord{RowID: op.RowID, Version: version, Values: row, ColumnVersions: versions}
	ch, rej2, err := p.putRow(ctx, tx, t, nil, rec, enc)
	if err != nil || rej2 != nil {
		return writeRejection(i, rej2), err
	}
	*changes = append(*changes, ch)
	cs.stage(StagedOp{OpIndex: i, Origin: i, Table: t.Name, Op: ssp2.OpUpsert, RowID: op.RowID, Row: row, Present: sr.Present})
	return nil, nil
}

// overlay returns the stored row with the present columns of sr laid over
// it (a new row; neither input is modified).
func overlay(stored ssp2.Row, sr ssp2.SparseRow) ssp2.Row {
	row := make(ssp2.Row, len(stored))
	for c := range row {
		if sr.Present.Has(c) {
			row[c] = sr.Row[c]
		} else {
			row[c] = stored[c]
		}
	}
	return row
}

// encodeRow returns the full-row encoding of row, the row an upsert
// stores: full, the payload's own full-row bytes, when the operation
// presented every column and nothing was merged into them.
func (p *Partition) encodeRow(t *schema.Table, full []byte, merged bool, row ssp2.Row) ([]byte, error) {
	if full != nil && !merged {
		return full, nil
	}
	b, err := p.cfg.Codecs[t.Name].Append(nil, row)
	if err != nil {
		return nil, fmt.Errorf("encode row %s/%v: %w", t.Name, row[t.PK], err)
	}
	return b, nil
}
