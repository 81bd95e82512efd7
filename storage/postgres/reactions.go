package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
)

// The durable-reaction queue (storage.Reactions). Reactions are inserted
// by the push transaction (as a row write: inside its savepoint), so they
// exist exactly when their commit does. Any number of processes claim from
// the queue at once: a claim is one UPDATE over a sub-select taking the
// due rows FOR UPDATE SKIP LOCKED, which moves their next attempt to the
// end of the lease, so two claims never return the same reaction while
// its lease runs. Outcomes are fenced by the attempt number.

func (s *Store) reactionsTable() string { return qualify(s.schema, "sync_reactions") }

const reactionCols = `id, partition, commit_seq, name, payload, max_attempts, attempts, state, next_attempt_at_ms, last_error, created_at_ms, updated_at_ms`

// ensureReactions creates the reaction table and its due index when they
// are missing (checked first, so a restart takes no lock on the table).
func (s *Store) ensureReactions(ctx context.Context, tx pgx.Tx) error {
	t := s.reactionsTable()
	idx := qualify(s.schema, "sync_reactions_due")
	var hasTable, hasIdx bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, t, idx).Scan(&hasTable, &hasIdx); err != nil {
		return err
	}
	if !hasTable {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t+` (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	partition text COLLATE "C" NOT NULL,
	commit_seq bigint NOT NULL,
	name text NOT NULL,
	payload bytea NOT NULL,
	max_attempts integer NOT NULL,
	attempts integer NOT NULL DEFAULT 0,
	state smallint NOT NULL DEFAULT 0,
	next_attempt_at_ms bigint NOT NULL,
	last_error text NOT NULL DEFAULT '',
	created_at_ms bigint NOT NULL,
	updated_at_ms bigint NOT NULL
)`); err != nil {
			return err
		}
	}
	if !hasIdx {
		if _, err := tx.Exec(ctx, `CREATE INDEX IF NOT EXISTS sync_reactions_due ON `+t+` (state, next_attempt_at_ms, id)`); err != nil {
			return err
		}
	}
	return nil
}

// PutReactions inserts the reactions in one statement in the push
// transaction (storage.ReactionTx), after a pending savepoint.
func (tx *pushTx) PutReactions(ctx context.Context, rs []storage.NewReaction) error {
	if err := tx.check(); err != nil {
		return err
	}
	if err := storage.CheckReactions(rs); err != nil {
		return fmt.Errorf("postgres: PutReactions: %w", err)
	}
	if len(rs) == 0 {
		return nil
	}
	seqs, names, payloads, maxes, ats := make([]int64, len(rs)), make([]string, len(rs)), make([][]byte, len(rs)), make([]int32, len(rs)), make([]int64, len(rs))
	for i, r := range rs {
		seqs[i], names[i], maxes[i], ats[i] = r.CommitSeq, r.Name, int32(r.MaxAttempts), r.CreatedAtMs
		payloads[i] = r.Payload
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
	}
	q := `INSERT INTO ` + tx.s.reactionsTable() + ` (partition, commit_seq, name, payload, max_attempts, next_attempt_at_ms, created_at_ms, updated_at_ms)
SELECT $1, u.seq, u.name, u.payload, u.max, u.at, u.at, u.at FROM unnest($2::bigint[], $3::text[], $4::bytea[], $5::int[], $6::bigint[]) AS u(seq, name, payload, max, at)`
	return classify("PutReactions", tx.exec(ctx, q, tx.partition, seqs, names, payloads, maxes, ats))
}

func collectReactions(rows pgx.Rows) ([]storage.Reaction, error) {
	defer rows.Close()
	var out []storage.Reaction
	for rows.Next() {
		var r storage.Reaction
		var state int16
		var maxA, att int32
		if err := rows.Scan(&r.ID, &r.Partition, &r.CommitSeq, &r.Name, &r.Payload, &maxA, &att, &state,
			&r.NextAttemptAtMs, &r.LastError, &r.CreatedAtMs, &r.UpdatedAtMs); err != nil {
			return nil, err
		}
		r.MaxAttempts, r.Attempts, r.State = int(maxA), int(att), storage.ReactionState(state)
		out = append(out, r)
	}
	return out, rows.Err()
}

