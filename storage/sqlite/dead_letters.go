package sqlite

import (
	"context"
)

// deadWrite runs one statement on dead-lettered reaction rows under the
// write lock and reports whether it changed one.
func (s *Store) deadWrite(ctx context.Context, what, q string, args ...any) (bool, error) {
	var n int64
	err := s.writeReactions(ctx, what, func(ctx context.Context) error {
		res, err := s.conn.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// RedriveReaction implements storage.Reactions.
func (s *Store) RedriveReaction(ctx context.Context, id, nowMs int64) (bool, error) {
	return s.deadWrite(ctx, "redrive reaction", `UPDATE sync_reactions SET state = 0, max_attempts = attempts + max_attempts, next_attempt_at_ms = ?, updated_at_ms = ?
		WHERE id = ? AND state = 1`, nowMs, nowMs, id)
}

// DeleteDeadReaction implements storage.Reactions.
func (s *Store) DeleteDeadReaction(ctx context.Context, id int64) (bool, error) {
	return s.deadWrite(ctx, "delete dead reaction", `DELETE FROM sync_reactions WHERE id = ? AND state = 1`, id)
}
