package reactions

import (
	"context"
	"errors"
	"fmt"

	"github.com/synclane/synclane/storage"
)

// ErrNotDeadLettered reports a dead-letter action on an id that is not a
// dead-lettered reaction (unknown, pending, or already removed).
var ErrNotDeadLettered = errors.New("engine: no dead-lettered reaction with that id")

// deadLetters returns the queue whose dead-letter actions are served.
func (s *Service) deadLetters() (storage.Reactions, error) {
	if s.w == nil {
		return nil, ErrNoReactions
	}
	return s.w.queue, nil
}

// Redrive makes the dead-lettered reaction id pending again with
// a full set of attempts, due now, and wakes this process's worker (it is
// delivered at least once more, by whichever process claims it first).
// An id that is not dead-lettered is ErrNotDeadLettered; an engine
// without reaction handlers, ErrNoReactions.
func (s *Service) Redrive(ctx context.Context, id int64) error {
	dl, err := s.deadLetters()
	if err != nil {
		return err
	}
	ok, err := dl.RedriveReaction(ctx, id, s.w.cfg.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("engine: redrive reaction %d: %w", id, err)
	}
	if !ok {
		return fmt.Errorf("%w: %d", ErrNotDeadLettered, id)
	}
	s.w.poke()
	return nil
}

// DeleteDead removes the dead-lettered reaction id for good (it
// is never delivered). Errors as Redrive.
func (s *Service) DeleteDead(ctx context.Context, id int64) error {
	dl, err := s.deadLetters()
	if err != nil {
		return err
	}
	ok, err := dl.DeleteDeadReaction(ctx, id)
	if err != nil {
		return fmt.Errorf("engine: delete reaction %d: %w", id, err)
	}
	if !ok {
		return fmt.Errorf("%w: %d", ErrNotDeadLettered, id)
	}
	return nil
}
