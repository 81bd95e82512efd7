package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// ScanRows selects committed rows by (partition_id, pk) order on the
// primary key index (BINARY collation, i.e. byte order for a text key;
// an integer or boolean key, stored as an integer, in numeric order: the
// key's native order, storage/keys.go), filtering scope
// columns in SQL. Each var's values are bound as one JSON array parameter
// (col IN (SELECT value FROM json_each(?))), so the number of bind
// parameters does not grow with the number of values. Values that are not
// storage.Storable are dropped (they match nothing stored).
func (s *Store) ScanRows(ctx context.Context, partition string, q storage.RowQuery) ([]storage.RowRecord, error) {
	var out []storage.RowRecord
	if q.Limit > 0 {
		out = make([]storage.RowRecord, 0, min(q.Limit, 4096))
	}
	err := s.visitRows(ctx, partition, q, false, func(rec storage.RowRecord) error {
		out = append(out, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// VisitRows implements storage.Rows with ScanRows' statement; the
// scan buffers and the row's value slice are reused across rows.
func (s *Store) VisitRows(ctx context.Context, partition string, q storage.RowQuery, fn func(rec storage.RowRecord) error) error {
	return s.visitRows(ctx, partition, q, true, fn)
}

func (s *Store) visitRows(ctx context.Context, partition string, q storage.RowQuery, reuse bool, fn func(rec storage.RowRecord) error) error {
	_, tables, _, err := s.current()
	if err != nil {
		return fmt.Errorf("sqlite: scan rows: %w", err)
	}
	ts := tables[q.Table.Name]
	if ts == nil {
		return fmt.Errorf("sqlite: scan rows: table %q is not in the ensured schema", q.Table.Name)
	}
	t := ts.t
	query, args, none, err := rowsQuery(ts, partition, q)
	if err != nil || none {
		return err
	}
	rows, err := s.readQuery(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("sqlite: scan rows of %s: %w", t.Name, err)
	}
	defer rows.Close()
	sc := newRowBuf(t)
	if reuse {
		sc.values = make(ssp2.Row, len(t.Columns))
	}
	for rows.Next() {
		rec, err := sc.scan(rows)
		if err != nil {
			return fmt.Errorf("sqlite: scan rows of %s: %w", t.Name, err)
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: scan rows of %s: %w", t.Name, err)
	}
	return nil
}

// Candidate queries of ScanChanges. The scope-index one binds the var's
// prefix ("var\x00") and its values as one JSON array, so its number of
// bind parameters is fixed whatever the number of values; it is answered
// from sync_change_scopes' primary key (TestScanChangesUsesScopeIndex).
const (
	candScopesSQL = `SELECT DISTINCT commit_seq FROM sync_change_scopes
		WHERE partition_id = ? AND table_name = ? AND scope_key IN (SELECT ? || value FROM json_each(?))
		AND commit_seq > ? AND commit_seq <= ? ORDER BY commit_seq LIMIT ?`
	candTableSQL = `SELECT DISTINCT commit_seq FROM sync_changes WHERE partition_id = ? AND table_name = ?
		AND commit_seq > ? AND commit_seq <= ? ORDER BY commit_seq LIMIT ?`
	// loadCommitsSQL binds the candidate seqs as one JSON array.
	loadCommitsSQL = `SELECT ch.commit_seq, cm.created_at_ms, cm.actor_id, ch.row_id, ch.op, ch.row_version, ch.scopes, ch.row
		FROM sync_changes ch JOIN sync_commits cm ON cm.partition_id = ch.partition_id AND cm.seq = ch.commit_seq
		WHERE ch.partition_id = ? AND ch.table_name = ? AND ch.commit_seq IN (SELECT value FROM json_each(?))
		ORDER BY ch.commit_seq, ch.idx`
)

// rowsQuery builds the ScanRows statement of q on ts and its arguments, or
// reports none when q matches no row (an undeclared var, or no value left
// for a var).
func rowsQuery(ts *tableStmts, partition string, q storage.RowQuery) (query string, args []any, none bool, err error) {
	return rowsQueryFrom(ts, "", ts.selectCols, partition, q)
}

// afterArg is the argument a query compares t's primary key with to
// start strictly after rowID (storage.AfterKey, a boolean bound as SQLite
// stores it, 0/1): bounded false selects every row, none selects none.
func afterArg(t *schema.Table, rowID string) (arg any, bounded, none bool) {
	after, all, none := storage.AfterKey(t, rowID)
	if none || all {
		return nil, false, none
	}
	if b, ok := after.(bool); ok {
		after = int64(0)
		if b {
			after = int64(1)
		}
	}
	return after, true, false
}

// rowsQueryFrom is rowsQuery reading the table of database schema (""
// for main, else e.g. "src.") and selecting cols.
func rowsQueryFrom(ts *tableStmts, schemaPrefix, cols, partition string, q storage.RowQuery) (query string, args []any, none bool, err error) {
	t := ts.t
	pk := quote(t.Columns[t.PK].Name)
	var where strings.Builder
	args = []any{partition}
	where.WriteString("partition_id = ?")
	if q.AfterRowID != nil {
		after, bounded, none := afterArg(t, *q.AfterRowID)
		if none {
			return "", nil, true, nil
		}
		if bounded {
			where.WriteString(" AND " + pk + " > ?")
			args = append(args, after)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(q.Scopes)) {
		sv := t.ScopeVar(v)
		if sv == nil {
			return "", nil, true, nil // an undeclared var matches no row
		}
		vals, n, err := scopeArray(t, sv, q.Scopes[v])
		if err != nil {
			return "", nil, false, fmt.Errorf("sqlite: scan rows of %s: %w", t.Name, err)
		}
		if n == 0 {
			return "", nil, true, nil
		}
		fmt.Fprintf(&where, " AND %s IN (SELECT value FROM json_each(?))", quote(t.Columns[sv.Column].Name))
		args = append(args, vals)
	}
	query = fmt.Sprintf("SELECT %s FROM %s%s WHERE %s ORDER BY %s", cols, schemaPrefix, quote(t.Name), where.String(), pk)
	if q.Limit > 0 {
		query += " LIMIT ?"
		args = append(args, q.Limit)
	}
	return query, args, false, nil
}

// ScanChanges pages through candidate commit seqs from the scope index
// (sync_change_scopes, keyed by the first effective var in name order),
// loads those commits' changes of q.Table and keeps the ones whose stored
// scopes match every var. With no effective scopes it pages through the
// table's changes directly. All reads run in one read transaction, so
// the answer is a consistent snapshot. Every statement has a fixed number
// of bind parameters: value and seq lists are bound as JSON arrays.
// Values that are not storage.Storable are dropped (they match nothing).
func (s *Store) ScanChanges(ctx context.Context, partition string, q storage.ChangeQuery) (storage.ChangeScan, error) {
	if _, _, _, err := s.current(); err != nil {
		return storage.ChangeScan{}, fmt.Errorf("sqlite: scan changes: %w", err)
	}
	candSQL := candTableSQL
	candArgs := []any{partition, q.Table}
	if len(q.Scopes) > 0 {
		v := slices.Sorted(maps.Keys(q.Scopes))[0]
		vals := storage.StorableValues(q.Scopes[v])
		if len(vals) == 0 || !storage.Storable(v) {
			return storage.ChangeScan{}, nil // matches nothing stored
		}
		arr, err := json.Marshal(vals)
		if err != nil {
			return storage.ChangeScan{}, fmt.Errorf("sqlite: scan changes: %w", err)
		}
		candSQL = candScopesSQL
		candArgs = append(candArgs, v+"\x00", string(arr))
	}
	rtx, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		return storage.ChangeScan{}, fmt.Errorf("sqlite: scan changes: %w", err)
	}
	defer func() { _ = rtx.Rollback() }()

	page := 256
	if q.LimitChanges > 0 && q.LimitChanges+1 < page {
		page = q.LimitChanges + 1
	}

	var out storage.ChangeScan
	n := 0
	full := false // the limit was reached; look for one more matching commit
	after := q.AfterSeq
	for {
		seqs, err := s.querySeqs(ctx, rtx, candSQL, append(candArgs, after, q.UpToSeq, page)...)
		if err != nil {
			return storage.ChangeScan{}, fmt.Errorf("sqlite: scan changes: candidates: %w", err)
		}
		if len(seqs) == 0 {
			return out, nil
		}
		commits, err := s.loadCommits(ctx, rtx, partition, q, seqs)
		if err != nil {
			return storage.ChangeScan{}, fmt.Errorf("sqlite: scan changes: %w", err)
		}
		for _, c := range commits {
			if full {
				out.Truncated = true
				return out, nil
			}
			out.Commits = append(out.Commits, c)
			n += len(c.Changes)
			if q.LimitChanges > 0 && n >= q.LimitChanges {
				full = true
			}
		}
		if len(seqs) < page {
			return out, nil
		}
		after = seqs[len(seqs)-1]
	}
}

// latestScopeSQL finds, per value of the JSON array ?3, the newest entry
// of the scope index's primary key at or below ?5 (a descending seek
// LIMIT 1), and returns the largest (NULL when there is none).
const latestScopeSQL = `SELECT max((SELECT s.commit_seq FROM sync_change_scopes s
		WHERE s.partition_id = ?1 AND s.table_name = ?2 AND s.scope_key = ?4 || j.value AND s.commit_seq <= ?5
		ORDER BY s.commit_seq DESC LIMIT 1)) FROM json_each(?3) j`

// LatestScopeCommit reads the scope index (sync_change_scopes) of q.Var's
// values, one primary-key seek each. Values that are not storage.Storable
// are dropped (they match nothing stored).
func (s *Store) LatestScopeCommit(ctx context.Context, partition string, q storage.ScopeCommitQuery) (int64, error) {
	if _, _, _, err := s.current(); err != nil {
		return 0, fmt.Errorf("sqlite: latest scope commit: %w", err)
	}
	vals := storage.StorableValues(q.Values)
	if len(vals) == 0 || !storage.Storable(q.Var) {
		return 0, nil
	}
	arr, err := json.Marshal(vals)
	if err != nil {
		return 0, fmt.Errorf("sqlite: latest scope commit: %w", err)
	}
	var seq sql.NullInt64
	if err := s.readQueryRow(ctx, latestScopeSQL, partition, q.Table, string(arr), q.Var+"\x00", q.UpToSeq).Scan(&seq); err != nil {
		return 0, fmt.Errorf("sqlite: latest scope commit of %s.%s in %q: %w", q.Table, q.Var, partition, err)
	}
	return seq.Int64, nil
}

// txQuery runs a read inside rtx through the cached prepared statement of
// query (readStmt) when there is one.
func (s *Store) txQuery(ctx context.Context, rtx *sql.Tx, query string, args ...any) (*sql.Rows, error) {
	if st := s.readStmt(ctx, query); st != nil {
		return rtx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return rtx.QueryContext(ctx, query, args...)
}

func (s *Store) querySeqs(ctx context.Context, rtx *sql.Tx, query string, args ...any) ([]int64, error) {
	return scanColumn[int64](s.txQuery(ctx, rtx, query, args...))
}

// scanColumn reads the one column of rows (as a query returned them, with
// its error) into a slice and closes rows.
func scanColumn[T any](rows *sql.Rows, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// loadCommits returns, in seq order, the commits among seqs with at least
// one change of q.Table matching q.Scopes, each with only those changes.
func (s *Store) loadCommits(ctx context.Context, rtx *sql.Tx, partition string, q storage.ChangeQuery, seqs []int64) ([]storage.CommitChanges, error) {
	arr, err := json.Marshal(seqs)
	if err != nil {
		return nil, err
	}
	rows, err := s.txQuery(ctx, rtx, loadCommitsSQL, partition, q.Table, string(arr))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []storage.CommitChanges
	for rows.Next() {
		var (
			seq, created, op, ver int64
			actor, rowID, scopes  string
			row                   []byte
		)
		if err := rows.Scan(&seq, &created, &actor, &rowID, &op, &ver, &scopes, &row); err != nil {
			return nil, err
		}
		ch := storage.ChangeRecord{Table: q.Table, RowID: rowID, Op: ssp2.OpKind(op), RowVersion: ver, Row: row}
		if err := json.Unmarshal([]byte(scopes), &ch.Scopes); err != nil {
			return nil, fmt.Errorf("commit %d: stored scopes: %w", seq, err)
		}
		if !storage.MatchScopes(ch.Scopes, q.Scopes) {
			continue
		}
		if len(out) == 0 || out[len(out)-1].Seq != seq {
			out = append(out, storage.CommitChanges{Seq: seq, CreatedAtMs: created, ActorID: actor})
		}
		c := &out[len(out)-1]
		c.Changes = append(c.Changes, ch)
	}
	return out, rows.Err()
}