// ClaimReactions implements storage.Reactions with FOR UPDATE SKIP LOCKED.
func (s *Store) ClaimReactions(ctx context.Context, nowMs, leaseMs int64, limit int) ([]storage.Reaction, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	t := s.reactionsTable()
	// The CTE dead-letters due reactions whose last claim's lease ran out
	// with no outcome; the claim takes only ones with attempts left.
	q := `WITH spent AS (UPDATE ` + t + ` SET state = 1, last_error = $4, updated_at_ms = $1
WHERE id IN (SELECT id FROM ` + t + ` WHERE state = 0 AND next_attempt_at_ms <= $1 AND attempts >= max_attempts FOR UPDATE SKIP LOCKED))
UPDATE ` + t + ` SET attempts = attempts + 1, next_attempt_at_ms = $1 + $2, updated_at_ms = $1
WHERE id IN (SELECT id FROM ` + t + ` WHERE state = 0 AND next_attempt_at_ms <= $1 AND attempts < max_attempts ORDER BY next_attempt_at_ms, id LIMIT $3 FOR UPDATE SKIP LOCKED)
RETURNING ` + reactionCols
	var out []storage.Reaction
	err := retry(ctx, "ClaimReactions", func() error {
		rows, err := s.pool.Query(ctx, q, nowMs, leaseMs, limit, storage.LeaseExpiredError)
		if err != nil {
			return err
		}
		out, err = collectReactions(rows)
		return err
	})
	sortByID(out)
	return out, err
}

// sortByID orders claimed reactions by ID (RETURNING promises no order;
// the claimed ones now share their due time).
func sortByID(rs []storage.Reaction) {
	slices.SortFunc(rs, func(a, b storage.Reaction) int { return cmp.Compare(a.ID, b.ID) })
}

// CompleteReactions implements storage.Reactions in one statement.
func (s *Store) CompleteReactions(ctx context.Context, done []storage.ReactionClaim) (int, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	if len(done) == 0 {
		return 0, nil
	}
	ids, attempts := claimArrays(done)
	ct, err := s.pool.Exec(ctx, `DELETE FROM `+s.reactionsTable()+` r USING unnest($1::bigint[], $2::int[]) AS d(id, attempt)
WHERE r.id = d.id AND r.attempts = d.attempt AND r.state = 0`, ids, attempts)
	if err != nil {
		return 0, classify("CompleteReactions", err)
	}
	return int(ct.RowsAffected()), nil
}

// ReleaseReactions implements storage.Reactions in one statement.
func (s *Store) ReleaseReactions(ctx context.Context, claims []storage.ReactionClaim, nowMs int64) (int, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	if len(claims) == 0 {
		return 0, nil
	}
	ids, attempts := claimArrays(claims)
	ct, err := s.pool.Exec(ctx, `UPDATE `+s.reactionsTable()+` r SET attempts = r.attempts - 1, next_attempt_at_ms = $3, updated_at_ms = $3
FROM unnest($1::bigint[], $2::int[]) AS d(id, attempt) WHERE r.id = d.id AND r.attempts = d.attempt AND r.state = 0`, ids, attempts, nowMs)
	if err != nil {
		return 0, classify("ReleaseReactions", err)
	}
	return int(ct.RowsAffected()), nil
}

// FailReaction implements storage.Reactions.
func (s *Store) FailReaction(ctx context.Context, id int64, attempt int, errMsg string, retryAtMs int64, dead bool, nowMs int64) (bool, error) {
	if err := s.ready(); err != nil {
		return false, err
	}
	state := storage.ReactionPending
	if dead {
		state = storage.ReactionDead
	}
	ct, err := s.pool.Exec(ctx, `UPDATE `+s.reactionsTable()+` SET state = $3, next_attempt_at_ms = $4, last_error = $5, updated_at_ms = $6
WHERE id = $1 AND attempts = $2 AND state = 0`, id, attempt, int16(state), retryAtMs, storage.CutReactionError(errMsg), nowMs)
	if err != nil {
		return false, classify("FailReaction", err)
	}
	return ct.RowsAffected() == 1, nil
}

// ListReactions implements storage.Reactions.
func (s *Store) ListReactions(ctx context.Context, f storage.ReactionFilter) ([]storage.Reaction, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if !storage.Storable(f.Partition) {
		return nil, nil
	}
	state := int16(-1)
	if f.State != nil {
		state = int16(*f.State)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+reactionCols+` FROM `+s.reactionsTable()+`
WHERE id > $1 AND ($2 < 0 OR state = $2) AND ($3 = '' OR partition = $3) ORDER BY id LIMIT $4`,
		f.AfterID, state, f.Partition, storage.ReactionListLimit(f.Limit))
	if err != nil {
		return nil, classify("ListReactions", err)
	}
	out, err := collectReactions(rows)
	return out, classify("ListReactions", err)
}

// CountReactions implements storage.Reactions.
func (s *Store) CountReactions(ctx context.Context) (storage.ReactionCounts, error) {
	var c storage.ReactionCounts
	if err := s.ready(); err != nil {
		return c, err
	}
	err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 1) FROM `+s.reactionsTable()).Scan(&c.Pending, &c.Dead)
	return c, classify("CountReactions", err)
}

// claimArrays splits claims into the id and attempt arrays the
// statements unnest.
func claimArrays(claims []storage.ReactionClaim) ([]int64, []int32) {
	ids, attempts := make([]int64, len(claims)), make([]int32, len(claims))
	for i, c := range claims {
		ids[i], attempts[i] = c.ID, int32(c.Attempt)
	}
	return ids, attempts
}
