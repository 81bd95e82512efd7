package postgres

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// ScanRows returns up to q.Limit rows of q.Table in the partition whose
// scope columns hold one of the listed values, in primary key byte order
// (COLLATE "C"), strictly after q.AfterRowID when set. Values for integer
// scope columns match only in canonical decimal form. A scope var the table
// does not declare, or an empty value list, matches nothing. Limit <= 0
// returns no rows.
func (s *Store) ScanRows(ctx context.Context, partition string, q storage.RowQuery) ([]storage.RowRecord, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if q.Table == nil {
		return nil, fmt.Errorf("postgres: ScanRows: nil table")
	}
	ts, err := s.table(q.Table.Name)
	if err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		return nil, nil
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "SELECT %s FROM %s WHERE partition_id = $1", ts.selectList, ts.ident)
	args := []any{partition}
	vars := make([]string, 0, len(q.Scopes))
	for v := range q.Scopes {
		vars = append(vars, v)
	}
	sort.Strings(vars) // stable SQL text for the statement cache
	for _, v := range vars {
		sv := ts.t.ScopeVar(v)
		if sv == nil {
			return nil, nil
		}
		col := ts.t.Columns[sv.Column]
		if col.Type == ssp2.TypeInteger {
			ns := canonicalInts(q.Scopes[v])
			if len(ns) == 0 {
				return nil, nil
			}
			args = append(args, ns)
			fmt.Fprintf(&sb, " AND %s = ANY($%d::bigint[])", ts.cols[sv.Column], len(args))
		} else {
			if len(q.Scopes[v]) == 0 {
				return nil, nil
			}
			args = append(args, q.Scopes[v])
			fmt.Fprintf(&sb, " AND %s = ANY($%d::text[])", ts.cols[sv.Column], len(args))
		}
	}
	pk := ts.cols[ts.t.PK]
	if q.AfterRowID != nil {
		args = append(args, *q.AfterRowID)
		fmt.Fprintf(&sb, ` AND %s > $%d COLLATE "C"`, pk, len(args))
	}
	args = append(args, q.Limit)
	fmt.Fprintf(&sb, ` ORDER BY %s COLLATE "C" LIMIT $%d`, pk, len(args))

	var out []storage.RowRecord
	err = retry(ctx, "ScanRows", func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, sb.String(), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		rs := newRowScanner(ts.t)
		for rows.Next() {
			if err := rows.Scan(rs.targets...); err != nil {
				return err
			}
			out = append(out, rs.record())
		}
		return rows.Err()
	})
	return out, err
}

// canonicalInts parses the values that are the canonical decimal form of an
// int64; others can match no stored integer and are dropped.
func canonicalInts(vals []string) []int64 {
	out := make([]int64, 0, len(vals))
	for _, v := range vals {
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && strconv.FormatInt(n, 10) == v {
			out = append(out, n)
		}
	}
	return out
}
