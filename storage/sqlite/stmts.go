package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
)

// sysStmts are the prepared hot-path statements on the writer connection.
type sysStmts struct {
	readPart, insertPart           *sql.Stmt
	lookupIdem                     *sql.Stmt
	savepoint, release, rollbackTo *sql.Stmt
	// getTomb, putTomb and clearTomb read, record (replacing) and remove
	// one delete tombstone.
	getTomb, putTomb, clearTomb *sql.Stmt
}

var sysSQL = map[string]string{
	"readPart":   `SELECT log_epoch, epoch_required, max_commit_seq, horizon_seq FROM sync_partitions WHERE partition_id = ?`,
	"insertPart": `INSERT INTO sync_partitions(partition_id, log_epoch, created_at_ms) VALUES(?, ?, ?) ON CONFLICT(partition_id) DO NOTHING`,
	"lookupIdem": `SELECT status, commit_seq, result FROM sync_idempotency WHERE partition_id = ? AND client_id = ? AND client_commit_id = ?`,
	"savepoint":  `SAVEPOINT sp`,
	"release":    `RELEASE sp`,
	"rollbackTo": `ROLLBACK TO sp`,
	"getTomb":    `SELECT commit_seq FROM sync_tombstones WHERE partition_id = ? AND table_name = ? AND row_id = ?`,
	"putTomb": `INSERT INTO sync_tombstones(partition_id, table_name, row_id, commit_seq) VALUES(?, ?, ?, ?)
		ON CONFLICT(partition_id, table_name, row_id) DO UPDATE SET commit_seq = excluded.commit_seq`,
	"clearTomb": `DELETE FROM sync_tombstones WHERE partition_id = ? AND table_name = ? AND row_id = ?`,
}

func prepareSys(ctx context.Context, c *sql.Conn) (*sysStmts, error) {
	s := &sysStmts{}
	dst := map[string]**sql.Stmt{
		"readPart": &s.readPart, "insertPart": &s.insertPart,
		"lookupIdem": &s.lookupIdem,
		"savepoint":  &s.savepoint, "release": &s.release, "rollbackTo": &s.rollbackTo,
		"getTomb": &s.getTomb, "putTomb": &s.putTomb, "clearTomb": &s.clearTomb,
	}
	for name, q := range sysSQL {
		st, err := c.PrepareContext(ctx, q)
		if err != nil {
			closeStmts(s, nil)
			return nil, fmt.Errorf("sqlite: prepare %s: %w", name, err)
		}
		*dst[name] = st
	}
	return s, nil
}

func (s *sysStmts) all() []*sql.Stmt {
	return []*sql.Stmt{s.readPart, s.insertPart, s.lookupIdem, s.savepoint, s.release, s.rollbackTo, s.getTomb, s.putTomb, s.clearTomb}
}

// tableStmts are one row table's prepared statements and column lists.
type tableStmts struct {
	t *schema.Table
	// selectCols is the column list of committed-row reads: the table's
	// columns, then _sync_version. txSelectCols, the push transaction's
	// reads, adds _sync_column_versions.
	selectCols, txSelectCols string
	get, upsert, drop        *sql.Stmt
	// byColumn holds ScanByColumn's statements of each reference column
	// (references.go), by column index.
	byColumn map[int]*columnScan
}

func prepareTable(ctx context.Context, c *sql.Conn, t *schema.Table) (*tableStmts, error) {
	cols := make([]string, len(t.Columns))
	sets := make([]string, 0, len(t.Columns))
	for i, col := range t.Columns {
		cols[i] = quote(col.Name)
		if i != t.PK { // the conflict target: its value is already equal
			sets = append(sets, cols[i]+" = excluded."+cols[i])
		}
	}
	pk := quote(t.Columns[t.PK].Name)
	ts := &tableStmts{t: t, selectCols: strings.Join(cols, ", ") + ", _sync_version"}
	ts.txSelectCols = ts.selectCols + ", " + columnVersionsCol
	tn := quote(t.Name)
	qs := []struct {
		dst **sql.Stmt
		q   string
	}{
		{&ts.get, fmt.Sprintf("SELECT %s FROM %s WHERE partition_id = ? AND %s = ?", ts.txSelectCols, tn, pk)},
		// sets is empty for a table whose only column is its primary key.
		{&ts.upsert, fmt.Sprintf("INSERT INTO %s (partition_id, %s) VALUES (?%s) ON CONFLICT(partition_id, %s) DO UPDATE SET %s",
			tn, ts.txSelectCols, strings.Repeat(", ?", len(t.Columns)+2), pk,
			strings.Join(append(sets, "_sync_version = excluded._sync_version", columnVersionsCol+" = excluded."+columnVersionsCol), ", "))},
		{&ts.drop, fmt.Sprintf("DELETE FROM %s WHERE partition_id = ? AND %s = ?", tn, pk)},
	}
	for _, q := range qs {
		st, err := c.PrepareContext(ctx, q.q)
		if err != nil {
			closeStmts(nil, map[string]*tableStmts{"": ts})
			return nil, fmt.Errorf("sqlite: prepare statements of %s: %w", t.Name, err)
		}
		*q.dst = st
	}
	if err := prepareColumnScans(ctx, c, ts); err != nil {
		closeStmts(nil, map[string]*tableStmts{"": ts})
		return nil, fmt.Errorf("sqlite: prepare reference scans of %s: %w", t.Name, err)
	}
	return ts, nil
}

func closeStmts(sys *sysStmts, tables map[string]*tableStmts) {
	var all []*sql.Stmt
	if sys != nil {
		all = sys.all()
	}
	for _, ts := range tables {
		all = append(all, ts.get, ts.upsert, ts.drop)
		for _, cs := range ts.byColumn {
			all = append(all, cs.first, cs.after)
		}
	}
	for _, st := range all {
		if st != nil {
			_ = st.Close()
		}
	}
}
