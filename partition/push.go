package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/synclane/synclane/internal/tracing"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// push serves requests that carry commits, all in one storage transaction
// under the partition's write lock (group commit), in five steps:
//
//  1. open: read the client bindings (and an outage round's lease) outside
//     any transaction, then begin the transaction and open the gate inside
//     it; nothing is read outside the transaction while it is open;
//  2. apply: per request, the request checks and its commits, each commit
//     under its own savepoint (a rejected commit never takes its
//     neighbours down);
//  3. commit: make the whole group durable at once;
//  4. answer: build each request's pull part (so a client sees its own
//     writes);
//  5. verify: re-read the gate; only under an unchanged token are the
//     replies released and the clients recorded.
//
// A storage failure fails every request of the group with a retryable
// internal error: nothing of theirs was made durable, and retries are
// idempotent. A refusal at verify comes after the commits are durable;
// the retried push replays them as cached.
func (p *Partition) push(ctx context.Context, jobs []*SyncJob) {
	live := jobs[:0:0]
	for _, j := range jobs {
		p.queueWait(j)
		if j.abandoned() {
			continue
		}
		live = append(live, j)
	}
	tx, token, info, live, ok := p.openPrepared(ctx, live)
	if !ok {
		return
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	written, err := p.writeBackInTx(ctx, tx)
	if err != nil {
		p.failGroup(live, storageErr(err))
		return
	}
	applied, ok := p.applyGroup(ctx, tx, info, live)
	if !ok || !p.commitGroup(ctx, tx, info, applied) {
		return
	}
	p.clientsWrittenBack(written)
	p.addLeases(ctx, applied) // lease.go: written after the push transaction
	applied = p.answerPulls(ctx, token, applied)
	vctx, span := ctx, p.appliedSpan(ctx, applied, tracing.SpanGateVerify)
	if span.IsRecording() {
		vctx = trace.ContextWithSpan(ctx, span)
	}
	horizon, ok := p.verifiedBy(vctx, p.afterCommit(tx, applied), token, requestsOf(applied))
	span.End()
	if !ok {
		return
	}
	for _, a := range applied {
		a.rep.expireBelow(horizon)
		p.bindStreams(a.job.ctx, a.rep, token)
		p.recordClient(ctx, a.job, a.rep)
		a.job.answer(a.rep, nil)
	}
}

// maxOpenAttempts bounds how often openPrepared starts over because the
// push transaction found a new log epoch.
const maxOpenAttempts = 3

// openPrepared reads what the push group needs from outside its
// transaction (prepare), then opens the transaction (openPush). While the
// transaction is open the group reads storage only through it: a push
// holding its store connection never waits for a second one (on
// PostgreSQL, MaxConns partitions doing so would hold the whole pool until
// their deadlines, issue 48). When the transaction finds a new log epoch,
// the bindings read before it are void (adoptEpoch dropped them): it is
// rolled back and the group prepared and opened again, up to
// maxOpenAttempts times (then every job gets a retryable error). It
// returns the jobs still to serve; when ok is false every job is answered.
func (p *Partition) openPrepared(ctx context.Context, jobs []*SyncJob) (tx storage.PushTx, token GateToken, info storage.PartitionInfo, live []*SyncJob, ok bool) {
	live = jobs
	for attempt := 1; ; attempt++ {
		if live = p.prepare(ctx, live); len(live) == 0 {
			return nil, token, info, nil, false
		}
		epoch := p.token.LogEpoch
		if tx, token, info, ok = p.openPush(ctx, live); !ok {
			return nil, token, info, nil, false
		}
		if p.token.LogEpoch == epoch {
			return tx, token, info, live, true
		}
		tx.Rollback(ctx) //nolint:errcheck // nothing was written
		if attempt == maxOpenAttempts {
			p.failGroup(live, syncerr.New(syncerr.InternalError, "the partition's log epoch changed while the push was opened; retry"))
			return nil, token, info, nil, false
		}
	}
}

// prepare reads, outside any transaction, what each job's checks need
// from storage: its client binding (bind) and, for a round authorized by
// its lease, the lease (leaseAuthorize, remembered for precheck). A job
// whose binding cannot be read is answered; the others are returned.
func (p *Partition) prepare(ctx context.Context, jobs []*SyncJob) []*SyncJob {
	live := jobs[:0:0]
	for _, j := range jobs {
		// Bindings are written before the transaction opens (a store
		// may serialize writers, and the transaction holds the lock).
		if err := p.bind(ctx, j); err != nil {
			j.answer(nil, storageErr(err))
			continue
		}
		p.leaseAuthorize(ctx, j) //nolint:errcheck // remembered: precheck answers it in its place
		live = append(live, j)
	}
	return live
}

// started is a request of a push group whose commits were applied and
// whose reply is being built.
type started struct {
	job *SyncJob
	rep *Reply
}

func requestsOf(s []started) []*SyncJob {
	jobs := make([]*SyncJob, len(s))
	for i := range s {
		jobs[i] = s[i].job
	}
	return jobs
}

// openPush begins the push transaction and opens the gate inside it, under
// the partition lock, before anything is read or written. On failure every
// job is answered and ok is false.
func (p *Partition) openPush(ctx context.Context, jobs []*SyncJob) (tx storage.PushTx, token GateToken, info storage.PartitionInfo, ok bool) {
	span := p.groupSpan(ctx, jobs, tracing.SpanGateOpen)
	var err error
	defer func() { endSpan(span, err) }()
	tx, err = p.cfg.Backend.Log.BeginPush(ctx, p.name)
	if err != nil {
		p.failGroup(jobs, storageErr(err))
		return nil, token, info, false
	}
	info = tx.Partition()
	p.adoptEpoch(info.LogEpoch)
	clear(p.staged) // a group's commit records (their rows alias its request bodies) must not outlive it
	p.staged = p.staged[:0]
	p.origins = p.origins[:0]
	if token, err = p.cfg.Gate.OpenTx(ctx, tx); err != nil {
		tx.Rollback(ctx) //nolint:errcheck // the refusal or read failure is the answer
		p.failGroup(jobs, err)
		return nil, token, info, false
	}
	p.adopt(token)
	return tx, token, info, true
}

// afterCommit returns where the push group's replies verify the gate:
// when every reply was built before the commit (push results only: no
// pull part, no lease frame) and the store read the gate after the
// group's commit (storage.PushTx.CommittedGate), that read, shared by
// every partition of the commit group; otherwise the store, read again
// now.
func (p *Partition) afterCommit(tx storage.PushTx, applied []started) GateReader {
	if p.cfg.Leases != nil {
		return p.gateReader()
	}
	for _, a := range applied {
		if a.job.req.Pull != nil {
			return p.gateReader()
		}
	}
	g, ok := tx.CommittedGate()
	if !ok {
		return p.gateReader()
	}
	return readGate(g)
}

// readGate is a gate already read.
type readGate storage.ServeGate

// ReadServeGate answers GateReader.
func (g readGate) ReadServeGate(context.Context, string, int32) (storage.ServeGate, error) {
	return storage.ServeGate(g), nil
}

// applyGroup checks each request and applies its commits. Requests failing
// their checks are answered at once; ok is false (every request answered)
// when storage failed.
func (p *Partition) applyGroup(ctx context.Context, tx storage.PushTx, info storage.PartitionInfo, jobs []*SyncJob) ([]started, bool) {
	if err := p.prefetch(ctx, tx, jobs); err != nil {
		p.failGroup(jobs, storageErr(err))
		return nil, false
	}
	applied := make([]started, 0, len(jobs))
	for i, j := range jobs {
		_, span := p.jobSpan(ctx, j, tracing.SpanApply)
		rep, stop, err := p.precheck(ctx, j, info)
		if err != nil || stop {
			endSpan(span, err)
			j.answer(rep, err)
			continue
		}
		if err := p.applyCommits(ctx, tx, j, rep); err != nil {
			endSpan(span, storageErr(err))
			p.failGroup(append(requestsOf(applied), jobs[i:]...), storageErr(err))
			return nil, false
		}
		endApplySpan(span, rep)
		applied = append(applied, started{j, rep})
	}
	return applied, true
}

// prefetch hands the store every idempotency key and row the group's
// commits will look up (storage.PushTx.Prefetch), so a store that reads
// in batches (PostgreSQL) costs the group one round trip for them instead
// of two per operation. Answers are unchanged (see PushTx.Prefetch).
func (p *Partition) prefetch(ctx context.Context, tx storage.PushTx, jobs []*SyncJob) error {
	var idem []storage.IdempotencyKey
	var rows []storage.RowKey
	for _, j := range jobs {
		for _, c := range j.req.Commits {
			idem = append(idem, storage.IdempotencyKey{ClientID: j.req.Header.ClientID, ClientCommitID: c.ClientCommitID})
			for i := range c.Operations {
				op := &c.Operations[i]
				if t := p.cfg.Schema.Table(op.Table); t != nil {
					rows = append(rows, storage.RowKey{Table: t, RowID: op.RowID})
				}
			}
		}
	}
	if len(idem) == 0 {
		return nil
	}
	return tx.Prefetch(ctx, idem, rows)
}

// commitGroup makes the group durable, then moves its commits into the
// log tail and reports the new max seq.
func (p *Partition) commitGroup(ctx context.Context, tx storage.PushTx, info storage.PartitionInfo, applied []started) bool {
	announced := p.announceKeys(p.staged)
	span := p.appliedSpan(ctx, applied, tracing.SpanCommit)
	if span.IsRecording() {
		span.SetAttributes(tracing.Commits.Int(len(p.staged)))
	}
	err := tx.Commit(ctx)
	endSpan(span, err)
	if err != nil {
		p.settleKeys(announced, false)
		p.failGroup(requestsOf(applied), storageErr(err))
		return false
	}
	p.settleKeys(announced, true)
	p.reportOrigins()
	for _, c := range p.staged {
		p.tail.append(c)
	}
	clear(p.staged)
	p.staged = p.staged[:0]
	if seq := tx.Partition().MaxCommitSeq; seq > info.MaxCommitSeq {
		p.commitDurable(seq)
	}
	return true
}

// answerPulls builds the pull part of each request that has one, reading
// the partition once after the commit. A request whose pull fails is
// answered with that error (its pushes are durable and replay as cached)
// and leaves the group. token is the gate token the replies are built
// under.
func (p *Partition) answerPulls(ctx context.Context, token GateToken, applied []started) []started {
	var fresh *storage.PartitionInfo
	kept := applied[:0]
	for _, a := range applied {
		if a.job.req.Pull != nil {
			bctx, span := p.jobSpan(ctx, a.job, tracing.SpanReplyBuild)
			if fresh == nil {
				inf, err := p.read(bctx)
				if err != nil {
					endSpan(span, storageErr(err))
					a.job.answer(nil, storageErr(err))
					continue
				}
				fresh = &inf
			}
			err := p.servePulls(bctx, a.job, token, *fresh, a.rep)
			endSpan(span, err)
			if err != nil {
				a.job.answer(nil, err)
				continue
			}
		}
		kept = append(kept, a)
	}
	return kept
}

// failGroup answers every job with err.
func (p *Partition) failGroup(jobs []*SyncJob, err error) {
	if len(jobs) == 0 {
		return
	}
	p.log().Warn("push group failed", zap.Error(err), zap.Int("requests", len(jobs)))
	for _, j := range jobs {
		j.answer(nil, err)
	}
}

// applyCommits applies one request's commits in frame order, appending a
// PUSH_RESULT per commit to rep. Only storage failures are returned.
func (p *Partition) applyCommits(ctx context.Context, tx storage.PushTx, j *SyncJob, rep *Reply) error {
	cid := j.req.Header.ClientID
	var seen map[string]outcome
	for _, c := range j.req.Commits {
		if prev, ok := seen[c.ClientCommitID]; ok {
			// A duplicate clientCommitId in one request replays the first copy.
			dup := *prev.pr
			if dup.Status == ssp2.CommitApplied {
				dup.Status = ssp2.CommitCached
			}
			rep.addOutcome(outcome{&dup, prev.details})
			continue
		}
		rec, err := p.lookupIdempotency(ctx, tx, cid, c.ClientCommitID)
		if err != nil {
			return err
		}
		var o outcome
		if rec != nil {
			o = p.legacyConflictColumns(replay(rec, len(c.Operations)), c.Operations)
		} else if o, err = p.applyCommit(ctx, tx, j, c); err != nil {
			return err
		}
		if seen == nil {
			seen = map[string]outcome{}
		}
		seen[c.ClientCommitID] = o
		rep.addOutcome(o)
	}
	return nil
}

// applyCommit applies one commit atomically under a savepoint.
func (p *Partition) applyCommit(ctx context.Context, tx storage.PushTx, j *SyncJob, c *ssp2.PushCommit) (outcome, error) {
	if err := tx.Savepoint(ctx); err != nil {
		return outcome{}, err
	}
	cs := &commitState{p: p, tx: tx, hooks: &p.cfg.Hooks, info: CommitInfo{Partition: p.name, ActorID: j.actorID, ClientID: j.req.Header.ClientID, ClientCommitID: c.ClientCommitID}}
	changes := make([]storage.ChangeRecord, 0, len(c.Operations))
	for i := range c.Operations {
		rej, err := p.applyOp(ctx, tx, j, cs, int32(i), &c.Operations[i], &changes)
		if err != nil {
			return outcome{}, err
		}
		if rej != nil {
			return p.reject(ctx, tx, j, c, &hookRejection{rec: rej, details: cs.rejDetails})
		}
	}
	n := len(c.Operations)
	if rej, err := p.enforceReferences(ctx, tx, cs, n, &changes); err != nil || rej != nil {
		if err != nil {
			return outcome{}, err
		}
		return p.reject(ctx, tx, j, c, rej)
	}
	if rej, err := p.validateCommit(ctx, tx, cs, n); err != nil || rej != nil {
		if err != nil {
			return outcome{}, err
		}
		return p.reject(ctx, tx, j, c, rej)
	}
	rec, err := p.appendCommit(ctx, tx, j.actorID, j.req.Header.ClientID, c.ClientCommitID, changes, n)
	if errors.Is(err, storage.ErrUnstorable) {
		// The store refused this commit before writing it: reject it alone.
		return p.reject(ctx, tx, j, c, &hookRejection{rec: opError(0, syncerr.Wrap(syncerr.InvalidRequest, err, "the commit holds a value synclane cannot store"))})
	}
	if err != nil {
		return outcome{}, err
	}
	if err := p.storeReactions(ctx, tx, cs, rec); err != nil {
		return outcome{}, err
	}
	p.stageOrigin(j, cs, rec)
	if err := tx.ReleaseSavepoint(ctx); err != nil {
		return outcome{}, err
	}
	p.staged = append(p.staged, rec) // joins the log tail once the transaction commits
	seq := rec.Seq
	return outcome{pr: &ssp2.PushResult{ClientCommitID: c.ClientCommitID, Status: ssp2.CommitApplied, CommitSeq: &seq, Results: appliedResults(n)}}, nil
}

// reject rolls the commit back to its savepoint and durably records the
// rejection, so a replay answers the same.
func (p *Partition) reject(ctx context.Context, tx storage.PushTx, j *SyncJob, c *ssp2.PushCommit, hr *hookRejection) (outcome, error) {
	rej := hr.rec
	if err := tx.RollbackToSavepoint(ctx); err != nil {
		return outcome{}, err
	}
	if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{
		ClientID: j.req.Header.ClientID, ClientCommitID: c.ClientCommitID,
		Status: ssp2.CommitRejected, Result: encodeRejected(rej, hr.details),
	}); err != nil && !errors.Is(err, storage.ErrUnstorable) {
		return outcome{}, err // (an unstorable key is answered, not persisted)
	}
	if err := tx.ReleaseSavepoint(ctx); err != nil {
		return outcome{}, err
	}
	return outcome{pr: &ssp2.PushResult{ClientCommitID: c.ClientCommitID, Status: ssp2.CommitRejected, Results: []ssp2.OpResult{*rej}}, details: hr.details}, nil
}

