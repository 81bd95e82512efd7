package partition

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Remote commands (REMOTE.md §3) run on the partition's actor as jobs, so
// they are serialized with pushes and go through the same write path:
// the push transaction (partition lock and serve gate), the idempotency
// recheck under the lock, then the host's callback, then applyCommit
// (scope authorization, row writes, log append, idempotency record) and
// commitGroup (log tail, OnCommit fan-out).

// CommandWrite is one row write a command produced: a full-row upsert of
// Row (in column order; its primary key is RowID) or a delete of RowID.
type CommandWrite struct {
	Table  string
	RowID  string
	Delete bool
	Row    ssp2.Row
}

// CommandRowGetter reads a current row inside the command's transaction;
// it returns nil for an absent row and for a row whose scope values are
// outside the caller's resolved scopes.
type CommandRowGetter func(ctx context.Context, table, rowID string) (ssp2.Row, error)

// CommandQuery runs a registered query inside the command's transaction,
// before the command's writes (so over the committed state, under the
// partition's write lock), with CommitView.Query's rules: privileged
// (the whole partition), read-only, the same errors. A storage failure
// fails the command as a storage error.
type CommandQuery func(ctx context.Context, id string, args []any) (QueryRows, error)

// CommandRun is the host's command callback, adapted: it returns the
// writes to apply as one commit. An error is a request failure (nothing
// is stored).
type CommandRun func(ctx context.Context, get CommandRowGetter, query CommandQuery) ([]CommandWrite, error)

// CommandOutcome is a command's result: applied (new commit), cached (an
// applied earlier invocation, same commit), or rejected (by the write
// path, stored and replayed), with the push result records.
type CommandOutcome struct {
	Status    ssp2.CommitStatus
	CommitSeq int64 // > 0 for applied and cached
	Results   []ssp2.OpResult
	// Details is a host validator's details JSON of a rejection ("" when
	// none), stored and replayed with it.
	Details string
}

// CommandJob is one command invocation travelling to its partition's
// actor.
type CommandJob struct {
	ctx            context.Context
	actorID        string
	callerClientID string
	clientID       string // the ["remote-command", …] idempotency client id
	clientCommitID string
	allowed        Allowed
	resolved       bool
	callback       CommandRun
	getErr         error // the last storage failure of a row read or query
	completion[CommandOutcome]
}

// NewCommandJob returns the job for one command invocation by actorID
// through its client callerClientID. clientID and clientCommitID are the
// idempotency identity the command maps to; allowed and resolved are the
// caller's resolved write scopes (resolved false denies every write).
func NewCommandJob(ctx context.Context, actorID, callerClientID, clientID, clientCommitID string, allowed Allowed, resolved bool, run CommandRun) *CommandJob {
	j := &CommandJob{ctx: ctx, actorID: actorID, callerClientID: callerClientID, clientID: clientID,
		clientCommitID: clientCommitID, allowed: allowed, resolved: resolved, callback: run}
	j.init()
	return j
}

// Wait returns the outcome, or an internal error when ctx ends first (the
// actor may still run the command; a retry replays it).
func (j *CommandJob) Wait(ctx context.Context) (CommandOutcome, error) {
	return j.wait(ctx, abandonedUnanswered)
}

// Batchable is false: a command runs alone in its own push transaction.
func (j *CommandJob) Batchable() bool { return false }

// Fail answers the job with err, mapped like SyncJob.Fail.
func (j *CommandJob) Fail(err error) { j.answer(CommandOutcome{}, jobFailure(err, "command")) }

func (j *CommandJob) push() *SyncJob { return nil }

func (j *CommandJob) requestContext() context.Context { return j.ctx }

func (j *CommandJob) run(ctx context.Context, p *Partition) { p.command(ctx, j) }

// outcomeOf renders a commit's outcome as a command outcome.
func outcomeOf(o outcome) CommandOutcome {
	pr := o.pr
	out := CommandOutcome{Status: pr.Status, Results: pr.Results, Details: o.details}
	if pr.CommitSeq != nil && pr.Status != ssp2.CommitRejected {
		out.CommitSeq = *pr.CommitSeq
	}
	return out
}

