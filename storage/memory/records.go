package memory

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/storage"
)

// idemKey is the key of an idempotency record within its partition.
type idemKey struct{ client, commit string }

// LookupIdempotency returns the committed record, or nil.
func (s *Store) LookupIdempotency(ctx context.Context, partition, clientID, clientCommitID string) (*storage.IdempotencyRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return nil, fmt.Errorf("memory: lookup idempotency: %w", err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	rec, ok := p.idem[idemKey{clientID, clientCommitID}]
	if !ok {
		return nil, nil
	}
	rec = copyIdem(rec)
	return &rec, nil
}

// GetClient returns a copy of the client record, or nil.
func (s *Store) GetClient(ctx context.Context, partition, clientID string) (*storage.ClientRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return nil, fmt.Errorf("memory: get client: %w", err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	rec, ok := p.clients[clientID]
	if !ok {
		return nil, nil
	}
	rec.Subscriptions = cloneBytes(rec.Subscriptions)
	return &rec, nil
}

// PutClient stores a copy of rec, replacing any previous record.
func (s *Store) PutClient(ctx context.Context, partition string, recs ...storage.ClientRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return fmt.Errorf("memory: put client: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rec := range recs {
		rec.Subscriptions = cloneBytes(rec.Subscriptions)
		p.clients[rec.ClientID] = rec
	}
	return nil
}
