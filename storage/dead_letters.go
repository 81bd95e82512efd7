package storage

import "context"

// DeadLetters is implemented by every backend's store: an operator's
// actions on dead-lettered reactions. Both act only on a reaction that is
// dead-lettered and report false (nothing written) for any other id.
type DeadLetters interface {
	// RedriveReaction makes the dead-lettered reaction id pending again,
	// due at nowMs, with MaxAttempts more attempts: its attempt count is
	// kept (outcomes are fenced by it, so a late outcome of a claim from
	// before the dead letter cannot match a new claim) and MaxAttempts
	// becomes Attempts+MaxAttempts; its last error is kept until the next
	// attempt.
	RedriveReaction(ctx context.Context, id, nowMs int64) (bool, error)
	// DeleteDeadReaction removes the dead-lettered reaction id.
	DeleteDeadReaction(ctx context.Context, id int64) (bool, error)
}
