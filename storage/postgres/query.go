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
		return res, fmt.Errorf("postgres: query: %w", err)
	}
	if missing != nil {
		return res, missing
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
	rows, err := tx.Query(ctx, text, args...)
	if err != nil {
		return res, queryFailed(err)
	}
	defer rows.Close()
	for _, f := range rows.FieldDescriptions() {
		res.Columns = append(res.Columns, f.Name)
	}
	for rows.Next() {
		if len(res.Rows) == q.MaxRows {
			return storage.QueryResult{}, fmt.Errorf("postgres: query: more than %d rows: %w", q.MaxRows, storage.ErrQueryTooLarge)
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
