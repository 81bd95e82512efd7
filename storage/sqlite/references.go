package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// Declared references (SPEC §6.11): every reference column has an index
// on (partition_id, column, primary key), named
// schema.Table.ReferenceIndexIdent, by which PushTx.ScanByColumn finds a
// parent's children: a page of them in primary-key order after
// AfterRowID is one range of the index, read in order and stopped at the
// limit. The statements name the index (INDEXED BY): without statistics
// (synclane never runs ANALYZE) SQLite guesses a partition holds about ten
// rows and walks the partition's primary key filtering on the column,
// reading the whole partition for each page
// (TestScanByColumnUsesReferenceIndex); through the index a page costs
// what it returns whatever the statistics. The primary key is declared
// in the index, although a WITHOUT ROWID table's index entries end in it
// anyway, so the index's order is the ORDER BY's on its face. A reference
// of the primary key itself gets (partition_id, pk).

// createReferenceIndexSQL is the CREATE INDEX of t's reference column col.
func createReferenceIndexSQL(t *schema.Table, col int) string {
	cols := []string{"partition_id", quote(t.Columns[col].Name)}
	if col != t.PK {
		cols = append(cols, quote(t.Columns[t.PK].Name))
	}
	return fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s (%s)",
		quote(t.ReferenceIndexIdent(col)), quote(t.Name), strings.Join(cols, ", "))
}

// ensureReferenceIndexes creates the index of each reference column of t
// that has none yet (a new table, or a reference a schema bump added to
// an existing one: the index is then built over the stored rows, in the
// EnsureSchema transaction). An existing index is left as it is, and
// none is ever dropped.
func (s *Store) ensureReferenceIndexes(ctx context.Context, t *schema.Table) error {
	for _, r := range t.References {
		name := t.ReferenceIndexIdent(r.Column)
		var n int
		if err := s.conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ? COLLATE NOCASE`, name).Scan(&n); err != nil {
			return fmt.Errorf("look up reference index %s: %w", name, err)
		}
		if n > 0 {
			continue
		}
		if _, err := s.conn.ExecContext(ctx, createReferenceIndexSQL(t, r.Column)); err != nil {
			return fmt.Errorf("create reference index %s: %w", name, err)
		}
		s.log.Info("sqlite: created reference index", zap.String("table", t.Name),
			zap.String("column", t.Columns[r.Column].Name), zap.String("index", name))
	}
	return nil
}

// columnScan holds ScanByColumn's two statements on one column: the first
// page, and a page after a primary key.
type columnScan struct{ first, after *sql.Stmt }

// columnScanSQL is ScanByColumn's statement on column col of ts, binding
// the partition, the value, (the after row id,) then the limit. It
// selects the push transaction's columns (txSelectCols) in ScanRows'
// order (the primary key's own order; BINARY, byte order, for text keys),
// after a bound from storage.AfterKey, through the column's reference
// index when it has one.
func columnScanSQL(ts *tableStmts, col int, after bool) string {
	t := ts.t
	pk := quote(t.Columns[t.PK].Name)
	from := quote(t.Name)
	for _, r := range t.References {
		if r.Column == col {
			from += " INDEXED BY " + quote(t.ReferenceIndexIdent(col))
			break
		}
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE partition_id = ? AND %s = ?", ts.txSelectCols, from, quote(t.Columns[col].Name))
	if after {
		q += " AND " + pk + " > ?"
	}
	return q + " ORDER BY " + pk + " LIMIT ?"
}

// prepareColumnScans prepares ScanByColumn's statements of every
// reference column of ts (other columns are scanned by unprepared
// statements: only the references' are on a hot path, a cascade).
func prepareColumnScans(ctx context.Context, c *sql.Conn, ts *tableStmts) error {
	for _, r := range ts.t.References {
		if ts.byColumn == nil {
			ts.byColumn = map[int]*columnScan{}
		}
		cs := &columnScan{}
		ts.byColumn[r.Column] = cs // closeStmts closes what was prepared
		var err error
		if cs.first, err = c.PrepareContext(ctx, columnScanSQL(ts, r.Column, false)); err != nil {
			return err
		}
		if cs.after, err = c.PrepareContext(ctx, columnScanSQL(ts, r.Column, true)); err != nil {
			return err
		}
	}
	return nil
}

// ScanByColumn answers storage.PushTx: the rows of the transaction's
// partition whose column q.Column equals q.Value, read on the writer
// connection inside the transaction (so its own writes, and a rolled back
// savepoint's absence, are seen), in primary-key order, with their column
// versions. A reference column is read through its index by prepared
// statements; any other column by the same statement without an index
// (it walks the partition), prepared for the call.
func (tx *pushTx) ScanByColumn(ctx context.Context, q storage.ColumnQuery) ([]storage.RowRecord, error) {
	ctx, err := tx.check(ctx, "scan by column")
	if err != nil {
		return nil, err
	}
	if q.Table == nil {
		return nil, fmt.Errorf("sqlite: scan by column: nil table")
	}
	ts, err := tx.table(q.Table)
	if err != nil {
		return nil, err
	}
	if err := q.Check(ts.t); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	col := ts.t.Columns[q.Column]
	v, err := bindValue(col, q.Value)
	if err != nil {
		return nil, fmt.Errorf("sqlite: scan by column: %w", err)
	}
	if b, ok := q.Value.([]byte); ok && b == nil {
		v = []byte{} // a value, not NULL (which would match nothing)
	}
	args := []any{tx.info.Partition, v}
	bounded := false
	if q.AfterRowID != nil {
		after, b, none := afterArg(ts.t, *q.AfterRowID)
		if none {
			return nil, nil
		}
		if bounded = b; b {
			args = append(args, after)
		}
	}
	args = append(args, q.Limit)
	var rows *sql.Rows
	if cs, ok := ts.byColumn[q.Column]; ok {
		st := cs.first
		if bounded {
			st = cs.after
		}
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = tx.s.conn.QueryContext(ctx, columnScanSQL(ts, q.Column, bounded), args...)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: scan %s by %s: %w", ts.t.Name, col.Name, err)
	}
	defer rows.Close()
	out := make([]storage.RowRecord, 0, min(q.Limit, 64))
	sc := newTxRowBuf(ts.t)
	for rows.Next() {
		rec, err := sc.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: scan %s by %s: %w", ts.t.Name, col.Name, err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: scan %s by %s: %w", ts.t.Name, col.Name, err)
	}
	return out, nil
}
