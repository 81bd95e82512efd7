package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// handlePushes applies the commits of every job in one storage transaction
// under the partition's write lock, then serves the jobs' pulls (so a client
// sees its own writes) and answers each job. A rejected commit is rolled
// back to its savepoint and never takes its neighbours down; a storage
// failure fails every job of the batch with a retryable internal error
// (their commits were not made durable, and retries are idempotent).
func (w *worker) handlePushes(ctx context.Context, jobs []*syncJob) {
	tx, err := w.e.cfg.Store.BeginPush(ctx, w.partition)
	if err != nil {
		w.failAll(jobs, err)
		return
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	w.staged = w.staged[:0]
	info := tx.Partition()
	w.observeEpoch(info.LogEpoch)
	// The gate is checked inside the transaction, under the partition lock,
	// before anything is read or written.
	g, err := tx.ReadServeGate(ctx, w.e.cfg.Schema.Version)
	if err != nil {
		w.failAll(jobs, err)
		return
	}
	token := partition.TokenOf(g)
	w.token = token
	if r := partition.GateRefusal(g, w.e.cfg.Schema.Version, w.e.cfg.Checkpoints); r != nil {
		for _, j := range jobs {
			j.answer(nil, r.Error())
		}
		return
	}

	type started struct {
		j   *syncJob
		rep *Reply
	}
	ready := make([]started, 0, len(jobs))
	for i, j := range jobs {
		rep, stop, verr := w.precheck(ctx, j, info)
		if verr != nil || stop {
			j.answer(rep, verr)
			continue
		}
		if err := w.applyCommits(ctx, tx, j, rep); err != nil {
			for _, s := range ready {
				s.j.answer(nil, storageErr(err))
			}
			w.failAll(jobs[i:], err)
			return
		}
		ready = append(ready, started{j, rep})
	}
	if err := tx.Commit(ctx); err != nil {
		for _, s := range ready {
			s.j.answer(nil, storageErr(err))
		}
		w.log().Error("push transaction failed to commit", zap.Error(err), zap.Int("requests", len(ready)))
		return
	}
	for _, c := range w.staged {
		w.tail.append(c)
	}
	w.staged = w.staged[:0]
	if seq := tx.Partition().MaxCommitSeq; seq > info.MaxCommitSeq {
		w.knownSeq = max(w.knownSeq, seq)
		if w.e.cfg.OnCommit != nil {
			w.e.cfg.OnCommit(w.partition, seq)
		}
	}
	var fresh *storage.PartitionInfo
	for i := 0; i < len(ready); i++ {
		s := ready[i]
		if s.j.req.Pull != nil {
			if fresh == nil {
				inf, err := w.load(ctx)
				if err != nil {
					// The pushes are durable; the pull part fails retryably and
					// the retried push replays as cached.
					s.j.answer(nil, storageErr(err))
					continue
				}
				fresh = &inf
			}
			if err := w.servePulls(ctx, s.j, *fresh, s.rep); err != nil {
				s.j.answer(nil, err)
				ready = append(ready[:i], ready[i+1:]...)
				i--
				continue
			}
		}
	}
	// Verify before releasing any byte. A refused push is already durable
	// and replays as cached when the client retries.
	if r, err := w.verifyGate(ctx, token); err != nil || r != nil {
		for _, s := range ready {
			s.j.answer(nil, gateErr(r, err))
		}
		return
	}
	for _, s := range ready {
		w.recordClient(s.j, s.rep)
		s.j.answer(s.rep, nil)
	}
}

func (w *worker) failAll(jobs []*syncJob, err error) {
	w.log().Warn("push batch failed", zap.Error(err), zap.Int("requests", len(jobs)))
	for _, j := range jobs {
		j.answer(nil, storageErr(err))
	}
}

// applyCommits applies one request's commits in frame order, appending a
// PUSH_RESULT per commit to rep. Only storage failures are returned.
func (w *worker) applyCommits(ctx context.Context, tx storage.PushTx, j *syncJob, rep *Reply) error {
	cid := j.req.Header.ClientID
	var seen map[string]*ssp2.PushResult
	for _, c := range j.req.Commits {
		if prev, ok := seen[c.ClientCommitID]; ok {
			// A duplicate clientCommitId in one request replays the first copy.
			dup := *prev
			if dup.Status == ssp2.CommitApplied {
				dup.Status = ssp2.CommitCached
			}
			w.addResult(rep, &dup)
			continue
		}
		rec, err := tx.LookupIdempotency(ctx, cid, c.ClientCommitID)
		if err != nil {
			return err
		}
		var pr *ssp2.PushResult
		if rec != nil {
			pr = replay(rec, len(c.Operations))
		} else if pr, err = w.applyCommit(ctx, tx, j, c); err != nil {
			return err
		}
		if seen == nil {
			seen = map[string]*ssp2.PushResult{}
		}
		seen[c.ClientCommitID] = pr
		w.addResult(rep, pr)
	}
	return nil
}

func (w *worker) addResult(rep *Reply, pr *ssp2.PushResult) {
	rep.Frames = append(rep.Frames, pr)
	switch pr.Status {
	case ssp2.CommitApplied:
		rep.Applied++
	case ssp2.CommitCached:
		rep.Cached++
	default:
		rep.Rejected++
	}
}

// applyCommit applies one commit atomically under a savepoint.
func (w *worker) applyCommit(ctx context.Context, tx storage.PushTx, j *syncJob, c *ssp2.PushCommit) (*ssp2.PushResult, error) {
	if err := tx.Savepoint(ctx); err != nil {
		return nil, err
	}
	changes := make([]storage.ChangeRecord, 0, len(c.Operations))
	for i := range c.Operations {
		rej, err := w.applyOp(ctx, tx, j, int32(i), &c.Operations[i], &changes)
		if err != nil {
			return nil, err
		}
		if rej != nil {
			return w.reject(ctx, tx, j, c, rej)
		}
	}
	seq := tx.Partition().MaxCommitSeq + 1
	rec := storage.CommitRecord{
		Seq: seq, CreatedAtMs: w.e.cfg.Now().UnixMilli(), ActorID: j.id.ActorID,
		ClientID: j.req.Header.ClientID, ClientCommitID: c.ClientCommitID, Changes: changes,
	}
	if err := tx.AppendCommit(ctx, rec); err != nil {
		return nil, err
	}
	n := len(c.Operations)
	if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{
		ClientID: j.req.Header.ClientID, ClientCommitID: c.ClientCommitID,
		Status: ssp2.CommitApplied, CommitSeq: seq, Result: encodeApplied(n),
	}); err != nil {
		return nil, err
	}
	if err := tx.ReleaseSavepoint(ctx); err != nil {
		return nil, err
	}
	w.staged = append(w.staged, rec) // joins the log tail once the transaction commits
	return &ssp2.PushResult{ClientCommitID: c.ClientCommitID, Status: ssp2.CommitApplied, CommitSeq: &seq, Results: appliedResults(n)}, nil
}

