package partition

import (
	"context"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// unreadableResult is the stored result of a faulted idempotency read: no
// outcome decodes from it, so replay answers it as an unreadable record.
var unreadableResult = []byte("\x00unreadable")

// lookupIdempotency is the authoritative idempotency read of a push or
// command commit under the partition lock. When Config.IdempotencyFault is
// set and answers true, the record read (prefetched or not) is replaced by
// an unreadable one: the commit is answered rejected with the retryable
// sync.idempotency_cache_miss and nothing is persisted for it (a test
// fault; the read itself still happens, so the transaction's state is
// what production leaves). Without the hook it is tx.LookupIdempotency.
func (p *Partition) lookupIdempotency(ctx context.Context, tx storage.PushTx, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	rec, err := tx.LookupIdempotency(ctx, clientID, clientCommitID)
	if err != nil || p.cfg.IdempotencyFault == nil || !p.cfg.IdempotencyFault() {
		return rec, err
	}
	return &storage.IdempotencyRecord{ClientID: clientID, ClientCommitID: clientCommitID, Status: ssp2.CommitApplied, Result: unreadableResult}, nil
}