// command serves one command invocation.
func (p *Partition) command(ctx context.Context, j *CommandJob) {
	if err := j.ctx.Err(); err != nil {
		j.answer(CommandOutcome{}, syncerr.Wrap(syncerr.InternalError, err, "request abandoned"))
		return
	}
	// The caller's clientId is bound to its actor like a push's.
	caller := NewSyncJob(j.ctx, j.actorID, &ssp2.Request{WireVersion: ssp2.WireV1, Header: &ssp2.ReqHeader{ClientID: j.callerClientID}}, nil, false)
	if err := p.bind(ctx, caller); err != nil {
		j.answer(CommandOutcome{}, storageErr(err))
		return
	}
	if cerr := CheckClientID(j.callerClientID, j.actorID, caller.bound); cerr != nil {
		j.answer(CommandOutcome{}, cerr)
		return
	}
	commit := &ssp2.PushCommit{ClientCommitID: j.clientCommitID}
	sj := NewSyncJob(j.ctx, j.actorID, &ssp2.Request{WireVersion: ssp2.WireV3,
		Header: &ssp2.ReqHeader{ClientID: j.clientID}, Commits: []*ssp2.PushCommit{commit}}, j.allowed, j.resolved)
	tx, _, info, ok := p.openPush(ctx, []*SyncJob{sj})
	if !ok {
		_, err := sj.result()
		j.answer(CommandOutcome{}, err)
		return
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	rec, err := p.lookupIdempotency(ctx, tx, j.clientID, j.clientCommitID)
	if err != nil {
		j.answer(CommandOutcome{}, storageErr(err))
		return
	}
	if rec != nil {
		// A retry: the stored outcome, without running the callback.
		j.answer(outcomeOf(replay(rec, 0)), nil)
		return
	}
	writes, err := j.callback(ctx, p.commandGetter(tx, j), func(ctx context.Context, id string, args []any) (QueryRows, error) {
		return p.txQuery(ctx, tx, id, args, func(err error) { j.getErr = err })
	})
	if err != nil {
		if j.getErr != nil { // the callback failed because storage did
			err = storageErr(j.getErr)
		}
		j.answer(CommandOutcome{}, err)
		return
	}
	if len(writes) == 0 {
		j.answer(CommandOutcome{}, syncerr.New(syncerr.OperationInvalidRequest, "the command returned no mutations"))
		return
	}
	if len(writes) > p.cfg.MaxOperations {
		j.answer(CommandOutcome{}, syncerr.New(syncerr.TooManyOperations, "the command returned %d mutations; the limit is %d", len(writes), p.cfg.MaxOperations))
		return
	}
	for _, w := range writes {
		op := ssp2.Operation{Table: w.Table, RowID: w.RowID, Op: ssp2.OpDelete}
		if !w.Delete {
			codec := p.cfg.Codecs[w.Table]
			if codec == nil {
				j.answer(CommandOutcome{}, syncerr.New(syncerr.OperationInvalidRequest, "the command wrote unknown table %q", w.Table))
				return
			}
			// A command writes whole rows: every column present.
			payload, err := codec.AppendSparse(nil, w.Row, nil, p.cfg.Schema.Table(w.Table).PK)
			if err != nil {
				j.answer(CommandOutcome{}, syncerr.Wrap(syncerr.OperationInvalidRequest, err, "the command's row %s/%s does not encode: %v", w.Table, w.RowID, err))
				return
			}
			op.Op, op.Payload = ssp2.OpUpsert, payload
		}
		commit.Operations = append(commit.Operations, op)
	}
	pr, err := p.applyCommit(ctx, tx, sj, commit)
	if err != nil {
		j.answer(CommandOutcome{}, storageErr(err))
		return
	}
	if !p.commitGroup(ctx, tx, info, []started{{job: sj}}) {
		_, err := sj.result()
		j.answer(CommandOutcome{}, err)
		return
	}
	j.answer(outcomeOf(pr), nil)
}

// commandGetter reads rows through the push transaction, hiding rows the
// caller may not write (command reads see what the resolved scopes allow).
func (p *Partition) commandGetter(tx storage.PushTx, j *CommandJob) CommandRowGetter {
	return func(ctx context.Context, table, rowID string) (ssp2.Row, error) {
		t := p.cfg.Schema.Table(table)
		if t == nil {
			return nil, syncerr.New(syncerr.OperationInvalidRequest, "the command read unknown table %q", table)
		}
		rec, err := tx.GetRow(ctx, t, rowID)
		if err != nil {
			j.getErr = err
			return nil, fmt.Errorf("read %s/%s: %w", table, rowID, err)
		}
		if rec == nil || AuthorizeRow(t, rec.Values, j.allowed, j.resolved) != nil {
			return nil, nil
		}
		return rec.Values, nil
	}
}
