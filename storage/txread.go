package storage

import (
	"context"

	"github.com/synclane/synclane/protocol/schema"
)

// TxRowScanner is implemented by every backend's PushTx: ScanRows as the
// transaction sees it (its own staged writes included), for host hooks
// that read candidate state inside the push transaction (the whole-commit
// validator). It has Store.ScanRows' contract (scope match, primary-key
// byte order, AfterRowID, Limit) on the transaction's partition.
type TxRowScanner interface {
	ScanRows(ctx context.Context, q RowQuery) ([]RowRecord, error)
}

// TxClientWriter is implemented by a PushTx that can write client records
// inside the push transaction, so a partition that pushes does not pay a
// write transaction of its own for its buffered client records. PutClients
// has Store.PutClient's contract on the transaction's partition (an
// existing record's ActorID never changes; records CheckClient refuses are
// skipped and named by an error wrapping ErrUnstorable, the others
// written), except that the records are durable exactly when the
// transaction commits and are discarded with it on Rollback.
type TxClientWriter interface {
	PutClients(ctx context.Context, recs ...ClientRecord) error
}

// TxCommittedGate is implemented by a PushTx whose Commit also reads the
// serve gate again once the transaction is durable, one read for the
// whole commit group it shared a COMMIT with. After Commit returned nil,
// CommittedGate returns that read for the transaction's partition, at the
// running version of the transaction's own ReadServeGate call; ok is
// false when there is none (no gate read in the transaction, or the read
// after the COMMIT failed) and always before Commit returned. A reply
// built entirely before Commit may be verified against it: the read
// happened after the commit.
type TxCommittedGate interface {
	CommittedGate() (g ServeGate, ok bool)
}

// IdempotencyKey names one idempotency record of a partition.
type IdempotencyKey struct {
	ClientID, ClientCommitID string
}

// RowKey names one row of a partition.
type RowKey struct {
	Table *schema.Table
	RowID string
}

// PushPrefetcher is implemented by a PushTx that can read many
// idempotency records and rows in one round trip (PostgreSQL). Prefetch
// reads the named keys as they stand in the transaction, so that the
// LookupIdempotency and GetRow calls that follow for them answer from
// memory. It changes no answer: each prefetched value is handed out once,
// a row written in the transaction afterwards (PutRow, DeleteRow) is read
// from the database again, and a record put in the transaction is answered
// from the transaction as before. Keys that are not Storable are skipped;
// keys of unknown tables are the caller's to leave out. An error leaves
// the transaction as usable as a failed LookupIdempotency would.
type PushPrefetcher interface {
	Prefetch(ctx context.Context, idem []IdempotencyKey, rows []RowKey) error
}
