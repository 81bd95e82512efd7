package memory

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/synclane/synclane/storage"
)

// reactionQueue is the database's durable-reaction queue (storage.Reactions):
// a map by ID under its own mutex. IDs grow from 1.
type reactionQueue struct {
	mu    sync.Mutex
	next  int64
	items map[int64]*storage.Reaction
}

// publish stores the reactions a push transaction committed.
func (q *reactionQueue) publish(partition string, rs []storage.NewReaction) {
	if len(rs) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.items == nil {
		q.items = map[int64]*storage.Reaction{}
	}
	for _, r := range rs {
		q.next++
		q.items[q.next] = &storage.Reaction{ID: q.next, Partition: partition, CommitSeq: r.CommitSeq, Name: r.Name,
			Payload: slices.Clone(r.Payload), MaxAttempts: r.MaxAttempts, NextAttemptAtMs: r.CreatedAtMs,
			CreatedAtMs: r.CreatedAtMs, UpdatedAtMs: r.CreatedAtMs}
	}
}

// PutReactions stages reactions (storage.ReactionTx); they are published
// by Commit and undone by RollbackToSavepoint and Rollback.
func (tx *pushTx) PutReactions(ctx context.Context, rs []storage.NewReaction) error {
	if err := tx.check(ctx, "put reactions"); err != nil {
		return err
	}
	if err := storage.CheckReactions(rs); err != nil {
		return fmt.Errorf("memory: put reactions: %w", err)
	}
	n := len(tx.reactions)
	for _, r := range rs {
		r.Payload = slices.Clone(r.Payload)
		tx.reactions = append(tx.reactions, r)
	}
	tx.undo = append(tx.undo, func() { tx.reactions = tx.reactions[:n] })
	return nil
}

func (s *Store) reactionQueue() (*reactionQueue, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	return &s.d.reactions, nil
}

// ClaimReactions implements storage.Reactions.
func (s *Store) ClaimReactions(ctx context.Context, nowMs, leaseMs int64, limit int) ([]storage.Reaction, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, err := s.reactionQueue()
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var due []*storage.Reaction
	for _, r := range q.items {
		if r.State != storage.ReactionPending || r.NextAttemptAtMs > nowMs {
			continue
		}
		if r.Attempts >= r.MaxAttempts { // its last claim's lease ran out with no outcome
			r.State, r.LastError, r.UpdatedAtMs = storage.ReactionDead, storage.LeaseExpiredError, nowMs
			continue
		}
		due = append(due, r)
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].NextAttemptAtMs != due[j].NextAttemptAtMs {
			return due[i].NextAttemptAtMs < due[j].NextAttemptAtMs
		}
		return due[i].ID < due[j].ID
	})
	if len(due) > limit {
		due = due[:limit]
	}
	out := make([]storage.Reaction, 0, len(due))
	for _, r := range due {
		r.Attempts++
		r.NextAttemptAtMs, r.UpdatedAtMs = nowMs+leaseMs, nowMs
		out = append(out, copyReaction(r))
	}
	return out, nil
}

func copyReaction(r *storage.Reaction) storage.Reaction {
	c := *r
	c.Payload = slices.Clone(r.Payload)
	return c
}

// CompleteReactions implements storage.Reactions.
func (s *Store) CompleteReactions(ctx context.Context, done []storage.ReactionClaim) (int, error) {
	return s.eachClaim(ctx, done, func(q *reactionQueue, r *storage.Reaction) { delete(q.items, r.ID) })
}

// ReleaseReactions implements storage.Reactions.
func (s *Store) ReleaseReactions(ctx context.Context, claims []storage.ReactionClaim, nowMs int64) (int, error) {
	return s.eachClaim(ctx, claims, func(_ *reactionQueue, r *storage.Reaction) {
		r.Attempts--
		r.NextAttemptAtMs, r.UpdatedAtMs = nowMs, nowMs
	})
}

// eachClaim applies fn, under the queue's lock, to each reaction still
// pending under its claim, and returns how many.
func (s *Store) eachClaim(ctx context.Context, claims []storage.ReactionClaim, fn func(*reactionQueue, *storage.Reaction)) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	q, err := s.reactionQueue()
	if err != nil {
		return 0, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, c := range claims {
		if r := q.items[c.ID]; r != nil && r.State == storage.ReactionPending && r.Attempts == c.Attempt {
			fn(q, r)
			n++
		}
	}
	return n, nil
}

// FailReaction implements storage.Reactions.
func (s *Store) FailReaction(ctx context.Context, id int64, attempt int, errMsg string, retryAtMs int64, dead bool, nowMs int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	q, err := s.reactionQueue()
	if err != nil {
		return false, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.items[id]
	if r == nil || r.State != storage.ReactionPending || r.Attempts != attempt {
		return false, nil
	}
	r.LastError, r.NextAttemptAtMs, r.UpdatedAtMs = storage.CutReactionError(errMsg), retryAtMs, nowMs
	if dead {
		r.State = storage.ReactionDead
	}
	return true, nil
}

// ListReactions implements storage.Reactions.
func (s *Store) ListReactions(ctx context.Context, f storage.ReactionFilter) ([]storage.Reaction, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, err := s.reactionQueue()
	if err != nil {
		return nil, err
	}
	limit := storage.ReactionListLimit(f.Limit)
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []storage.Reaction
	for _, r := range q.items {
		if r.ID > f.AfterID && (f.State == nil || r.State == *f.State) && (f.Partition == "" || r.Partition == f.Partition) {
			out = append(out, copyReaction(r))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// CountReactions implements storage.Reactions.
func (s *Store) CountReactions(ctx context.Context) (storage.ReactionCounts, error) {
	if err := ctx.Err(); err != nil {
		return storage.ReactionCounts{}, err
	}
	q, err := s.reactionQueue()
	if err != nil {
		return storage.ReactionCounts{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var c storage.ReactionCounts
	for _, r := range q.items {
		if r.State == storage.ReactionDead {
			c.Dead++
		} else {
			c.Pending++
		}
	}
	return c, nil
}