// reject rolls the commit back to its savepoint and durably records the
// rejection, so a replay answers the same.
func (w *worker) reject(ctx context.Context, tx storage.PushTx, j *syncJob, c *ssp2.PushCommit, rej *ssp2.OpResult) (*ssp2.PushResult, error) {
	if err := tx.RollbackToSavepoint(ctx); err != nil {
		return nil, err
	}
	if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{
		ClientID: j.req.Header.ClientID, ClientCommitID: c.ClientCommitID,
		Status: ssp2.CommitRejected, Result: encodeRejected(rej),
	}); err != nil {
		return nil, err
	}
	if err := tx.ReleaseSavepoint(ctx); err != nil {
		return nil, err
	}
	return &ssp2.PushResult{ClientCommitID: c.ClientCommitID, Status: ssp2.CommitRejected, Results: []ssp2.OpResult{*rej}}, nil
}

// applyOp applies one operation. It returns a rejection record (the commit
// is then rolled back) or a storage error.
func (w *worker) applyOp(ctx context.Context, tx storage.PushTx, j *syncJob, i int32, op *ssp2.Operation, changes *[]storage.ChangeRecord) (*ssp2.OpResult, error) {
	t := w.e.cfg.Schema.Table(op.Table)
	if t == nil {
		return opError(i, syncerr.New(syncerr.UnknownTable, "operation %d names unknown table %q", i, op.Table)), nil
	}
	codec := w.e.codecs[t.Name]
	existing, err := tx.GetRow(ctx, t, op.RowID)
	if err != nil {
		return nil, err
	}
	if op.Op == ssp2.OpDelete {
		if existing == nil {
			return nil, nil // deleting an absent row is applied and emits nothing
		}
		if aerr := partition.AuthorizeRow(t, existing.Values, j.allowed, j.resolved); aerr != nil {
			return opError(i, aerr), nil
		}
		scopes, serr := partition.ExtractScopes(t, existing.Values)
		if serr != nil {
			return opError(i, serr), nil
		}
		if err := tx.DeleteRow(ctx, t, op.RowID); err != nil {
			return nil, err
		}
		*changes = append(*changes, storage.ChangeRecord{Table: t.Name, RowID: op.RowID, Op: ssp2.OpDelete, Scopes: scopes})
		return nil, nil
	}

	row, derr := codec.Decode(op.Payload)
	if derr != nil {
		return opError(i, syncerr.New(syncerr.InvalidRequest, "operation %d: payload is not a valid %q row: %v", i, t.Name, derr)), nil
	}
	if pk, _ := row[t.PK].(string); pk != op.RowID {
		return opError(i, syncerr.New(syncerr.InvalidRequest, "operation %d: rowId %q differs from the payload's primary key %q", i, op.RowID, pk)), nil
	}
	var stored int64
	if existing != nil {
		stored = existing.Version
	}
	verdict := partition.DecideUpsert(existing != nil, stored, op.BaseVersion)
	authRow := row
	if existing != nil {
		authRow = existing.Values // existing rows are authorized as stored, never by payload
	}
	if aerr := partition.AuthorizeRow(t, authRow, j.allowed, j.resolved); aerr != nil {
		return opError(i, aerr), nil
	}
	switch verdict {
	case partition.Conflict:
		serverRow, err := codec.Append(nil, existing.Values)
		if err != nil {
			return nil, fmt.Errorf("encode stored row %s/%s: %w", t.Name, op.RowID, err)
		}
		e := partition.VerdictError(verdict, stored, op.BaseVersion)
		return &ssp2.OpResult{OpIndex: i, Status: ssp2.OpConflict, Code: string(e.Code), Message: e.Message,
			ServerVersion: existing.Version, ServerRow: serverRow}, nil
	case partition.Missing:
		return opError(i, partition.VerdictError(verdict, stored, op.BaseVersion)), nil
	}
	payload := op.Payload
	version := int64(1)
	if existing != nil {
		version = existing.Version + 1
		var changed bool
		if row, changed = partition.KeepStoredScopes(t, existing.Values, row); changed {
			if payload, err = codec.Append(nil, row); err != nil {
				return nil, fmt.Errorf("re-encode %s/%s: %w", t.Name, op.RowID, err)
			}
		}
	}
	scopes, serr := partition.ExtractScopes(t, row)
	if serr != nil {
		return opError(i, serr), nil
	}
	if err := tx.PutRow(ctx, t, storage.RowRecord{RowID: op.RowID, Version: version, Values: row}); err != nil {
		if errors.Is(err, storage.ErrConstraint) {
			return opError(i, syncerr.New(syncerr.ConstraintViolation, "operation %d on %q row %q violates a constraint of the table", i, t.Name, op.RowID)), nil
		}
		return nil, err
	}
	*changes = append(*changes, storage.ChangeRecord{Table: t.Name, RowID: op.RowID, Op: ssp2.OpUpsert, RowVersion: version, Scopes: scopes, Row: payload})
	return nil, nil
}

