package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// ScanChanges returns the commits in (q.AfterSeq, q.UpToSeq] with changes
// of q.Table matching q.Scopes, oldest first, whole commits only, stopping
// after the commit that reaches q.LimitChanges (<= 0: no limit). Truncated
// is set when it stopped on the limit before q.UpToSeq. The scan is driven
// by the scope index (sync_change_scopes) for the first scope var, one
// index range per value; with no scope vars it walks the (partition,
// table, seq) index of the table's changes. It reads at most LimitChanges
// scope entries per value of the first var plus the rest of the last
// commit, and whatever the tables' statistics say (changeRangeSQL). Each
// var's values are bound as one text[] parameter, so the statement's
// parameters do not grow with the number of values; values that are not
// storage.Storable match nothing stored and are not sent (PostgreSQL
// would refuse them).
func (s *Store) ScanChanges(ctx context.Context, partition string, q storage.ChangeQuery) (storage.ChangeScan, error) {
	if err := s.ready(); err != nil {
		return storage.ChangeScan{}, err
	}
	if q.UpToSeq <= q.AfterSeq || !storage.Storable(partition) || !storage.Storable(q.Table) {
		return storage.ChangeScan{}, nil
	}
	vars := slices.Sorted(maps.Keys(q.Scopes))
	scopes := make(map[string][]string, len(vars))
	for _, v := range vars {
		vals := storage.StorableValues(q.Scopes[v])
		if len(vals) == 0 || !storage.Storable(v) {
			return storage.ChangeScan{}, nil // an empty value list matches nothing
		}
		scopes[v] = vals
	}
	q.Scopes = scopes

	var out storage.ChangeScan
	err := retry(ctx, "ScanChanges", func() error {
		out = storage.ChangeScan{}
		limit := q.LimitChanges
		n, lastSeq, lastIdx, err := s.scanChangeRange(ctx, partition, q, vars, rangeArgs{after: q.AfterSeq, upTo: q.UpToSeq, limit: limit}, &out)
		if err != nil || limit <= 0 || n < limit {
			return err
		}
		// The limit was hit: complete the last commit, whose remaining
		// matching changes follow lastIdx.
		if _, _, _, err := s.scanChangeRange(ctx, partition, q, vars, rangeArgs{onlySeq: lastSeq, afterIdx: lastIdx}, &out); err != nil {
			return err
		}
		out.Truncated = lastSeq < q.UpToSeq
		return nil
	})
	return out, err
}

// LatestScopeCommit reads the scope index (change_scopes) of q.Var's
// values: per value the newest entry at or below q.UpToSeq, one backward
// probe of the primary key (LATERAL ... ORDER BY seq DESC LIMIT 1), and
// the largest of them. Values that are not storage.Storable match nothing
// stored and are not sent.
func (s *Store) LatestScopeCommit(ctx context.Context, partition string, q storage.ScopeCommitQuery) (int64, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	vals := storage.StorableValues(q.Values)
	if len(vals) == 0 || !storage.Storable(partition) || !storage.Storable(q.Table) || !storage.Storable(q.Var) {
		return 0, nil
	}
	query := `SELECT max(x.seq) FROM unnest($3::text[]) AS v(value)
CROSS JOIN LATERAL (SELECT s.seq FROM ` + s.q.changeScopes + ` s
  WHERE s.partition = $1 AND s.table_name = $2 AND s.var = $4 AND s.value = v.value AND s.seq <= $5
  ORDER BY s.seq DESC, s.idx DESC LIMIT 1) x`
	var seq *int64
	err := retry(ctx, "LatestScopeCommit", func() error {
		return s.pool.QueryRow(ctx, query, partition, q.Table, distinct(vals), q.Var, q.UpToSeq).Scan(&seq)
	})
	if err != nil || seq == nil {
		return 0, err
	}
	return *seq, nil
}

// rangeArgs selects either a seq range with a change limit or, when
// onlySeq > 0, the changes of one commit after index afterIdx.
type rangeArgs struct {
	after, upTo int64
	limit       int
	onlySeq     int64
	afterIdx    int32
}

