package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// queryDialect renders registered queries for SQLite: positional "?"
// parameters and scope lists bound as one JSON array (json_each), so the
// statement's parameter count does not depend on the list's length.
var queryDialect = storage.QueryDialect{
	Placeholder: func(int) string { return "?" },
	Table:       func(t *schema.Table) string { return quote(t.Name) },
	IntList: func(col, ph string, vals []int64) (string, any) {
		b, _ := json.Marshal(vals)
		return col + " IN (SELECT value FROM json_each(" + ph + "))", string(b)
	},
	TextList: func(col, ph string, vals []string) (string, any) {
		b, _ := json.Marshal(vals)
		return col + " IN (SELECT value FROM json_each(" + ph + "))", string(b)
	},
}

// Query runs a registered query in one read transaction on a read-only
// connection of the pool (query_only, so the statement cannot write): the
// gate, the partition's max commit seq and the statement read one WAL
// snapshot, which SQLite fixes at the transaction's first read.
func (s *Store) Query(ctx context.Context, partition string, running int32, q storage.Query, check func(storage.ServeGate) error) (storage.QueryResult, error) {
	return s.query(ctx, partition, running, q, func(g storage.ServeGate, _ string) error { return check(g) })
}

// query is Query with the file's checkpoint generation handed to check
// with the gate.
func (s *Store) query(ctx context.Context, partition string, running int32, q storage.Query, check func(storage.ServeGate, string) error) (storage.QueryResult, error) {
	var res storage.QueryResult
	if _, _, _, err := s.current(); err != nil {
		return res, fmt.Errorf("sqlite: query: %w", err)
	}
	text, args, err := storage.RenderQuery(q, partition, queryDialect)
	if err != nil {
		return res, fmt.Errorf("sqlite: query: %w", err)
	}
	rtx, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		return res, fmt.Errorf("sqlite: query: begin: %w", err)
	}
	defer func() { _ = rtx.Rollback() }()
	g, gen, err := scanGate(rtx.QueryRowContext(ctx, gateSQL, partition, running))
	if err != nil {
		return res, fmt.Errorf("sqlite: query: read serve gate: %w", err)
	}
	if err := check(g, gen); err != nil {
		return res, err
	}
	err = rtx.QueryRowContext(ctx, `SELECT max_commit_seq FROM sync_partitions WHERE partition_id = ?`, partition).Scan(&res.MaxCommitSeq)
	if err != nil && !isNoRows(err) {
		return res, fmt.Errorf("sqlite: query: read max commit seq: %w", err)
	}
	rows, err := rtx.QueryContext(ctx, text, args...)
	if err != nil {
		return res, queryFailed(err)
	}
	defer rows.Close()
	if res.Columns, err = rows.Columns(); err != nil {
		return res, queryFailed(err)
	}
	for rows.Next() {
		if len(res.Rows) == q.MaxRows {
			return storage.QueryResult{}, fmt.Errorf("sqlite: query: more than %d rows: %w", q.MaxRows, storage.ErrQueryTooLarge)
		}
		vals := make([]any, len(res.Columns))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return storage.QueryResult{}, queryFailed(err)
		}
		res.Rows = append(res.Rows, vals)
	}
	if err := rows.Err(); err != nil {
		return storage.QueryResult{}, queryFailed(err)
	}
	return res, nil
}

// queryFailed wraps a failure of the registered statement; a cancelled or
// expired context stays a context error.
func queryFailed(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("sqlite: query: %w", err)
	}
	return fmt.Errorf("sqlite: query: %w: %w", storage.ErrQueryFailed, err)
}
