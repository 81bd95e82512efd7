package memory

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/storage"
)

// idemKey is the key of an idempotency record within its partition.
type idemKey struct{ client, commit string }

// idemEntry is a stored idempotency record with its log position (the
// partition's max commit seq when it was written).
type idemEntry struct {
	rec storage.IdempotencyRecord
	pos int64
}

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
	e, ok := p.idem[idemKey{clientID, clientCommitID}]
	if !ok {
		return nil, nil
	}
	rec := copyIdem(e.rec)
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

// PutClient stores a copy of each record storage.StorableClients keeps,
// replacing any previous record but keeping its ActorID, all at once under
// the partition's state lock. Skipped records are named by the returned
// error (storage.ErrUnstorable).
func (s *Store) PutClient(ctx context.Context, partition string, recs ...storage.ClientRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return fmt.Errorf("memory: put client: %w", err)
	}
	keep, skipErr := storage.StorableClients(partition, recs)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rec := range keep {
		rec.Subscriptions = cloneBytes(rec.Subscriptions)
		if old, ok := p.clients[rec.ClientID]; ok {
			rec.ActorID = old.ActorID
		}
		p.clients[rec.ClientID] = rec
	}
	if skipErr != nil {
		return fmt.Errorf("memory: put client: %w", skipErr)
	}
	return nil
}

// AdvanceClients raises the cursors and timestamps of existing records
// under the partition's state lock, which RotateLogEpoch holds while it
// changes the epoch and deletes the records.
func (s *Store) AdvanceClients(ctx context.Context, partition, logEpoch string, acks ...storage.ClientAdvance) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return 0, fmt.Errorf("memory: advance clients: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.info.Exists || p.info.LogEpoch != logEpoch {
		return 0, nil
	}
	n := 0
	for _, a := range acks {
		rec, ok := p.clients[a.ClientID]
		if !ok || rec.ActorID != a.ActorID {
			continue
		}
		rec.Cursor, rec.UpdatedAtMs = max(rec.Cursor, a.Cursor), max(rec.UpdatedAtMs, a.AtMs)
		p.clients[a.ClientID] = rec
		n++
	}
	return n, nil
}

// HandOverClients writes the records storage.StorableClients keeps, each
// only when the partition has none for its clientID or holds one bound to
// the same actor and not newer (storage.ClientHandOver), all at once under the
// partition's state lock, which RotateLogEpoch holds while it changes the
// epoch and deletes the records. The memory store has no fences.
func (s *Store) HandOverClients(ctx context.Context, partition, logEpoch string, recs ...storage.ClientRecord) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return 0, fmt.Errorf("memory: hand over clients: %w", err)
	}
	keep, skipErr := storage.StorableClients(partition, recs)
	if skipErr != nil {
		skipErr = fmt.Errorf("memory: hand over clients: %w", skipErr)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.info.Exists || p.info.LogEpoch != logEpoch {
		return 0, skipErr
	}
	n := 0
	for _, rec := range keep {
		if old, ok := p.clients[rec.ClientID]; ok && (old.ActorID != rec.ActorID || old.UpdatedAtMs > rec.UpdatedAtMs) {
			continue
		}
		rec.Subscriptions = cloneBytes(rec.Subscriptions)
		p.clients[rec.ClientID] = rec
		n++
	}
	return n, skipErr
}

// BindClient returns the actor of the existing record of clientID or, when
// there is none, creates one bound to actorID (cursor -1, no
// subscriptions), under the partition's state lock, which every handle
// sharing the database (Share) takes.
func (s *Store) BindClient(ctx context.Context, partition, clientID, actorID string, nowMs int64) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := storage.CheckClient(partition, storage.ClientRecord{ClientID: clientID, ActorID: actorID}); err != nil {
		return "", fmt.Errorf("memory: bind client: %w", err)
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return "", fmt.Errorf("memory: bind client: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.clients[clientID]; ok {
		return old.ActorID, nil
	}
	p.clients[clientID] = storage.ClientRecord{ClientID: clientID, ActorID: actorID, Cursor: -1, UpdatedAtMs: nowMs}
	return actorID, nil
}

// BindClients implements storage.Clients: every binding under the
// partition's state lock at once.
func (s *Store) BindClients(ctx context.Context, partition string, nowMs int64, binds ...storage.ClientBinding) ([]storage.BoundClient, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := storage.CheckBindings(partition, binds); err != nil {
		return nil, fmt.Errorf("memory: bind clients: %w", err)
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return nil, fmt.Errorf("memory: bind clients: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]storage.BoundClient, len(binds))
	for i, b := range binds {
		if old, ok := p.clients[b.ClientID]; ok {
			out[i] = storage.BoundClient{ActorID: old.ActorID}
			continue
		}
		p.clients[b.ClientID] = storage.ClientRecord{ClientID: b.ClientID, ActorID: b.ActorID, Cursor: -1, UpdatedAtMs: nowMs}
		out[i] = storage.BoundClient{ActorID: b.ActorID, Created: true}
	}
	return out, nil
}