// opError renders a rejection of operation i.
func opError(i int32, e *syncerr.Error) *ssp2.OpResult {
	return &ssp2.OpResult{OpIndex: i, Status: ssp2.OpError, Code: string(e.Code), Message: e.Message, Retryable: e.Spec().Retryable}
}

// writeRejection renders a rejection by a write helper (nil when rej is
// nil), naming the operation.
func writeRejection(i int32, rej *syncerr.Error) *ssp2.OpResult {
	if rej == nil {
		return nil
	}
	e := *rej
	e.Message = fmt.Sprintf("operation %d: %s", i, rej.Message)
	return opError(i, &e)
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
	// ConflictColumns is a conflict's conflictColumns bitmap (SPEC §6.3),
	// persisted so a replay is byte-identical.
	ConflictColumns []byte `json:"cc,omitempty"`
	Retryable       bool   `json:"t,omitempty"`
	// Details is the PUSH_RESULT_DETAILS detailsJson of a host rejection.
	Details string `json:"d,omitempty"`
}

func encodeApplied(n int) []byte { return fmt.Appendf(nil, `{"n":%d}`, n) }

func encodeRejected(r *ssp2.OpResult, details string) []byte {
	b, _ := json.Marshal(storedResult{Rej: &storedOpError{OpIndex: r.OpIndex, Status: uint8(r.Status), Code: r.Code,
		Message: r.Message, ServerVersion: r.ServerVersion, ServerRow: r.ServerRow, ConflictColumns: r.ConflictColumns, Retryable: r.Retryable, Details: details}})
	return b
}

