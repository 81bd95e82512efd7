package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/synclane/synclane/storage"
)

// The durable-reaction queue (storage.Reactions). Reactions are written by
// the push transaction on the writer connection (inside its savepoint);
// claims and outcomes are short write transactions under the write lock,
// so they are serialized with every other writer of the file.
const (
	reactionsTableDDL = `CREATE TABLE IF NOT EXISTS sync_reactions (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		partition_id TEXT NOT NULL,
		commit_seq INTEGER NOT NULL,
		name TEXT NOT NULL,
		payload BLOB NOT NULL,
		max_attempts INTEGER NOT NULL,
		attempts INTEGER NOT NULL DEFAULT 0,
		state INTEGER NOT NULL DEFAULT 0,
		next_attempt_at_ms INTEGER NOT NULL,
		last_error TEXT NOT NULL DEFAULT '',
		created_at_ms INTEGER NOT NULL,
		updated_at_ms INTEGER NOT NULL
	)`
	reactionsIndexDDL = `CREATE INDEX IF NOT EXISTS sync_reactions_due ON sync_reactions (state, next_attempt_at_ms, id)`

	reactionCols   = `id, partition_id, commit_seq, name, payload, max_attempts, attempts, state, next_attempt_at_ms, last_error, created_at_ms, updated_at_ms`
	insertReaction = `INSERT INTO sync_reactions (partition_id, commit_seq, name, payload, max_attempts, next_attempt_at_ms, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	claimReactions = `UPDATE sync_reactions SET attempts = attempts + 1, next_attempt_at_ms = ?1 + ?2, updated_at_ms = ?1 WHERE id IN (SELECT id FROM sync_reactions WHERE state = 0 AND next_attempt_at_ms <= ?1 AND attempts < max_attempts ORDER BY next_attempt_at_ms, id LIMIT ?3) RETURNING ` + reactionCols
	// spentReactions dead-letters due reactions whose last claim's lease
	// ran out with no outcome (ClaimReactions).
	spentReactions = `UPDATE sync_reactions SET state = 1, last_error = ?2, updated_at_ms = ?1 WHERE state = 0 AND next_attempt_at_ms <= ?1 AND attempts >= max_attempts`
	// completeReactions binds the claims as one JSON array of [id, attempt].
	completeReactions = `DELETE FROM sync_reactions WHERE state = 0 AND (id, attempts) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))`
	releaseReactions  = `UPDATE sync_reactions SET attempts = attempts - 1, next_attempt_at_ms = ?2, updated_at_ms = ?2 WHERE state = 0 AND (id, attempts) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?1))`
	failReaction      = `UPDATE sync_reactions SET state = ?, next_attempt_at_ms = ?, last_error = ?, updated_at_ms = ? WHERE id = ? AND attempts = ? AND state = 0`
	listReactions     = `SELECT ` + reactionCols + ` FROM sync_reactions WHERE id > ? AND (? < 0 OR state = ?) AND (? = '' OR partition_id = ?) ORDER BY id LIMIT ?`
	countReactions    = `SELECT COALESCE(SUM(state = 0), 0), COALESCE(SUM(state = 1), 0) FROM sync_reactions`
)

// PutReactions inserts the reactions in the push transaction
// (storage.ReactionTx).
func (tx *pushTx) PutReactions(ctx context.Context, rs []storage.NewReaction) error {
	ctx, err := tx.check(ctx, "put reactions")
	if err != nil {
		return err
	}
	if err := storage.CheckReactions(rs); err != nil {
		return fmt.Errorf("sqlite: put reactions: %w", err)
	}
	if err := tx.write(ctx); err != nil {
		return err
	}
	for _, r := range rs {
		payload := r.Payload
		if payload == nil {
			payload = []byte{}
		}
		st, err := tx.s.writerStmt(ctx, insertReaction)
		if err != nil {
			return fmt.Errorf("sqlite: put reactions: %w", err)
		}
		if _, err := st.ExecContext(ctx, tx.info.Partition, r.CommitSeq, r.Name, payload,
			r.MaxAttempts, r.CreatedAtMs, r.CreatedAtMs, r.CreatedAtMs); err != nil {
			return fmt.Errorf("sqlite: put reactions: %w", err)
		}
	}
	return nil
}

func scanReactions(rows *sql.Rows) ([]storage.Reaction, error) {
	defer rows.Close()
	var out []storage.Reaction
	for rows.Next() {
		var r storage.Reaction
		var state int
		if err := rows.Scan(&r.ID, &r.Partition, &r.CommitSeq, &r.Name, &r.Payload, &r.MaxAttempts, &r.Attempts, &state,
			&r.NextAttemptAtMs, &r.LastError, &r.CreatedAtMs, &r.UpdatedAtMs); err != nil {
			return nil, err
		}
		r.State = storage.ReactionState(state)
		out = append(out, r)
	}
	return out, rows.Err()
}

// writeReactions runs fn in its own write transaction under the write
// lock.
func (s *Store) writeReactions(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	if _, _, _, err := s.current(); err != nil {
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	defer s.unlock()
	return s.inWriteTx(ctx, what, fn)
}

// ClaimReactions implements storage.Reactions.
func (s *Store) ClaimReactions(ctx context.Context, nowMs, leaseMs int64, limit int) ([]storage.Reaction, error) {
	var out []storage.Reaction
	err := s.writeReactions(ctx, "claim reactions", func(ctx context.Context) error {
		spent, err := s.writerStmt(ctx, spentReactions)
		if err != nil {
			return err
		}
		if _, err := spent.ExecContext(ctx, nowMs, storage.LeaseExpiredError); err != nil {
			return err
		}
		st, err := s.writerStmt(ctx, claimReactions)
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(ctx, nowMs, leaseMs, limit)
		if err != nil {
			return err
		}
		out, err = scanReactions(rows)
		return err
	})
	// RETURNING does not promise an order; the claimed ones now share
	// their due time, so ID order is the claim order.
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// ReleaseReactions implements storage.Reactions in one write transaction.
func (s *Store) ReleaseReactions(ctx context.Context, claims []storage.ReactionClaim, nowMs int64) (int, error) {
	return s.execClaims(ctx, "release reactions", releaseReactions, claims, nowMs)
}

// CompleteReactions implements storage.Reactions in one write
// transaction.
func (s *Store) CompleteReactions(ctx context.Context, done []storage.ReactionClaim) (int, error) {
	return s.execClaims(ctx, "complete reactions", completeReactions, done)
}

// execClaims runs statement q, whose first argument is the claims as one
// JSON array of [id, attempt] (then args), in a write transaction, and
// returns the rows it changed.
func (s *Store) execClaims(ctx context.Context, what, q string, claims []storage.ReactionClaim, args ...any) (int, error) {
	if len(claims) == 0 {
		return 0, nil
	}
	pairs := make([][2]int64, len(claims))
	for i, c := range claims {
		pairs[i] = [2]int64{c.ID, int64(c.Attempt)}
	}
	arg, err := json.Marshal(pairs)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.writeReactions(ctx, what, func(ctx context.Context) error {
		st, err := s.writerStmt(ctx, q)
		if err != nil {
			return err
		}
		res, err := st.ExecContext(ctx, append([]any{string(arg)}, args...)...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// FailReaction implements storage.Reactions.
func (s *Store) FailReaction(ctx context.Context, id int64, attempt int, errMsg string, retryAtMs int64, dead bool, nowMs int64) (bool, error) {
	state := storage.ReactionPending
	if dead {
		state = storage.ReactionDead
	}
	var n int64
	err := s.writeReactions(ctx, "fail reaction", func(ctx context.Context) error {
		res, err := s.conn.ExecContext(ctx, failReaction, int(state), retryAtMs, storage.CutReactionError(errMsg), nowMs, id, attempt)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// ListReactions implements storage.Reactions.
func (s *Store) ListReactions(ctx context.Context, f storage.ReactionFilter) ([]storage.Reaction, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: list reactions: %w", err)
	}
	state := -1
	if f.State != nil {
		state = int(*f.State)
	}
	rows, err := s.readQuery(ctx, listReactions, f.AfterID, state, state, f.Partition, f.Partition, storage.ReactionListLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("sqlite: list reactions: %w", err)
	}
	out, err := scanReactions(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list reactions: %w", err)
	}
	return out, nil
}

// CountReactions implements storage.Reactions.
func (s *Store) CountReactions(ctx context.Context) (storage.ReactionCounts, error) {
	var c storage.ReactionCounts
	if _, _, _, err := s.current(); err != nil {
		return c, fmt.Errorf("sqlite: count reactions: %w", err)
	}
	if err := s.readQueryRow(ctx, countReactions).Scan(&c.Pending, &c.Dead); err != nil {
		return c, fmt.Errorf("sqlite: count reactions: %w", err)
	}
	return c, nil
}

// writerStmt returns q prepared on the writer connection, preparing it on
// first use; the caller holds the write lock.
func (s *Store) writerStmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if st := s.wstmts[q]; st != nil {
		return st, nil
	}
	st, err := s.conn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if s.wstmts == nil {
		s.wstmts = map[string]*sql.Stmt{}
	}
	s.wstmts[q] = st
	return st, nil
}
