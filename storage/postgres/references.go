package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
)

// Declared references (SPEC §6.11): every reference column has an index
// on (partition_id, column, primary key), named
// schema.Table.ReferenceIndexIdent, by which PushTx.ScanByColumn finds a
// parent's children. The primary key ends the index (as it ends the scope
// columns' indexes) so a page of children in primary-key order after
// AfterRowID is one range of it, read in order and stopped at the limit:
// no sort of all the parent's children, and no walk of the primary-key
// index filtering on the column, whatever the statistics say
// (TestScanByColumnPlan). A reference of the primary key itself gets
// (partition_id, pk).

// referenceIndexes returns index name -> index of the table's reference
// columns, for wantedIndexes. They have no legacy name.
func (ts *tableSQL) referenceIndexes() map[string]wantedIndex {
	out := map[string]wantedIndex{}
	for _, r := range ts.t.References {
		cols := []string{"partition_id", ts.cols[r.Column]}
		if r.Column != ts.t.PK {
			cols = append(cols, ts.cols[ts.t.PK])
		}
		name := ts.t.ReferenceIndexIdent(r.Column)
		out[name] = wantedIndex{create: fmt.Sprintf("CREATE INDEX %s ON %s (%s)",
			pgx.Identifier{name}.Sanitize(), ts.ident, strings.Join(cols, ", "))}
	}
	return out
}

// textOf returns the text PostgreSQL stores for a string, blob_ref or json
// value.
func textOf(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.RawMessage:
		return string(x), true
	}
	return "", false
}

// columnScanSQL is ScanByColumn's statement on column col: $1 partition,
// $2 value, ($3 the key to start after, storage.AfterKey,) then the
// limit. It has ScanRows' order (pkOrder: the key's own order, byte order
// for text keys) and selects the push transaction's columns
// (txSelectList).
func (ts *tableSQL) columnScanSQL(col int, after bool) string {
	pk := ts.cols[ts.t.PK]
	var sb strings.Builder
	fmt.Fprintf(&sb, "SELECT %s FROM %s WHERE partition_id = $1 AND %s = $2", ts.txSelectList, ts.ident, ts.cols[col])
	n := 3
	if after {
		fmt.Fprintf(&sb, ` AND %s > $3%s`, pk, pkCast(ts))
		n++
	}
	fmt.Fprintf(&sb, ` ORDER BY %s LIMIT $%d`, pkOrder(ts), n)
	return sb.String()
}

// ScanByColumn answers storage.PushTx: the statement runs on the
// transaction's connection, so it sees the transaction's own row writes
// (row writes are never deferred; only the log is). A query
// ColumnQuery.Check refuses is refused before anything is sent, and a
// text value that is not storage.Storable matches nothing stored and is
// not sent either (PostgreSQL would fail the statement, and with it the
// transaction).
func (tx *pushTx) ScanByColumn(ctx context.Context, q storage.ColumnQuery) ([]storage.RowRecord, error) {
	if err := tx.check(); err != nil {
		return nil, err
	}
	if q.Table == nil {
		return nil, fmt.Errorf("postgres: ScanByColumn: nil table")
	}
	ts, err := tx.s.table(q.Table.Name)
	if err != nil {
		return nil, err
	}
	if err := q.Check(ts.t); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	col := ts.t.Columns[q.Column]
	if text, ok := textOf(q.Value); ok && !storage.Storable(text) {
		return nil, nil
	}
	v, err := encodeValue(col, q.Value)
	if err != nil {
		return nil, fmt.Errorf("postgres: ScanByColumn: %w", err)
	}
	args := []any{tx.partition, v}
	bounded := false
	if q.AfterRowID != nil {
		after, all, none := storage.AfterKey(ts.t, *q.AfterRowID)
		if none {
			return nil, nil
		}
		if !all {
			args, bounded = append(args, after), true
		}
	}
	args = append(args, q.Limit)
	rows, err := tx.conn.Query(ctx, ts.columnScanSQL(q.Column, bounded), args...)
	if err != nil {
		return nil, classify("ScanByColumn", err)
	}
	defer rows.Close()
	out := make([]storage.RowRecord, 0, min(q.Limit, 64))
	rs := newTxRowScanner(ts.t)
	for rows.Next() {
		if err := rows.Scan(rs.targets...); err != nil {
			return nil, classify("ScanByColumn", err)
		}
		out = append(out, rs.record())
	}
	if err := rows.Err(); err != nil {
		return nil, classify("ScanByColumn", err)
	}
	return out, nil
}
