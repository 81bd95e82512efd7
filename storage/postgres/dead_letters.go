package postgres

import (
	"context"
)

// RedriveReaction implements storage.Reactions.
func (s *Store) RedriveReaction(ctx context.Context, id, nowMs int64) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	ct, err := s.pool.Exec(ctx, `UPDATE `+s.reactionsTable()+` SET state = 0, max_attempts = attempts + max_attempts, next_attempt_at_ms = $2, updated_at_ms = $2
WHERE id = $1 AND state = 1`, id, nowMs)
	if err != nil {
		return false, classify("RedriveReaction", err)
	}
	return ct.RowsAffected() == 1, nil
}

// DeleteDeadReaction implements storage.Reactions.
func (s *Store) DeleteDeadReaction(ctx context.Context, id int64) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	ct, err := s.pool.Exec(ctx, `DELETE FROM `+s.reactionsTable()+` WHERE id = $1 AND state = 1`, id)
	if err != nil {
		return false, classify("DeleteDeadReaction", err)
	}
	return ct.RowsAffected() == 1, nil
}
