package operations

import (
	"context"
	"errors"
	"slices"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Registered queries inside a push transaction (SPEC §6.7-6.8): host
// hooks (engine.CommitView.Query, engine.RowWrite.Query) and commands
// (Invocation.Query) run a registered query over the candidate state.
// They are server code, so the query runs privileged: neither its
// Authorize nor its scope coverage applies, and each relation holds every
// row of the transaction's partition.

// QueryRows is a registered query's answer inside a push transaction:
// the declared columns in order and the rows, values normalized to the
// declared types (see partition.QueryRows).
type QueryRows = partition.QueryRows

// TxQuery runs the registered query id with args (one value per "?":
// nil, bool, int, int64, float64, string or []byte; an int is passed as
// an int64) inside tx with storage.PushTx.Query, and normalizes its rows
// as a remote query's are. It is the engine's partition.Config.TxQuery.
// Errors are *syncerr.Error for the call (operation.unknown,
// operation.invalid_request, operation.query_failed,
// operation.result_too_large, sync.storage.transaction_query_unsupported);
// a storage failure is returned as the storage reported it.
func (r *Registry) TxQuery(ctx context.Context, tx storage.PushTx, id string, args []any) (QueryRows, error) {
	cq := r.Query(id)
	if cq == nil {
		return QueryRows{}, syncerr.New(syncerr.OperationUnknown, "no query %q is registered", id)
	}
	if len(args) != cq.binds {
		return QueryRows{}, syncerr.New(syncerr.OperationInvalidRequest, "query %q takes %d arguments, got %d", id, cq.binds, len(args))
	}
	bound := make([]any, len(args))
	for i, a := range args {
		switch x := a.(type) {
		case int:
			bound[i] = int64(x)
		case nil, bool, int64, float64, string, []byte:
			bound[i] = x
		default:
			return QueryRows{}, syncerr.New(syncerr.OperationInvalidRequest, "query %q: argument %d is a %T (want nil, bool, int, int64, float64, string or []byte)", id, i+1, a)
		}
	}
	// No scope filters: the relations hold the whole partition.
	res, err := tx.Query(ctx, storage.Query{MaxRows: cq.MaxRows, Parts: cq.parts, Args: bound})
	switch {
	case err == nil:
	case errors.Is(err, storage.ErrTxQueryUnsupported):
		return QueryRows{}, syncerr.Wrap(syncerr.TransactionQueryUnsupported, err, "%s", syncerr.MsgTransactionQueryUnsupported)
	case errors.Is(err, storage.ErrQueryTooLarge):
		return QueryRows{}, syncerr.Wrap(syncerr.OperationResultTooLarge, err, "query %q matched more than its %d rows", id, cq.MaxRows)
	case errors.Is(err, storage.ErrQueryFailed):
		return QueryRows{}, syncerr.Wrap(syncerr.OperationQueryFailed, err, "query %q failed", id)
	default:
		return QueryRows{}, err
	}
	rows, err := cq.values(res)
	if err != nil {
		return QueryRows{}, err
	}
	cols := make([]string, len(cq.Columns))
	for i, c := range cq.Columns {
		cols[i] = c.Name
	}
	return QueryRows{Columns: cols, Rows: rows}, nil
}

// Query runs the registered query id with args inside the command's
// transaction, before its mutations are applied (so over the committed
// state, under the partition's write lock): see Registry.TxQuery for the
// rules and errors. A storage failure fails the invocation as a storage
// error (retryable sync.internal_error) whatever Run returns. Outside a
// running command (a zero Invocation) it fails with operation.unknown.
func (inv Invocation) Query(ctx context.Context, id string, args ...any) (QueryRows, error) {
	if inv.query == nil {
		return QueryRows{}, syncerr.New(syncerr.OperationUnknown, "no query %q can run outside a command's transaction", id)
	}
	return inv.query(ctx, id, slices.Clone(args))
}
