package partition

import (
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// CRDT columns (SPEC §5.10). A crdt column's crdtType selects a Merger from
// Config.Mergers. The rules, as the push path applies them to a table that
// has crdt columns:
//
//   - baseVersion is checked exactly as for any row (DecideUpsert): it must
//     equal the stored row version. Only the values of the crdt columns are
//     left out of that check: they merge on a clean apply. A stale
//     baseVersion is sync.version_conflict even when nothing but crdt
//     columns moved since (§5.10.3 rules 1 and 3); a crdt-only edit that
//     must never conflict is pushed without baseVersion (last-write-wins).
//   - A clean apply (insert or update) stores, for each crdt column,
//     Merge(stored, incoming) — never the raw pushed bytes — and bumps the
//     row version as every applied upsert does. A NULL incoming value
//     carries no update: the stored value is kept.
//   - A conflict merges nothing and writes nothing (its commit rolls back);
//     serverRow is the stored row, which holds the state merged by earlier
//     clean applies.
//   - A missing merger or a failing (erring or panicking) one rejects the
//     operation (and so rolls its commit back) with sync.crdt_merge_failed.
//     The merger's error text is logged, never sent. (The engine refuses to
//     start with a crdtType that has no merger, see CheckMergers, so a
//     missing merger is reached only by a Config built by hand.)
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

// MergeCRDTColumns returns row with each crdt column replaced by the merge
// of its stored value (from stored; nil for an insert) and its incoming
// value, using the merger registered for the column's crdtType. A NULL
// incoming value keeps the stored value. row is not modified. A missing
// merger or a merge error is returned as sync.crdt_merge_failed; cause is
// the merger's own error (for the log, never for the client).
func MergeCRDTColumns(t *schema.Table, mergers map[string]Merger, stored, row ssp2.Row) (out ssp2.Row, rej *syncerr.Error, cause error) {
	out = row
	cloned := false
	for i, c := range t.Columns {
		if c.Type != ssp2.TypeCRDT {
			continue
		}
		var prev []byte
		if stored != nil {
			prev, _ = stored[i].([]byte)
		}
		in, _ := row[i].([]byte)
		var merged []byte
		if row[i] == nil {
			if stored == nil || stored[i] == nil {
				continue // NULL stays NULL
			}
			merged = prev
		} else {
			typ := t.Meta[i].CrdtType
			m := mergers[typ]
			if m == nil {
				return nil, syncerr.New(syncerr.CRDTMergeFailed, "no merger is registered for crdtType %q of column %q", typ, c.Name), nil
			}
			var err error
			if merged, err = safeMerge(m, prev, in); err != nil {
				return nil, syncerr.New(syncerr.CRDTMergeFailed, "merging column %q (crdtType %q) failed", c.Name, typ), err
			}
			if merged == nil {
				merged = []byte{}
			}
		}
		if !cloned {
			out, cloned = slices.Clone(row), true
		}
		out[i] = merged
	}
	return out, nil, nil
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

// mergeCRDT merges the crdt columns of an upsert being applied (see
// MergeCRDTColumns) and returns the row to store with its encoding. A
// refused merge is a rejection of operation i, logged with its cause.
func (p *Partition) mergeCRDT(i int32, t *schema.Table, rowID string, existing *storage.RowRecord, row ssp2.Row) (ssp2.Row, []byte, *ssp2.OpResult, error) {
	var stored ssp2.Row
	if existing != nil {
		stored = existing.Values
	}
	merged, rej, cause := MergeCRDTColumns(t, p.cfg.Mergers, stored, row)
	if rej != nil {
		p.log().Warn("crdt merge failed", zap.String("table", t.Name), zap.String("row_id", rowID), zap.NamedError("cause", cause), zap.String("code", string(rej.Code)))
		return nil, nil, writeRejection(i, rej), nil
	}
	payload, err := p.cfg.Codecs[t.Name].Append(nil, merged)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("encode merged row %s/%s: %w", t.Name, rowID, err)
	}
	return merged, payload, nil, nil
}
