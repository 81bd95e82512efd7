package storage

import "context"

// TxRowScanner is implemented by every backend's PushTx: ScanRows as the
// transaction sees it (its own staged writes included), for host hooks
// that read candidate state inside the push transaction (the whole-commit
// validator). It has Store.ScanRows' contract (scope match, primary-key
// byte order, AfterRowID, Limit) on the transaction's partition.
type TxRowScanner interface {
	ScanRows(ctx context.Context, q RowQuery) ([]RowRecord, error)
}
