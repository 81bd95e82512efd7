package sqlite

import (
	"context"
	"database/sql"
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
	out, err := readQueryRows(rows, err, q.MaxRows)
	if err != nil {
		return storage.QueryResult{}, err
	}
	out.MaxCommitSeq = res.MaxCommitSeq
	return out, nil
}

// readQueryRows reads the result of a registered statement (rows, err as
// QueryContext returned them), closing rows: its columns and at most max
// rows (one more is storage.ErrQueryTooLarge).
func readQueryRows(rows *sql.Rows, err error, max int) (storage.QueryResult, error) {
	var res storage.QueryResult
	if err != nil {
		return res, queryFailed(err)
	}
	defer rows.Close()
	if res.Columns, err = rows.Columns(); err != nil {
		return storage.QueryResult{}, queryFailed(err)
	}
	for rows.Next() {
		if len(res.Rows) == max {
			return storage.QueryResult{}, fmt.Errorf("sqlite: query: more than %d rows: %w", max, storage.ErrQueryTooLarge)
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

// The statements that fence a registered query run inside a push
// transaction (pushTx.Query).
const (
	txQuerySavepoint = "SAVEPOINT synclane_query"
	txQueryReadOnly  = "PRAGMA query_only = 1"
	txQueryWritable  = "PRAGMA query_only = 0"
	txQueryUndo      = "ROLLBACK TO synclane_query"
	txQueryRelease   = "RELEASE synclane_query"
)

// Query answers storage.PushTx: the registered statement runs on the
// writer connection inside this transaction, so it reads the rows the
// transaction staged. It runs under PRAGMA query_only (a statement that
// tries to write fails, storage.ErrQueryFailed) and inside a savepoint of
// its own that is always rolled back, so nothing it did outlives it.
// Like every statement of the transaction it runs without ctx's
// cancellation (see check): a slow statement holds the writer until it
// ends.
func (tx *pushTx) Query(ctx context.Context, q storage.Query) (storage.QueryResult, error) {
	ctx, err := tx.check(ctx, "query")
	if err != nil {
		return storage.QueryResult{}, err
	}
	text, args, err := storage.RenderQuery(q, tx.info.Partition, queryDialect)
	if err != nil {
		return storage.QueryResult{}, fmt.Errorf("sqlite: query: %w", err)
	}
	for _, st := range []string{txQuerySavepoint, txQueryReadOnly} {
		if err := tx.s.execWriter(ctx, st); err != nil {
			tx.endQuery(ctx)
			return storage.QueryResult{}, fmt.Errorf("sqlite: query: %s: %w", st, err)
		}
	}
	rows, err := tx.s.conn.QueryContext(ctx, text, args...)
	res, err := readQueryRows(rows, err, q.MaxRows)
	if eerr := tx.endQuery(ctx); eerr != nil {
		return storage.QueryResult{}, eerr // a storage failure, whatever the statement did
	}
	if err != nil {
		return storage.QueryResult{}, err
	}
	res.MaxCommitSeq = tx.info.MaxCommitSeq
	return res, nil
}

// endQuery undoes what Query set up: the connection writable again and
// the query's savepoint rolled back and released. Each step runs even
// when an earlier one failed (a savepoint that was never set fails its
// own steps only); the first failure is returned.
func (tx *pushTx) endQuery(ctx context.Context) error {
	var first error
	for _, st := range []string{txQueryWritable, txQueryUndo, txQueryRelease} {
		if err := tx.s.execWriter(ctx, st); err != nil && first == nil {
			first = fmt.Errorf("sqlite: query: %s: %w", st, err)
		}
	}
	return first
}

// queryFailed wraps a failure of the registered statement; a cancelled or
// expired context stays a context error.
func queryFailed(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("sqlite: query: %w", err)
	}
	return fmt.Errorf("sqlite: query: %w: %w", storage.ErrQueryFailed, err)
}
