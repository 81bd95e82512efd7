package partition

import (
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// CRDT columns (SPEC §5.10). A crdt column's crdtType selects a Merger from
// Config.Mergers. The rules, as the push path applies them (§5.10.3 under
// wire version 3's per-column conflicts):
//
//   - crdt columns never take part in the conflict check: an upsert
//     conflicts only through its present non-crdt columns (ContendedColumns),
//     so a patch presenting only the key and crdt columns never conflicts,
//     whatever its baseVersion (but baseVersion 0 on an existing row, a lost
//     insert race, is always a conflict).
//   - A clean apply (insert or update) stores, for each present crdt column
//     with a non-NULL value, Merge(stored, incoming) — never the raw pushed
//     bytes. A present NULL clears the column (the app nulls it, as any
//     other type); an absent column keeps its stored value. The row version
//     moves as for every applied upsert, and the column's version with it.
//   - A conflict merges nothing and writes nothing (its commit rolls back);
//     serverRow is the stored row, which holds the state merged by earlier
//     clean applies.
//   - A missing merger or a failing (erring or panicking) one rejects the
//     operation (and so rolls its commit back) with sync.crdt_merge_failed
//     and the fixed message "CRDT merger failed" (§6.7); the merger's error
//     text is logged, never sent. (The engine refuses to start with a
//     crdtType that has no merger, see CheckMergers, so a missing merger is
//     reached only by a Config built by hand.)
//   - A cached replay answers from the idempotency record and never merges
//     again; a replayed conflict answers the recorded conflict.

// Merger merges a crdt column's stored value with an incoming update.
//
// Merge must be commutative, associative and idempotent in the state it
// produces (merging the same updates in any order and any number of times
// yields equivalent state), so concurrent pushes converge whatever their
// arrival order and a re-delivered update changes nothing. stored is nil
// when the row is new or the column is NULL; the result is what the column
// stores. Merge must not retain or modify its arguments, must be safe for
// concurrent use, and must bound the memory it allocates and the size of
// its result (an error rejects the operation with sync.crdt_merge_failed).
type Merger interface {
	Merge(stored, incoming []byte) ([]byte, error)
}

// MergerFunc adapts a function to Merger.
type MergerFunc func(stored, incoming []byte) ([]byte, error)

// Merge calls f.
func (f MergerFunc) Merge(stored, incoming []byte) ([]byte, error) { return f(stored, incoming) }

// HasCRDT reports whether t has a crdt column.
func HasCRDT(t *schema.Table) bool {
	return slices.ContainsFunc(t.Columns, func(c ssp2.Column) bool { return c.Type == ssp2.TypeCRDT })
}

// CheckMergers reports the first crdt column of s (in declaration order)
// whose crdtType has no merger in mergers, as an error naming its table,
// column and crdtType; nil when every crdt column can merge. SPEC §5.10.1
// makes a crdtType the server cannot merge a server bug refused before
// serving, so hosts call it at startup (engine.New does).
func CheckMergers(s *schema.Schema, mergers map[string]Merger) error {
	for _, t := range s.Tables {
		for i, c := range t.Columns {
			if c.Type != ssp2.TypeCRDT {
				continue
			}
			if typ := t.Meta[i].CrdtType; mergers[typ] == nil {
				return fmt.Errorf("table %q column %q: crdtType %q has no registered merger", t.Name, c.Name, typ)
			}
		}
	}
	return nil
}

// MergeCRDTColumns returns row with each crdt column that present holds
// and row gives a non-NULL value replaced by the merge of its stored value
// (from stored; nil for an insert) and that incoming value, using the
// merger registered for the column's crdtType. Other columns (a present
// NULL, an absent column) are left as row has them. row is not modified;
// changed reports whether a value was merged. A missing merger or a merge
// error is returned as sync.crdt_merge_failed; cause is the merger's own
// error (for the log, never for the client).
func MergeCRDTColumns(t *schema.Table, mergers map[string]Merger, stored, row ssp2.Row, present ssp2.ColumnSet) (out ssp2.Row, changed bool, rej *syncerr.Error, cause error) {
	out = row
	for i, c := range t.Columns {
		if c.Type != ssp2.TypeCRDT || !present.Has(i) || row[i] == nil {
			continue
		}
		var prev []byte
		if stored != nil {
			prev, _ = stored[i].([]byte)
		}
		in, _ := row[i].([]byte)
		typ := t.Meta[i].CrdtType
		m := mergers[typ]
		if m == nil {
			return nil, false, syncerr.New(syncerr.CRDTMergeFailed, "no CRDT merger is registered for column %q", c.Name), nil
		}
		merged, err := safeMerge(m, prev, in)
		if err != nil {
			return nil, false, syncerr.New(syncerr.CRDTMergeFailed, "CRDT merger failed"), err
		}
		if merged == nil {
			merged = []byte{}
		}
		if !changed {
			out, changed = slices.Clone(row), true
		}
		out[i] = merged
	}
	return out, changed, nil, nil
}

// safeMerge calls m, turning a panic into an error (a host merger that
// panics fails its operation, not the partition's actor).
func safeMerge(m Merger, stored, incoming []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("merger panicked: %v", r)
		}
	}()
	return m.Merge(stored, incoming)
}

// mergeCRDT merges the present crdt columns of an upsert being applied
// (see MergeCRDTColumns). A refused merge is a rejection of operation i,
// logged with its cause.
func (p *Partition) mergeCRDT(i int32, t *schema.Table, rowID string, stored, row ssp2.Row, present ssp2.ColumnSet) (ssp2.Row, bool, *ssp2.OpResult) {
	if !HasCRDT(t) {
		return row, false, nil
	}
	merged, changed, rej, cause := MergeCRDTColumns(t, p.cfg.Mergers, stored, row, present)
	if rej != nil {
		p.log().Warn("crdt merge failed", zap.String("table", t.Name), zap.String("row_id", rowID), zap.NamedError("cause", cause), zap.String("code", string(rej.Code)))
		return nil, false, opError(i, rej)
	}
	return merged, changed, nil
}
