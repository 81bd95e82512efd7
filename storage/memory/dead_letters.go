package memory

import (
	"context"

	"github.com/synclane/synclane/storage"
)

// deadLetter runs fn on the dead-lettered reaction id under the queue
// lock; false when there is none.
func (s *Store) deadLetter(ctx context.Context, id int64, fn func(q *reactionQueue, r *storage.Reaction)) (bool, error) {
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
	if r == nil || r.State != storage.ReactionDead {
		return false, nil
	}
	fn(q, r)
	return true, nil
}

// RedriveReaction implements storage.Reactions.
func (s *Store) RedriveReaction(ctx context.Context, id, nowMs int64) (bool, error) {
	return s.deadLetter(ctx, id, func(_ *reactionQueue, r *storage.Reaction) {
		r.State, r.MaxAttempts, r.NextAttemptAtMs, r.UpdatedAtMs = storage.ReactionPending, r.Attempts+r.MaxAttempts, nowMs, nowMs
	})
}

// DeleteDeadReaction implements storage.Reactions.
func (s *Store) DeleteDeadReaction(ctx context.Context, id int64) (bool, error) {
	return s.deadLetter(ctx, id, func(q *reactionQueue, r *storage.Reaction) { delete(q.items, r.ID) })
}
