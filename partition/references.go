package partition

import (
	"context"
	"encoding/json"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Declared references (SPEC §6.11), enforced once per commit over its
// candidate state: after every client operation is staged, before the
// whole-commit validator (§6.8). In order:
//
//  1. A staged client upsert whose present, non-null reference column names
//     a parent row that does not exist (as the commit leaves it) is
//     sync.reference_violation, reason missing_parent, the column in
//     fieldPaths, references {parent: table, row: id}.
//  2. Each staged client delete of an existing row, and then each row a
//     CASCADE deletes, is followed to its children (through the reference
//     column's index, storage.PushTx.ScanByColumn, as the commit leaves
//     them): RESTRICT with a child left refuses the delete
//     (restricted_delete, references {child: table}); CASCADE appends a
//     delete of each child (which leaves a tombstone and is followed to
//     its own children); SET NULL appends an upsert of each child
//     presenting only the reference column, set to NULL (only that
//     column's version moves). A row is appended to at most once per
//     commit (a visited set: cycles end). A commit that deletes a parent
//     and all its children passes RESTRICT: they are gone by then.
//  3. Appended operations run the table's row validator, join the
//     operation list the whole-commit validator and reactions see (with
//     OpIndex past the client's operations and Origin the client delete
//     they come from), and emit ordinary changes with the child's stored
//     scopes, so realtime deltas carry them. More than
//     Config.MaxCascadeOperations of them refuses the commit
//     (cascade_limit).
//
// Every refusal, a row validator's on an appended operation included, is
// attributed to the client operation it comes from, with a fixed message
// and its reason in PUSH_RESULT_DETAILS; the commit rolls back whole.
// Appended operations are not authorized against the actor's scopes (as
// in the reference server): the client delete they follow was, and a
// reference joins tables of the same scope patterns.
//
// Concurrency: a partition's pushes are applied one commit at a time under
// its write lock (its actor, and the storage lock across processes), so a
// RESTRICT delete and a concurrent child insert are never interleaved:
// whichever commits first is seen whole by the other, which then refuses
// (restricted_delete, or missing_parent for the child).

// DefaultMaxCascadeOperations is the default cap of operations a commit's
// references may append (the reference server's default).
const DefaultMaxCascadeOperations = 1000

// Reasons of sync.reference_violation (PUSH_RESULT_DETAILS reason).
const (
	ReasonMissingParent    = "missing_parent"
	ReasonRestrictedDelete = "restricted_delete"
	ReasonCascadeLimit     = "cascade_limit"
)

// The fixed messages of sync.reference_violation.
const (
	msgMissingParent    = "declared reference names an absent parent row (§6.11)"
	msgRestrictedDelete = "delete is blocked by a declared reference with ON DELETE RESTRICT (§6.11)"
	msgCascadeLimit     = "declared-reference cascade exceeded the per-commit operation cap (§6.11)"
)

// maxDetailValueBytes bounds a references value in PUSH_RESULT_DETAILS
// (SPEC §6.3.1); a longer parent row id is left out.
const maxDetailValueBytes = 256

// refItem is a deleted row whose children are to be followed.
type refItem struct {
	t      *schema.Table
	row    *storage.RowRecord
	origin int32
}

// enforceReferences runs the reference rules over the commit's candidate
// state (see above), appending operations and their changes. n is the
// number of client operations. It returns a refusal or a storage error.
func (p *Partition) enforceReferences(ctx context.Context, tx storage.PushTx, cs *commitState, n int, changes *[]storage.ChangeRecord) (*hookRejection, error) {
	if !p.cfg.hasReferences {
		return nil, nil
	}
	var deleted []refItem
	for k := range cs.ops {
		op := cs.ops[k]
		t := p.cfg.Schema.Table(op.Table)
		switch {
		case op.Op == ssp2.OpUpsert:
			if rej, err := p.checkParents(ctx, tx, t, op); rej != nil || err != nil {
				return rej, err
			}
		case op.Stored != nil && len(t.ReferencedBy) > 0:
			// A row the commit deleted and wrote again has its children.
			if again, err := tx.GetRow(ctx, t, op.RowID); err != nil || again != nil {
				if err != nil {
					return nil, err
				}
				continue
			}
			deleted = append(deleted, refItem{t: t, row: op.Stored, origin: op.OpIndex})
		}
	}
	visited := map[[2]string]bool{}
	for _, d := range deleted {
		visited[[2]string{d.t.Name, d.row.RowID}] = true
	}
	for len(deleted) > 0 {
		item := deleted[0]
		deleted = deleted[1:]
		for _, cr := range item.t.ReferencedBy {
			more, rej, err := p.followChildren(ctx, tx, cs, n, item, cr, visited, changes)
			if rej != nil || err != nil {
				return rej, err
			}
			deleted = append(deleted, more...)
		}
	}
	return nil, nil
}

// checkParents refuses a staged upsert whose present, non-null reference
// column names an absent parent row.
func (p *Partition) checkParents(ctx context.Context, tx storage.PushTx, t *schema.Table, op StagedOp) (*hookRejection, error) {
	for _, ref := range t.References {
		v := op.Row[ref.Column]
		if v == nil || !op.Present.Has(ref.Column) {
			continue
		}
		id, ok := schema.RenderKey(ref.Parent.Columns[ref.Parent.PK], v)
		if ok {
			parent, err := tx.GetRow(ctx, ref.Parent, id)
			if err != nil {
				return nil, err
			}
			if parent != nil {
				continue
			}
		}
		refs := map[string]string{"parent": ref.Parent.Name}
		if ok && detailValueOK(id) {
			refs["row"] = id
		}
		return referenceRejection(op.Origin, msgMissingParent, &RejectionDetails{Reason: ReasonMissingParent,
			FieldPaths: []string{t.Columns[ref.Column].Name}, References: refs}), nil
	}
	return nil, nil
}

// followChildren applies one reference cr of item's deleted row to the
// row's children; it returns the children it deleted (to follow in turn).
func (p *Partition) followChildren(ctx context.Context, tx storage.PushTx, cs *commitState, n int, item refItem, cr schema.ChildReference,
	visited map[[2]string]bool, changes *[]storage.ChangeRecord) ([]refItem, *hookRejection, error) {
	child := cr.Child
	q := storage.ColumnQuery{Table: child, Column: cr.Column, Value: item.row.Values[item.t.PK], Limit: storage.MaxColumnQueryLimit}
	var more []refItem
	for {
		page, err := tx.ScanByColumn(ctx, q)
		if err != nil {
			return nil, nil, err
		}
		if len(page) > 0 && cr.OnDelete == schema.Restrict {
			return nil, referenceRejection(item.origin, msgRestrictedDelete, &RejectionDetails{Reason: ReasonRestrictedDelete,
				References: map[string]string{"child": child.Name}}), nil
		}
		for k := range page {
			row := &page[k]
			key := [2]string{child.Name, row.RowID}
			if visited[key] {
				continue
			}
			visited[key] = true
			if len(cs.appended) >= p.cfg.MaxCascadeOperations {
				return nil, referenceRejection(item.origin, msgCascadeLimit, &RejectionDetails{Reason: ReasonCascadeLimit}), nil
			}
			op := StagedOp{OpIndex: int32(n + len(cs.appended)), Origin: item.origin, Table: child.Name, RowID: row.RowID, Stored: row}
			if cr.OnDelete == schema.Cascade {
				op.Op = ssp2.OpDelete
				if rej, err := p.validateRow(ctx, cs, &RowWrite{OpIndex: op.OpIndex, Origin: op.Origin, Table: child, Op: op.Op, RowID: row.RowID, Stored: row}); err != nil || rej != nil {
					return nil, rej, err
				}
				ch, rej, err := p.deleteRow(ctx, tx, child, row)
				if err != nil || rej != nil {
					return nil, rejectionOf(item.origin, rej), err
				}
				*changes = append(*changes, ch)
				more = append(more, refItem{t: child, row: row, origin: item.origin})
			} else { // SET NULL
				op.Op = ssp2.OpUpsert
				op.Row = append(ssp2.Row(nil), row.Values...)
				op.Row[cr.Column] = nil
				op.Present = ssp2.NewColumnSet(len(child.Columns))
				op.Present.Add(child.PK)
				op.Present.Add(cr.Column)
				if rej, err := p.validateRow(ctx, cs, &RowWrite{OpIndex: op.OpIndex, Origin: op.Origin, Table: child, Op: op.Op, RowID: row.RowID,
					Row: op.Row, Present: op.Present, Stored: row}); err != nil || rej != nil {
					return nil, rej, err
				}
				enc, err := p.encodeRow(child, nil, true, op.Row)
				if err != nil {
					return nil, nil, err
				}
				version, versions := p.nextVersion(child, row, op.Present)
				ch, rej, err := p.putRow(ctx, tx, child, row, storage.RowRecord{RowID: row.RowID, Version: version, Values: op.Row, ColumnVersions: versions}, enc)
				if err != nil || rej != nil {
					return nil, rejectionOf(item.origin, rej), err
				}
				*changes = append(*changes, ch)
			}
			cs.stage(op)
			cs.appended = append(cs.appended, item.origin)
		}
		if len(page) < q.Limit {
			return more, nil, nil
		}
		last := page[len(page)-1].RowID
		q.AfterRowID = &last
	}
}

// referenceRejection is a sync.reference_violation of client operation
// origin with details d.
func referenceRejection(origin int32, msg string, d *RejectionDetails) *hookRejection {
	b, _ := json.Marshal(d) // strings and string slices: cannot fail
	details := string(b)
	if ssp2.CheckDetailsJSON(details) != nil {
		// A value the details cannot carry (a parent id with control
		// characters): the reason alone still names the fault.
		b, _ = json.Marshal(&RejectionDetails{Reason: d.Reason, FieldPaths: d.FieldPaths})
		details = string(b)
	}
	return &hookRejection{rec: opError(origin, syncerr.New(syncerr.ReferenceViolation, "%s", msg)), details: details}
}

// rejectionOf renders a write helper's refusal of an appended operation as
// a refusal of its origin (nil when rej is nil).
func rejectionOf(origin int32, rej *syncerr.Error) *hookRejection {
	if rej == nil {
		return nil
	}
	return &hookRejection{rec: writeRejection(origin, rej)}
}

// detailValueOK reports whether s fits a references value of
// PUSH_RESULT_DETAILS (at most 256 bytes).
func detailValueOK(s string) bool { return len(s) <= maxDetailValueBytes }
