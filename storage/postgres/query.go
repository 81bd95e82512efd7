package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// Query runs a registered query in one REPEATABLE READ READ ONLY
// transaction: the serve gate, the partition's max commit seq and the
// statement all read the snapshot its first statement takes, and the
// statement cannot write. Registered SQL uses the "?" placeholders the
// engine compiled into bind parts; they are rendered as $n here. Server
// errors of the statement itself (any SQLSTATE but connection, resource
// and operator classes) are storage.ErrQueryFailed.
func (s *Store) Query(ctx context.Context, partition string, running int32, q storage.Query, check func(storage.ServeGate) error) (storage.QueryResult, error) {
	var res storage.QueryResult
	if err := s.ready(); err != nil {
		return res, err
	}
	text, args, err := s.renderQuery(q, partition)
	if err != nil {
		return res, err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return res, classify("Query", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	g, err := s.readGate(ctx, tx, partition, running)
	if err != nil {
		return res, classify("Query", err)
	}
	if err := check(g); err != nil {
		return res, err
	}
	err = tx.QueryRow(ctx, `SELECT max_commit_seq FROM `+s.q.partitions+` WHERE partition = $1`, partition).Scan(&res.MaxCommitSeq)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return res, classify("Query", err)
	}
	out, err := readQueryRows(tx.Query(ctx, text, args...))(q.MaxRows)
	if err != nil {
		return storage.QueryResult{}, err
	}
	out.MaxCommitSeq = res.MaxCommitSeq
	return out, nil
}

// renderQuery renders q for partition with the store's ensured table
// names ($n parameters, scope lists bound as arrays).
func (s *Store) renderQuery(q storage.Query, partition string) (string, []any, error) {
	s.mu.RLock()
	tables := s.tables
	s.mu.RUnlock()
	var missing error
	d := storage.QueryDialect{
		Placeholder: func(n int) string { return "$" + strconv.Itoa(n) },
		Table: func(t *schema.Table) string {
			if ts, ok := tables[t.Name]; ok {
				return ts.ident
			}
			missing = fmt.Errorf("postgres: query: table %q is not in the ensured schema", t.Name)
			return qualify(s.schema, t.Name)
		},
		IntList: func(col, ph string, vals []int64) (string, any) {
			return col + " = ANY(" + ph + "::bigint[])", vals
		},
		TextList: func(col, ph string, vals []string) (string, any) {
			return col + " = ANY(" + ph + "::text[])", vals
		},
	}
	text, args, err := storage.RenderQuery(q, partition, d)
	if err != nil {
		return "", nil, fmt.Errorf("postgres: query: %w", err)
	}
	return text, args, missing
}

// readQueryRows returns the reader of a registered statement's result
// (rows, err as Query returned them): it closes rows and returns the
// columns and at most max rows (one more is storage.ErrQueryTooLarge).
func readQueryRows(rows pgx.Rows, err error) func(max int) (storage.QueryResult, error) {
	return func(max int) (storage.QueryResult, error) {
		var res storage.QueryResult
		if err != nil {
			return res, queryFailed(err)
		}
		defer rows.Close()
		for _, f := range rows.FieldDescriptions() {
			res.Columns = append(res.Columns, f.Name)
		}
		for rows.Next() {
			if len(res.Rows) == max {
				return storage.QueryResult{}, fmt.Errorf("postgres: query: more than %d rows: %w", max, storage.ErrQueryTooLarge)
			}
			vals, err := rows.Values()
			if err != nil {
				return storage.QueryResult{}, queryFailed(err)
			}
			res.Rows = append(res.Rows, vals)
		}
		if err := rows.Err(); err != nil {
			return storage.QueryResult{}, queryFailed(err)
		}
		return res, nil
	}
}

// Query answers storage.PushTx: the registered statement runs on this
// transaction's connection, so it reads the transaction's row writes
// (they are sent as they are made; only the log waits for Commit). It
// runs in a subtransaction of its own made read-only (SET LOCAL
// transaction_read_only: a statement that tries to write, also through a
// function or a sequence, fails with storage.ErrQueryFailed) and always
// rolled back, so nothing it did outlives it and a failed statement
// leaves the push transaction usable. It costs three round trips: the
// setup, the statement, the rollback.
func (tx *pushTx) Query(ctx context.Context, q storage.Query) (storage.QueryResult, error) {
	if err := tx.check(); err != nil {
		return storage.QueryResult{}, err
	}
	text, args, err := tx.s.renderQuery(q, tx.partition)
	if err != nil {
		return storage.QueryResult{}, err
	}
	// The subtransaction is set up in a round trip of its own: a batch
	// would have the statement parsed before SAVEPOINT runs, and a parse
	// error then aborts the push transaction itself.
	if _, err := tx.conn.Exec(ctx, "SAVEPOINT synclane_query; SET LOCAL transaction_read_only = on"); err != nil {
		return storage.QueryResult{}, classify("Query", err)
	}
	res, err := readQueryRows(tx.conn.Query(ctx, text, args...))(q.MaxRows)
	// Undo whatever the statement did; this also ends the subtransaction
	// a failed statement aborted. It fails only when the connection is
	// gone or broken: a storage failure whatever the statement did.
	if _, uerr := tx.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT synclane_query; RELEASE SAVEPOINT synclane_query"); uerr != nil {
		return storage.QueryResult{}, classify("Query", uerr)
	}
	if err != nil {
		return storage.QueryResult{}, err
	}
	res.MaxCommitSeq = tx.Partition().MaxCommitSeq
	return res, nil
}

// queryFailed classifies a failure of the registered statement: a server
// error that is not transient is the statement's own (ErrQueryFailed);
// anything else (connection loss, cancellation) is a storage failure.
func queryFailed(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && !IsRetryable(err) {
		return &Error{Op: "Query", Code: pg.Code, err: fmt.Errorf("%w: %w", storage.ErrQueryFailed, err)}
	}
	return classify("Query", err)
}
