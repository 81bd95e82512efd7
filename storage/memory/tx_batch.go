package memory

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/storage"
)

// PutClients answers storage.PushTx: the records storage.StorableClients
// keeps are staged (copies, undone by RollbackToSavepoint) and published
// with Commit under the partition's state lock, each keeping the ActorID
// of the record it replaces then (as PutClient does).
func (tx *pushTx) PutClients(ctx context.Context, recs ...storage.ClientRecord) error {
	if err := tx.check(ctx, "put clients"); err != nil {
		return err
	}
	keep, skipErr := storage.StorableClients(tx.info.Partition, recs)
	for _, rec := range keep {
		rec.Subscriptions = cloneBytes(rec.Subscriptions)
		tx.clients = append(tx.clients, rec)
	}
	if n := len(keep); n > 0 {
		tx.undo = append(tx.undo, func() { tx.clients = tx.clients[:len(tx.clients)-n] })
	}
	if skipErr != nil {
		return fmt.Errorf("memory: put clients: %w", skipErr)
	}
	return nil
}

// publishClients writes the staged client records; p.mu must be held for
// writing.
func (tx *pushTx) publishClients(p *part) {
	for _, rec := range tx.clients {
		if old, ok := p.clients[rec.ClientID]; ok {
			rec.ActorID = old.ActorID
		}
		p.clients[rec.ClientID] = rec
	}
}

// CommittedGate answers storage.PushTx: the memory store reads no gate
// after its commit, so there is none (ok false).
func (tx *pushTx) CommittedGate() (storage.ServeGate, bool) { return storage.ServeGate{}, false }

// Prefetch answers storage.PushTx: every lookup is a map read already, so
// there is nothing to read ahead; it fails only after Commit or Rollback.
func (tx *pushTx) Prefetch(context.Context, []storage.IdempotencyKey, []storage.RowKey) error {
	if tx.done {
		return fmt.Errorf("memory: prefetch: %w", storage.ErrTxDone)
	}
	return nil
}