// scanChangeRange appends the matching changes of the range to out
// (extending its last commit when the seq continues) and returns how many
// it read and the position of the last one. Its statement is
// changeRangeSQL's.
func (s *Store) scanChangeRange(ctx context.Context, partition string, q storage.ChangeQuery, vars []string, r rangeArgs, out *storage.ChangeScan) (int, int64, int32, error) {
	query, args := s.changeRangeSQL(partition, q, vars, r)
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return 0, 0, 0, err
	}
	defer rows.Close()
	var (
		n       int
		lastSeq int64
		lastIdx int32
	)
	for rows.Next() {
		var (
			seq, created, ver int64
			idx               int32
			actor, rowID      string
			op                int16
			scopes            string
			data              []byte
		)
		if err := rows.Scan(&seq, &idx, &created, &actor, &rowID, &op, &ver, &scopes, &data); err != nil {
			return 0, 0, 0, err
		}
		ch := storage.ChangeRecord{Table: q.Table, RowID: rowID, Op: ssp2.OpKind(op), RowVersion: ver, Row: data}
		if err := json.Unmarshal([]byte(scopes), &ch.Scopes); err != nil {
			return 0, 0, 0, fmt.Errorf("change %d/%d: scopes: %w", seq, idx, err)
		}
		if k := len(out.Commits); k == 0 || out.Commits[k-1].Seq != seq {
			out.Commits = append(out.Commits, storage.CommitChanges{Seq: seq, CreatedAtMs: created, ActorID: actor})
		}
		last := &out.Commits[len(out.Commits)-1]
		last.Changes = append(last.Changes, ch)
		n, lastSeq, lastIdx = n+1, seq, idx
	}
	return n, lastSeq, lastIdx, rows.Err()
}