func opError(i int32, e *syncerr.Error) *ssp2.OpResult {
	return &ssp2.OpResult{OpIndex: i, Status: ssp2.OpError, Code: string(e.Code), Message: e.Message, Retryable: e.Spec().Retryable}
}

func appliedResults(n int) []ssp2.OpResult {
	rs := make([]ssp2.OpResult, n)
	for i := range rs {
		rs[i] = ssp2.OpResult{OpIndex: int32(i), Status: ssp2.OpApplied}
	}
	return rs
}

// storedResult is the idempotency encoding of a commit's results: the op
// count of an applied commit, or the one record of a rejected commit.
type storedResult struct {
	N   int            `json:"n,omitempty"`
	Rej *storedOpError `json:"rej,omitempty"`
}

type storedOpError struct {
	OpIndex       int32  `json:"i"`
	Status        uint8  `json:"s"`
	Code          string `json:"c"`
	Message       string `json:"m"`
	ServerVersion int64  `json:"v,omitempty"`
	ServerRow     []byte `json:"r,omitempty"`
	Retryable     bool   `json:"t,omitempty"`
}

func encodeApplied(n int) []byte { return fmt.Appendf(nil, `{"n":%d}`, n) }

func encodeRejected(r *ssp2.OpResult) []byte {
	b, _ := json.Marshal(storedResult{Rej: &storedOpError{OpIndex: r.OpIndex, Status: uint8(r.Status), Code: r.Code,
		Message: r.Message, ServerVersion: r.ServerVersion, ServerRow: r.ServerRow, Retryable: r.Retryable}})
	return b
}

// replay answers a commit from its idempotency record: cached with the
// original results, or rejected again. An unreadable record answers the
// retryable sync.idempotency_cache_miss, which is never persisted.
func replay(rec *storage.IdempotencyRecord, ops int) *ssp2.PushResult {
	var sr storedResult
	err := json.Unmarshal(rec.Result, &sr)
	switch {
	case err == nil && rec.Status == ssp2.CommitApplied && sr.N > 0:
		seq := rec.CommitSeq
		return &ssp2.PushResult{ClientCommitID: rec.ClientCommitID, Status: ssp2.CommitCached, CommitSeq: &seq, Results: appliedResults(sr.N)}
	case err == nil && rec.Status == ssp2.CommitRejected && sr.Rej != nil:
		r := sr.Rej
		return &ssp2.PushResult{ClientCommitID: rec.ClientCommitID, Status: ssp2.CommitRejected, Results: []ssp2.OpResult{{
			OpIndex: r.OpIndex, Status: ssp2.OpStatus(r.Status), Code: r.Code, Message: r.Message,
			ServerVersion: r.ServerVersion, ServerRow: r.ServerRow, Retryable: r.Retryable}}}
	}
	e := syncerr.New(syncerr.IdempotencyCacheMiss, "the stored outcome of this commit could not be read; retry")
	return &ssp2.PushResult{ClientCommitID: rec.ClientCommitID, Status: ssp2.CommitRejected,
		Results: []ssp2.OpResult{{OpIndex: 0, Status: ssp2.OpError, Code: string(e.Code), Message: e.Message, Retryable: true}}}
}
