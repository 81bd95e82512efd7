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
// by the scope index (sync_change_scopes) for the first scope var; with no
// scope vars it walks the (partition, table, seq) index of the table's
// changes. It reads at most LimitChanges changes plus the rest of the last
// commit. Each var's values are bound as one text[] parameter (= ANY), so
// the statement's parameters do not grow with the number of values;
// values that are not storage.Storable match nothing stored and are not
// sent (PostgreSQL would refuse them).
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
// it read and the position of the last one.
func (s *Store) scanChangeRange(ctx context.Context, partition string, q storage.ChangeQuery, vars []string, r rangeArgs, out *storage.ChangeScan) (int, int64, int32, error) {
	var sb strings.Builder
	args := []any{partition, q.Table}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	// d is the row source that carries (partition, table_name, seq, idx).
	d := "c"
	if len(vars) > 0 {
		d = "s0"
		fmt.Fprintf(&sb, `SELECT c.seq, c.idx, m.created_at_ms, m.actor_id, c.row_id, c.op, c.row_version, c.scopes, c.row_data
FROM %s s0
JOIN %s c ON c.partition = s0.partition AND c.seq = s0.seq AND c.idx = s0.idx
JOIN %s m ON m.partition = c.partition AND m.seq = c.seq
WHERE s0.partition = $1 AND s0.table_name = $2 AND s0.var = %s AND s0.value = ANY(%s::text[])`,
			s.q.changeScopes, s.q.changes, s.q.commits, arg(vars[0]), arg(q.Scopes[vars[0]]))
		for i, v := range vars[1:] {
			a := fmt.Sprintf("s%d", i+1)
			fmt.Fprintf(&sb, `
AND EXISTS (SELECT 1 FROM %s %s WHERE %s.partition = s0.partition AND %s.table_name = s0.table_name
  AND %s.var = %s AND %s.value = ANY(%s::text[]) AND %s.seq = s0.seq AND %s.idx = s0.idx)`,
				s.q.changeScopes, a, a, a, a, arg(v), a, arg(q.Scopes[v]), a, a)
		}
	} else {
		fmt.Fprintf(&sb, `SELECT c.seq, c.idx, m.created_at_ms, m.actor_id, c.row_id, c.op, c.row_version, c.scopes, c.row_data
FROM %s c
JOIN %s m ON m.partition = c.partition AND m.seq = c.seq
WHERE c.partition = $1 AND c.table_name = $2`, s.q.changes, s.q.commits)
	}
	if r.onlySeq > 0 {
		fmt.Fprintf(&sb, "\nAND %s.seq = %s AND %s.idx > %s", d, arg(r.onlySeq), d, arg(r.afterIdx))
	} else {
		fmt.Fprintf(&sb, "\nAND %s.seq > %s AND %s.seq <= %s", d, arg(r.after), d, arg(r.upTo))
	}
	fmt.Fprintf(&sb, "\nORDER BY %s.seq, %s.idx", d, d)
	if r.onlySeq == 0 && r.limit > 0 {
		fmt.Fprintf(&sb, " LIMIT %s", arg(r.limit))
	}

	rows, err := s.pool.Query(ctx, sb.String(), args...)
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
// scope columns hold one of the listed values, in primary key byte order
// (COLLATE "C"), strictly after q.AfterRowID when set. Values for integer
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
	pk := ts.cols[ts.t.PK]
	if q.AfterRowID != nil {
		after, _, _ := strings.Cut(*q.AfterRowID, "\x00")
		args = append(args, after)
		fmt.Fprintf(&sb, ` AND %s > $%d COLLATE "C"`, pk, len(args))
	}
	args = append(args, q.Limit)
	fmt.Fprintf(&sb, ` ORDER BY %s COLLATE "C" LIMIT $%d`, pk, len(args))

	return sb.String(), args, false
}