// replay answers a commit from its idempotency record: cached with the
// original results, or rejected again. An unreadable record answers the
// retryable sync.idempotency_cache_miss, which is never persisted.
func replay(rec *storage.IdempotencyRecord, ops int) outcome {
	var sr storedResult
	err := json.Unmarshal(rec.Result, &sr)
	switch {
	case err == nil && rec.Status == ssp2.CommitApplied && sr.N > 0:
		seq := rec.CommitSeq
		return outcome{pr: &ssp2.PushResult{ClientCommitID: rec.ClientCommitID, Status: ssp2.CommitCached, CommitSeq: &seq, Results: appliedResults(sr.N)}}
	case err == nil && rec.Status == ssp2.CommitRejected && sr.Rej != nil:
		r := sr.Rej
		return outcome{pr: &ssp2.PushResult{ClientCommitID: rec.ClientCommitID, Status: ssp2.CommitRejected, Results: []ssp2.OpResult{{
			OpIndex: r.OpIndex, Status: ssp2.OpStatus(r.Status), Code: r.Code, Message: r.Message,
			ServerVersion: r.ServerVersion, ServerRow: r.ServerRow, ConflictColumns: r.ConflictColumns, Retryable: r.Retryable}}}, details: storedDetails(r.Details)}
	}
	e := syncerr.New(syncerr.IdempotencyCacheMiss, "the stored outcome of this commit could not be read; retry")
	return outcome{pr: &ssp2.PushResult{ClientCommitID: rec.ClientCommitID, Status: ssp2.CommitRejected,
		Results: []ssp2.OpResult{{OpIndex: 0, Status: ssp2.OpError, Code: string(e.Code), Message: e.Message, Retryable: true}}}}
}

// legacyConflictColumns fills in the conflictColumns of a conflict
// recorded before column versions (a record without a bitmap): such a
// conflict contended on the whole row, so every non-crdt, non-key column
// of the operation's table is marked. ops are the replayed commit's
// operations; a record that names none of them is left as it is.
func (p *Partition) legacyConflictColumns(o outcome, ops []ssp2.Operation) outcome {
	if o.pr.Status != ssp2.CommitRejected || len(o.pr.Results) != 1 {
		return o
	}
	r := &o.pr.Results[0]
	if r.Status != ssp2.OpConflict || r.ConflictColumns != nil || int(r.OpIndex) >= len(ops) || r.OpIndex < 0 {
		return o
	}
	if t := p.cfg.Schema.Table(ops[r.OpIndex].Table); t != nil {
		r.ConflictColumns = ContendableColumns(t)
	}
	return o
}
