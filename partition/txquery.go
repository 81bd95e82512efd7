package partition

import (
	"context"
	"errors"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Registered queries inside the push transaction (SPEC §6.7-6.8): row
// validators, the whole-commit validator and commands read the candidate
// state with a query the host registered (the engine's operations
// registry), run on the push transaction itself. The partition does not
// know the registry: Config.TxQuery, set by the engine, looks the query
// up, binds it and runs it with storage.PushTx.Query.

// QueryRows is a registered query's answer inside the push transaction:
// the query's declared result columns, in declared order, and its rows,
// each value normalized to its column's declared type as a remote query
// result is (nil, int64, float64, bool, string, []byte).
type QueryRows struct {
	Columns []string
	Rows    [][]any
}

// TxQueryFunc runs the registered query id with args (one value per "?"
// of its statement) inside the push transaction tx, on tx's partition.
// A failure of the call itself (an unknown id, wrong arguments, a
// statement that failed or matched more than its MaxRows, a backend
// without transaction queries) is a *syncerr.Error, after which tx is
// still usable; any other error is a storage failure.
type TxQueryFunc func(ctx context.Context, tx storage.PushTx, id string, args []any) (QueryRows, error)

// txQuery runs a registered query for a hook or command in tx; failed
// receives a storage failure (the caller then fails as storage does,
// whatever the host does with the error).
func (p *Partition) txQuery(ctx context.Context, tx storage.PushTx, id string, args []any, failed func(error)) (QueryRows, error) {
	if p.cfg.TxQuery == nil {
		return QueryRows{}, syncerr.New(syncerr.OperationUnknown, "no query %q is registered (the engine has no operations registry)", id)
	}
	rows, err := p.cfg.TxQuery(ctx, tx, id, args)
	if err != nil {
		var coded *syncerr.Error
		if !errors.As(err, &coded) {
			failed(err)
		}
		return QueryRows{}, err
	}
	return rows, nil
}

// Query runs the registered query id with args (one value per "?" of its
// statement: nil, bool, int, int64, float64, string or []byte) inside
// the push transaction, over the candidate state: the partition's rows
// as the commit leaves them, its own writes included (SPEC §6.8). It is
// the same statement a remote caller runs, compiled and bound the same
// way, with the same MaxRows, but privileged: hooks are server code, so
// neither the query's Authorize nor its scope coverage applies, and its
// relations hold every row of the commit's partition (never another
// partition's). It cannot write. Errors are *syncerr.Error for the call:
// operation.unknown (no such query), operation.invalid_request (wrong
// arguments), operation.query_failed (the statement failed, tried to
// write, or a value does not fit its declared column),
// operation.result_too_large, and
// sync.storage.transaction_query_unsupported from a backend whose push
// transaction cannot run SQL (storage.ErrTxQueryUnsupported). A storage
// failure fails the commit as a storage error whatever the validator
// returns. Returned as is, any of these
// rejects the commit with sync.constraint_violation (logged), like any
// other validator error.
//
// Cost: one statement on the push transaction, under the partition's
// write lock (three round trips on PostgreSQL); on SQLite the statement
// is not interrupted by the storage timeout, so keep it indexed and
// small.
func (c *CommitView) Query(ctx context.Context, id string, args ...any) (QueryRows, error) {
	return c.commit.query(ctx, id, args)
}

// Query runs a registered query inside the push transaction as
// CommitView.Query does. A row validator runs before its own write is
// staged: the query sees the commit's earlier writes, not this one.
func (w *RowWrite) Query(ctx context.Context, id string, args ...any) (QueryRows, error) {
	return w.commit.query(ctx, id, args)
}

func (s *commitState) query(ctx context.Context, id string, args []any) (QueryRows, error) {
	return s.p.txQuery(ctx, s.tx, id, args, s.storageFailed)
}
