package testcontrol

import (
	"context"
	"errors"

	"github.com/synclane/synclane/storage"
)

// The wrapper passes the optional storage interfaces of the wrapped store
// and its transactions through, so hooks behave under --test-control as
// they do without it.

var errNoReactionQueue = errors.New("testcontrol: the wrapped store has no reaction queue")

// ScanRows implements storage.TxRowScanner when the wrapped transaction does.
func (t *pushTx) ScanRows(ctx context.Context, q storage.RowQuery) ([]storage.RowRecord, error) {
	sc, ok := t.PushTx.(storage.TxRowScanner)
	if !ok {
		return nil, errors.New("testcontrol: the wrapped transaction cannot scan rows")
	}
	return sc.ScanRows(ctx, q)
}

// PutReactions implements storage.ReactionTx when the wrapped transaction does.
func (t *pushTx) PutReactions(ctx context.Context, rs []storage.NewReaction) error {
	rt, ok := t.PushTx.(storage.ReactionTx)
	if !ok {
		return errNoReactionQueue
	}
	return rt.PutReactions(ctx, rs)
}

func (s *Store) queue() (storage.Reactions, error) {
	q, ok := s.Store.(storage.Reactions)
	if !ok {
		return nil, errNoReactionQueue
	}
	return q, nil
}

// ClaimReactions implements storage.Reactions.
func (s *Store) ClaimReactions(ctx context.Context, nowMs, leaseMs int64, limit int) ([]storage.Reaction, error) {
	q, err := s.queue()
	if err != nil {
		return nil, err
	}
	return q.ClaimReactions(ctx, nowMs, leaseMs, limit)
}

// CompleteReactions implements storage.Reactions.
func (s *Store) CompleteReactions(ctx context.Context, done []storage.ReactionClaim) (int, error) {
	q, err := s.queue()
	if err != nil {
		return 0, err
	}
	return q.CompleteReactions(ctx, done)
}

// ReleaseReactions implements storage.Reactions.
func (s *Store) ReleaseReactions(ctx context.Context, claims []storage.ReactionClaim, nowMs int64) (int, error) {
	q, err := s.queue()
	if err != nil {
		return 0, err
	}
	return q.ReleaseReactions(ctx, claims, nowMs)
}

// FailReaction implements storage.Reactions.
func (s *Store) FailReaction(ctx context.Context, id int64, attempt int, errMsg string, retryAtMs int64, dead bool, nowMs int64) (bool, error) {
	q, err := s.queue()
	if err != nil {
		return false, err
	}
	return q.FailReaction(ctx, id, attempt, errMsg, retryAtMs, dead, nowMs)
}

// ListReactions implements storage.Reactions.
func (s *Store) ListReactions(ctx context.Context, f storage.ReactionFilter) ([]storage.Reaction, error) {
	q, err := s.queue()
	if err != nil {
		return nil, err
	}
	return q.ListReactions(ctx, f)
}

// CountReactions implements storage.Reactions.
func (s *Store) CountReactions(ctx context.Context) (storage.ReactionCounts, error) {
	q, err := s.queue()
	if err != nil {
		return storage.ReactionCounts{}, err
	}
	return q.CountReactions(ctx)
}
