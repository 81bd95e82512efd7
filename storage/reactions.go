package storage

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"
)

// Durable reactions (SPEC §6.9): side effects a commit schedules, stored in
// the commit's own transaction and delivered at least once afterwards by
// the engine's reaction worker.

// Reaction limits every backend enforces.
const (
	// MaxReactionsPerCommit bounds the reactions one commit schedules.
	MaxReactionsPerCommit = 100
	// LeaseExpiredError is the last error of a reaction dead-lettered
	// because its last attempt's lease ran out without an outcome.
	LeaseExpiredError = "the lease of its last attempt ran out without an outcome (the worker died or outlived its lease)"
	// MaxReactionAttempts bounds a reaction's MaxAttempts (1-100).
	MaxReactionAttempts = 100
	// MaxReactionNameBytes bounds a reaction's handler name.
	MaxReactionNameBytes = 128
	// MaxReactionPayloadBytes bounds a reaction's payload.
	MaxReactionPayloadBytes = 64 << 10
	// MaxReactionErrorBytes bounds the stored last error (longer ones are
	// cut).
	MaxReactionErrorBytes = 1024
)

// ErrReactionInvalid reports a reaction outside the limits above; nothing
// of the call was written.
var ErrReactionInvalid = errors.New("storage: invalid reaction")

// NewReaction is a reaction a commit schedules.
type NewReaction struct {
	// Name selects the host handler (1-128 bytes).
	Name string
	// Payload is handed to the handler as is (at most 64 KiB).
	Payload []byte
	// MaxAttempts is 1-100.
	MaxAttempts int
	// CommitSeq is the scheduling commit's seq.
	CommitSeq   int64
	CreatedAtMs int64
}

// ReactionState is where a reaction is in its life.
type ReactionState uint8

// Reaction states.
const (
	// ReactionPending: waiting for its next attempt (or being attempted
	// under a lease).
	ReactionPending ReactionState = iota
	// ReactionDead: dead-lettered after MaxAttempts failed attempts.
	ReactionDead
)

// String names the state.
func (s ReactionState) String() string {
	if s == ReactionDead {
		return "dead"
	}
	return "pending"
}

// Reaction is a stored reaction.
type Reaction struct {
	ID          int64
	Partition   string
	CommitSeq   int64
	Name        string
	Payload     []byte
	MaxAttempts int
	// Attempts counts the attempts claimed so far (a claim increments it).
	Attempts int
	State    ReactionState
	// NextAttemptAtMs is when a pending reaction may be claimed: its retry
	// time, or the end of the current claim's lease.
	NextAttemptAtMs int64
	LastError       string
	CreatedAtMs     int64
	UpdatedAtMs     int64
}

// ReactionFilter selects reactions for ListReactions.
type ReactionFilter struct {
	// State selects one state; nil selects both.
	State *ReactionState
	// Partition, when non-empty, selects one partition.
	Partition string
	// AfterID pages: only reactions with a larger ID.
	AfterID int64
	// Limit is the page size: 0 means 100, above 1000 means 1000.
	Limit int
}

// ReactionClaim names one claim of a reaction: its ID and attempt number.
type ReactionClaim struct {
	ID      int64
	Attempt int
}

// ReactionCounts counts stored reactions by state.
type ReactionCounts struct {
	Pending, Dead int64
}

// ReactionTx is the reaction part of every PushTx: it stores the
// reactions in the push transaction (covered by savepoints and Commit like
// any other write of it), for the transaction's partition.
type ReactionTx interface {
	PutReactions(ctx context.Context, rs []NewReaction) error
}

// Reactions is the Reactions role of a backend: the durable reaction
// queue (every backend has it; the engine needs it when reaction handlers
// are configured). Completion calls are fenced by the attempt number, so
// a worker whose lease ran out cannot overwrite the outcome of a later
// claim. RedriveReaction and DeleteDeadReaction are an operator's actions
// on dead-lettered reactions: both act only on a reaction that is
// dead-lettered and report false (nothing written) for any other id.
type Reactions interface {
	// ClaimReactions claims up to limit pending reactions whose
	// NextAttemptAtMs <= nowMs, oldest due first: each gets Attempts+1 and
	// NextAttemptAtMs = nowMs+leaseMs, so no other claim (in any process
	// sharing the store) takes it before the lease ends. It returns them
	// as claimed. A due reaction that already used all its attempts (its
	// last claim's lease ran out with no outcome: the worker died or
	// outlived its lease) is dead-lettered in the same write with
	// LeaseExpiredError, never claimed again.
	ClaimReactions(ctx context.Context, nowMs, leaseMs int64, limit int) ([]Reaction, error)
	// CompleteReactions deletes delivered reactions, each only if it is
	// still under the claim numbered Attempt, in one write; it returns how
	// many it deleted.
	CompleteReactions(ctx context.Context, done []ReactionClaim) (int, error)
	// ReleaseReactions gives back claims whose handlers were not run: each
	// reaction still under the claim numbered Attempt (and pending) gets
	// Attempts-1 and NextAttemptAtMs = nowMs, so the claim does not count
	// as an attempt. It returns how many it gave back, in one write.
	ReleaseReactions(ctx context.Context, claims []ReactionClaim, nowMs int64) (int, error)
	// FailReaction records a failed attempt of the claim numbered attempt:
	// the reaction becomes pending again at retryAtMs, or dead when dead
	// is true. It reports whether the claim was still current.
	FailReaction(ctx context.Context, id int64, attempt int, errMsg string, retryAtMs int64, dead bool, nowMs int64) (bool, error)
	// ListReactions returns reactions by ascending ID.
	ListReactions(ctx context.Context, f ReactionFilter) ([]Reaction, error)
	// CountReactions counts stored reactions by state.
	CountReactions(ctx context.Context) (ReactionCounts, error)
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

// CheckReactions validates reactions before a backend writes them.
func CheckReactions(rs []NewReaction) error {
	if len(rs) > MaxReactionsPerCommit {
		return errors.Join(ErrReactionInvalid, errors.New("more than 100 reactions"))
	}
	for _, r := range rs {
		switch {
		case r.Name == "" || len(r.Name) > MaxReactionNameBytes || !Storable(r.Name):
			return errors.Join(ErrReactionInvalid, errors.New("reaction name must be 1-128 storable bytes"))
		case len(r.Payload) > MaxReactionPayloadBytes:
			return errors.Join(ErrReactionInvalid, errors.New("reaction payload over 64 KiB"))
		case r.MaxAttempts < 1 || r.MaxAttempts > MaxReactionAttempts:
			return errors.Join(ErrReactionInvalid, errors.New("reaction maxAttempts must be 1-100"))
		}
	}
	return nil
}

// CutReactionError cuts an error message to at most MaxReactionErrorBytes
// of storable text (invalid UTF-8 and NUL bytes replaced).
func CutReactionError(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", " "), "?")
	for len(s) > MaxReactionErrorBytes {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}

// ReactionListLimit returns the effective ReactionFilter limit: 100 for
// 0, clamped to 1-1000.
func ReactionListLimit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > 1000:
		return 1000
	}
	return n
}