// ScanRows returns up to q.Limit rows of q.Table in the partition whose
// scope columns hold one of the listed values, in primary-key order
// (storage/keys.go: byte order, COLLATE "C", for string and json keys;
// the column's own order for integer and boolean keys), strictly after
// q.AfterRowID when set (storage.AfterKey). Values for integer
// scope columns match only in canonical decimal form. A scope var the table
// does not declare, or an empty value list, matches nothing. Limit <= 0
// returns no rows. Each var's values are bound as one array parameter
// (= ANY), and values that are not storage.Storable (they match nothing
// stored) are not sent; an AfterRowID is cut at its first U+0000, which
// selects the same stored rows (none holds U+0000).
func (s *Store) ScanRows(ctx context.Context, partition string, q storage.RowQuery) ([]storage.RowRecord, error) {
	var out []storage.RowRecord
	err := s.visitRows(ctx, partition, q, func(rec storage.RowRecord) error {
		out = append(out, rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// VisitRows implements storage.Rows with ScanRows' statement, one
// row at a time (each row's values are fresh). A serialization failure or
// deadlock is retried only while no row has reached fn.
func (s *Store) VisitRows(ctx context.Context, partition string, q storage.RowQuery, fn func(rec storage.RowRecord) error) error {
	return s.visitRows(ctx, partition, q, fn)
}

func (s *Store) visitRows(ctx context.Context, partition string, q storage.RowQuery, fn func(rec storage.RowRecord) error) error {
	if err := s.ready(); err != nil {
		return err
	}
	if !storage.Storable(partition) {
		return nil
	}
	if q.Table == nil {
		return fmt.Errorf("postgres: ScanRows: nil table")
	}
	ts, err := s.table(q.Table.Name)
	if err != nil {
		return err
	}
	if q.Limit <= 0 {
		return nil
	}
	query, args, none := rowsSQL(ts, partition, q)
	if none {
		return nil
	}
	// The visit is retried only while no row has reached fn (fn must not
	// see a row twice); fn's own error stops it and is returned as is.
	var fnErr error
	delivered := false
	err = retry(ctx, "ScanRows", func() error {
		rows, err := s.pool.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		rs := newRowScanner(ts.t)
		for rows.Next() {
			if err := rows.Scan(rs.targets...); err != nil {
				return err
			}
			delivered = true
			if fnErr = fn(rs.record()); fnErr != nil {
				return nil
			}
		}
		if err := rows.Err(); err != nil && delivered && retryableConflict(err) {
			return fmt.Errorf("after rows were visited: %v", err) // not retried
		} else if err != nil {
			return err
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	return err
}

// rowsSQL builds the ScanRows statement of q (q.Limit > 0) on ts, or
// reports none when q matches no row (an undeclared var, or no storable
// value left for a var).
func rowsSQL(ts *tableSQL, partition string, q storage.RowQuery) (query string, args []any, none bool) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "SELECT %s FROM %s WHERE partition_id = $1", ts.selectList, ts.ident)
	args = []any{partition}
	vars := slices.Sorted(maps.Keys(q.Scopes)) // stable SQL text for the statement cache
	for _, v := range vars {
		sv := ts.t.ScopeVar(v)
		if sv == nil {
			return "", nil, true
		}
		col := ts.t.Columns[sv.Column]
		if col.Type == ssp2.TypeInteger {
			ns := storage.CanonicalInts(q.Scopes[v])
			if len(ns) == 0 {
				return "", nil, true
			}
			args = append(args, ns)
			fmt.Fprintf(&sb, " AND %s = ANY($%d::bigint[])", ts.cols[sv.Column], len(args))
		} else {
			vals := storage.StorableValues(q.Scopes[v])
			if len(vals) == 0 {
				return "", nil, true
			}
			args = append(args, vals)
			fmt.Fprintf(&sb, " AND %s = ANY($%d::text[])", ts.cols[sv.Column], len(args))
		}
	}
	pk, order := ts.cols[ts.t.PK], pkOrder(ts)
	if q.AfterRowID != nil {
		after, all, none := storage.AfterKey(ts.t, *q.AfterRowID)
		if none {
			return "", nil, true
		}
		if !all {
			if text, ok := after.(string); ok {
				after, _, _ = strings.Cut(text, "\x00")
			}
			args = append(args, after)
			fmt.Fprintf(&sb, ` AND %s > $%d%s`, pk, len(args), pkCast(ts))
		}
	}
	args = append(args, q.Limit)
	fmt.Fprintf(&sb, ` ORDER BY %s LIMIT $%d`, order, len(args))

	return sb.String(), args, false
}

// pkOrder is the ORDER BY of ts's rows: the primary key in its index's
// order (storage/keys.go), which for a text key (string, json) is byte
// order (COLLATE "C", the column's own collation).
func pkOrder(ts *tableSQL) string {
	if pgType(ts.t.Columns[ts.t.PK].Type) == "text" {
		return ts.cols[ts.t.PK] + ` COLLATE "C"`
	}
	return ts.cols[ts.t.PK]
}

// pkCast types a parameter compared with ts's primary key: COLLATE "C"
// for a text key, a cast to the key column's type for the others (so the
// parameter's type never depends on inference).
func pkCast(ts *tableSQL) string {
	if typ := pgType(ts.t.Columns[ts.t.PK].Type); typ != "text" {
		return "::" + typ
	}
	return ` COLLATE "C"`
}

// changeRangeSQL builds the statement of scanChangeRange. Its shape leaves
// the planner one sensible plan whatever the tables' statistics say (none
// yet after a bulk load, or stale ones from when the partition or its
// values were distributed otherwise), so a page costs about the changes
// it returns, never a walk of the partition's log (issue 48). Every index
// read binds each column of the index up to the one it ranges over (an
// unbound column in between turns the rest into a filter over every entry
// under the bound prefix):
//
//   - the first scope var is scanned once per value (unnest, then a
//     LATERAL subquery with its own ORDER BY and LIMIT): the scope index's
//     (partition, table_name, var, value) prefix is bound, so its range is
//     exactly the value's changes in the seq range, in (seq, idx) order,
//     and the scan stops at the limit. (A value list bound as = ANY was a
//     filter there, so the range covered every value of the var.) The
//     values' streams are merged by a sort of at most LIMIT rows each;
//   - each other var is checked per change by exact probes of the scope
//     index, one per value, under an EXISTS that OFFSET 0 keeps a
//     correlated subquery (never a join reading the var's every entry);
//   - without scope vars the (partition, table_name, seq, idx) index is
//     walked from the range's start (ordering by all its columns makes it
//     the one index that needs no sort);
//   - only the page's changes are then read, each by an exact probe of
//     sync_changes and of sync_commits (LATERAL ... LIMIT 1, which is never
//     flattened into a join that could scan the partition).
func (s *Store) changeRangeSQL(partition string, q storage.ChangeQuery, vars []string, r rangeArgs) (string, []any) {
	var sb strings.Builder
	args := []any{partition, q.Table}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	// d is the table whose (seq, idx) the key subquery bounds.
	var bounds, limit string
	d := "c"
	if len(vars) > 0 {
		d = "s0"
	}
	if r.onlySeq > 0 {
		bounds = fmt.Sprintf("%s.seq = %s AND %s.idx > %s", d, arg(r.onlySeq), d, arg(r.afterIdx))
	} else {
		bounds = fmt.Sprintf("%s.seq > %s AND %s.seq <= %s", d, arg(r.after), d, arg(r.upTo))
		if r.limit > 0 {
			limit = " LIMIT " + arg(r.limit)
		}
	}
	if len(vars) > 0 {
		fmt.Fprintf(&sb, `SELECT k.seq, k.idx, m.created_at_ms, m.actor_id, c.row_id, c.op, c.row_version, c.scopes, c.row_data
FROM (SELECT s0.seq, s0.idx FROM unnest(%s::text[]) AS v(value)
  CROSS JOIN LATERAL (SELECT s0.seq, s0.idx FROM %s s0
    WHERE s0.partition = $1 AND s0.table_name = $2 AND s0.var = %s AND s0.value = v.value AND %s`,
			arg(distinct(q.Scopes[vars[0]])), s.q.changeScopes, arg(vars[0]), bounds)
		for i, v := range vars[1:] {
			a := fmt.Sprintf("s%d", i+1)
			fmt.Fprintf(&sb, `
    AND EXISTS (SELECT 1 FROM unnest(%s::text[]) AS w%d(value) CROSS JOIN LATERAL (SELECT 1 FROM %s %s
      WHERE %s.partition = $1 AND %s.table_name = $2 AND %s.var = %s AND %s.value = w%d.value
        AND %s.seq = s0.seq AND %s.idx = s0.idx LIMIT 1) %s OFFSET 0)`,
				arg(distinct(q.Scopes[v])), i+1, s.q.changeScopes, a, a, a, a, arg(v), a, i+1, a, a, a)
		}
		fmt.Fprintf(&sb, `
    ORDER BY s0.seq, s0.idx%s) s0
  ORDER BY s0.seq, s0.idx%s) k
CROSS JOIN LATERAL (SELECT c.row_id, c.op, c.row_version, c.scopes, c.row_data FROM %s c
  WHERE c.partition = $1 AND c.table_name = $2 AND c.seq = k.seq AND c.idx = k.idx LIMIT 1) c`, limit, limit, s.q.changes)
	} else {
		fmt.Fprintf(&sb, `SELECT k.seq, k.idx, m.created_at_ms, m.actor_id, k.row_id, k.op, k.row_version, k.scopes, k.row_data
FROM (SELECT c.seq, c.idx, c.row_id, c.op, c.row_version, c.scopes, c.row_data FROM %s c
  WHERE c.partition = $1 AND c.table_name = $2 AND %s
  ORDER BY c.table_name, c.seq, c.idx%s) k`, s.q.changes, bounds, limit)
	}
	sb.WriteString(`
CROSS JOIN LATERAL (SELECT m.created_at_ms, m.actor_id FROM ` + s.q.commits + ` m
  WHERE m.partition = $1 AND m.seq = k.seq LIMIT 1) m
ORDER BY k.seq, k.idx`)
	return sb.String(), args
}

// distinct returns vals sorted without repeats (a value listed twice
// must not return its changes twice).
func distinct(vals []string) []string {
	out := slices.Clone(vals)
	slices.Sort(out)
	return slices.Compact(out)
}
