package operations

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Remote operations (REMOTE.md revision 1): Service.Run is the one entry
// point every transport calls for a decoded operation request.

// DefaultTimeout bounds one remote query's storage work when
// Options.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Result is a successful operation: exactly one of Query and
// Command is set.
type Result struct {
	Query   *opwire.QueryResult
	Command *opwire.CommandResult
}

// Encode encodes the result as a response message.
func (r Result) Encode() ([]byte, error) {
	if r.Query != nil {
		return r.Query.Encode()
	}
	return r.Command.Encode()
}

// Run runs one remote operation for an authenticated caller.
//
// Queries run on the request's goroutine against storage: the caller's
// clientId must not be bound to another actor, a scoped query's covered
// values must be within the resolved scopes (a resolver failure denies),
// a privileged query's Authorize must grant; then the partition-rewritten
// statement runs in one read snapshot with the serve gate and the
// partition's maxCommitSeq, bounded by Options.Timeout.
//
// Commands are authorized (Authorize, mandatory), then run as a job on the
// partition's actor under the push write path with the idempotency
// identity clientId = ["remote-command", actorId, clientId], clientCommitId
// = [operationId, requestId] (JSON arrays): a retry of an applied or
// rejected invocation replays its stored outcome without running the
// callback.
//
// Errors are *syncerr.Error: operation.* codes (REMOTE.md §7),
// sync.invalid_client_id, sync.auth_required, sync.schema_not_ready (the
// serve gate), sync.too_many_operations, or the retryable
// sync.internal_error for storage failures.
func (s *Service) Run(ctx context.Context, id access.Identity, req *opwire.Request) (Result, error) {
	res, err := s.run(ctx, id, req)
	s.ops.count(req, err)
	if err != nil {
		var coded *syncerr.Error
		if !errors.As(err, &coded) {
			err = syncerr.Wrap(syncerr.InternalError, err, "the operation failed; retry")
		}
		fields := []zap.Field{zap.String("operation", req.OperationID), zap.String("kind", req.Kind),
			zap.String("actor", id.ActorID), zap.String("partition", id.Partition), zap.String("code", string(syncerr.CodeOf(err))), zap.Error(err)}
		switch syncerr.CodeOf(err) {
		case syncerr.InternalError, syncerr.OperationExecutionFailed, syncerr.OperationQueryFailed, syncerr.OperationStorageUnsupported:
			s.deps.Logger.Warn("remote operation failed", fields...)
		default:
			s.deps.Logger.Debug("remote operation refused", fields...)
		}
	}
	return res, err
}

func (s *Service) run(ctx context.Context, id access.Identity, req *opwire.Request) (Result, error) {
	if id.Partition == "" || id.ActorID == "" {
		return Result{}, syncerr.New(syncerr.AuthRequired, "request has no authenticated actor or partition")
	}
	if verr := partition.ValidateIdentity(id.ActorID, id.Partition); verr != nil {
		return Result{}, verr
	}
	if req == nil {
		return Result{}, syncerr.New(syncerr.OperationInvalidRequest, "no request")
	}
	for _, f := range []struct{ name, v string }{{"clientId", req.ClientID}, {"operationId", req.OperationID}, {"requestId", req.RequestID}} {
		if len(f.v) > MaxIDBytes || !utf8.ValidString(f.v) || strings.IndexByte(f.v, 0) >= 0 {
			return Result{}, syncerr.New(syncerr.OperationInvalidRequest, "%s must be valid UTF-8 without U+0000, at most %d bytes", f.name, MaxIDBytes)
		}
	}
	if req.ClientID == "" {
		return Result{}, syncerr.New(syncerr.OperationInvalidRequest, "clientId must not be empty")
	}
	if cerr := partition.CheckClientID(req.ClientID, id.ActorID, ""); cerr != nil {
		return Result{}, cerr
	}
	reg := s.reg
	caller := Caller{ActorID: id.ActorID, Partition: id.Partition, Grants: id.Grants}
	switch req.Kind {
	case opwire.KindQuery:
		var q *CompiledQuery
		if reg != nil {
			q = reg.Query(req.OperationID)
		}
		if q == nil {
			return Result{}, syncerr.New(syncerr.OperationUnknown, "no query %q is registered", req.OperationID)
		}
		return s.runQuery(ctx, id, caller, q, req)
	case opwire.KindCommand:
		var c *Command
		if reg != nil {
			c = reg.Command(req.OperationID)
		}
		if c == nil {
			return Result{}, syncerr.New(syncerr.OperationUnknown, "no command %q is registered", req.OperationID)
		}
		return s.runCommand(ctx, id, caller, c, req)
	}
	return Result{}, syncerr.New(syncerr.OperationInvalidRequest, "kind %q is neither query nor command", req.Kind)
}

// checkClientBinding fails with sync.invalid_client_id when clientID is
// bound to another actor in the partition. A query binds nothing.
func (s *Service) checkClientBinding(ctx context.Context, id access.Identity, clientID string) error {
	rec, err := s.clients.GetClient(ctx, id.Partition, clientID)
	if err != nil {
		return syncerr.Wrap(syncerr.InternalError, err, "storage is unavailable; retry")
	}
	bound := ""
	if rec != nil {
		bound = rec.ActorID
	}
	if cerr := partition.CheckClientID(clientID, id.ActorID, bound); cerr != nil {
		return cerr
	}
	return nil
}

func (s *Service) runQuery(ctx context.Context, id access.Identity, caller Caller, q *CompiledQuery, req *opwire.Request) (Result, error) {
	if err := s.checkClientBinding(ctx, id, req.ClientID); err != nil {
		return Result{}, err
	}
	var allowed partition.Allowed
	resolved := false
	if q.Scoped() {
		allowed, resolved = s.deps.Resolver.Resolve(ctx, id)
	}
	sq, err := q.Prepare(ctx, caller, req.Params, allowed, resolved)
	if err != nil {
		return Result{}, err
	}
	qr := s.queries // engine.New: present when queries are registered
	timeout := s.opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	gate := s.deps.Gate
	res, err := qr.Query(qctx, id.Partition, gate.Running, sq, func(g storage.ServeGate) error {
		if ref := partition.GateRefusal(g, gate.Running, gate.Declared); ref != nil {
			return ref.Error()
		}
		return nil
	})
	var coded *syncerr.Error
	switch {
	case err == nil:
	case errors.As(err, &coded):
		return Result{}, err
	case errors.Is(err, storage.ErrQueryTooLarge):
		return Result{}, syncerr.Wrap(syncerr.OperationResultTooLarge, err, "query %q matched more than its %d rows", q.ID, q.MaxRows)
	case errors.Is(err, storage.ErrQueryFailed):
		return Result{}, syncerr.Wrap(syncerr.OperationQueryFailed, err, "query %q failed", q.ID)
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return Result{}, syncerr.Wrap(syncerr.OperationQueryFailed, err, "query %q ran longer than %s", q.ID, timeout)
	default:
		return Result{}, syncerr.Wrap(syncerr.InternalError, err, "storage is unavailable; retry")
	}
	rows, err := q.Rows(res)
	if err != nil {
		return Result{}, err
	}
	return Result{Query: &opwire.QueryResult{OperationID: q.ID, Rows: rows, MaxCommitSeq: res.MaxCommitSeq}}, nil
}

// CommandClientID is the idempotency clientId of a command invoked by
// actorID through clientID: the JSON array ["remote-command", actorID,
// clientID] as JavaScript's JSON.stringify writes it.
func CommandClientID(actorID, clientID string) string {
	return "[" + jsString("remote-command") + "," + jsString(actorID) + "," + jsString(clientID) + "]"
}

// CommandCommitID is the idempotency clientCommitId of a command
// invocation: the JSON array [operationID, requestID].
func CommandCommitID(operationID, requestID string) string {
	return "[" + jsString(operationID) + "," + jsString(requestID) + "]"
}

// jsString quotes s as JSON.stringify does: only '"', '\\' and control
// characters are escaped (short forms where JSON has them).
func jsString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

func (s *Service) runCommand(ctx context.Context, id access.Identity, caller Caller, c *Command, req *opwire.Request) (Result, error) {
	if req.RequestID == "" {
		return Result{}, syncerr.New(syncerr.OperationInvalidRequest, "a command needs a non-empty requestId")
	}
	ok, err := Guard("Authorize of command "+c.ID, func() (bool, error) { return c.Authorize(ctx, caller, req.Params) })
	if err != nil {
		return Result{}, syncerr.Wrap(syncerr.OperationForbidden, err, "authorization of command %q failed", c.ID)
	}
	if !ok {
		return Result{}, syncerr.New(syncerr.OperationForbidden, "command %q is not allowed for this caller", c.ID)
	}
	allowed, resolved := s.deps.Resolver.Resolve(ctx, id)
	reg := s.reg
	run := func(ctx context.Context, get partition.CommandRowGetter, query partition.CommandQuery) (writes []partition.CommandWrite, err error) {
		defer func() {
			if r := recover(); r != nil {
				writes, err = nil, syncerr.New(syncerr.OperationExecutionFailed, "command %q panicked", c.ID)
				s.deps.Logger.Error("remote command panicked", zap.String("operation", c.ID), zap.Any("panic", r))
			}
		}()
		muts, err := c.Run(ctx, Invocation{Caller: caller, RequestID: req.RequestID, Params: req.Params,
			Rows: rowReader{reg: reg, get: get}, query: query})
		if err != nil {
			if code := syncerr.CodeOf(err); strings.HasPrefix(string(code), "operation.") {
				return nil, err
			}
			return nil, syncerr.Wrap(syncerr.OperationExecutionFailed, err, "command %q failed", c.ID)
		}
		if len(muts) > MaxMutations {
			return nil, syncerr.New(syncerr.OperationInvalidRequest, "command %q returned %d mutations; the limit is %d", c.ID, len(muts), MaxMutations)
		}
		writes = make([]partition.CommandWrite, 0, len(muts))
		for _, m := range muts {
			t, rowID, row, err := reg.Row(m)
			if err != nil {
				return nil, err
			}
			writes = append(writes, partition.CommandWrite{Table: t.Name, RowID: rowID, Delete: m.Delete, Row: row})
		}
		return writes, nil
	}
	job := partition.NewCommandJob(ctx, id.ActorID, req.ClientID, CommandClientID(id.ActorID, req.ClientID),
		CommandCommitID(req.OperationID, req.RequestID), allowed, resolved, run)
	s.deps.Actors.Submit(id.Partition, job)
	out, err := job.Wait(ctx)
	if err != nil {
		return Result{}, err
	}
	cr := &opwire.CommandResult{OperationID: c.ID, RequestID: req.RequestID, CommitSeq: out.CommitSeq, Results: make([]any, len(out.Results))}
	switch out.Status {
	case ssp2.CommitApplied:
		cr.Status = opwire.StatusApplied
	case ssp2.CommitCached:
		cr.Status = opwire.StatusCached
	default:
		cr.Status, cr.CommitSeq = opwire.StatusRejected, 0
	}
	for i, r := range out.Results {
		o := opResultObject(r)
		if out.Details != "" && cr.Status == opwire.StatusRejected {
			o = append(o, opwire.Field{Key: "details", Value: out.Details})
		}
		cr.Results[i] = o
	}
	return Result{Command: cr}, nil
}

// opResultObject renders a push result record for a command response.
func opResultObject(r ssp2.OpResult) opwire.Object {
	status := map[ssp2.OpStatus]string{ssp2.OpApplied: "applied", ssp2.OpConflict: "conflict", ssp2.OpError: "error"}[r.Status]
	o := opwire.Object{{Key: "opIndex", Value: int64(r.OpIndex)}, {Key: "status", Value: status}}
	if r.Status != ssp2.OpApplied {
		o = append(o, opwire.Field{Key: "code", Value: r.Code}, opwire.Field{Key: "message", Value: r.Message},
			opwire.Field{Key: "retryable", Value: r.Retryable})
	}
	if r.Status == ssp2.OpConflict {
		o = append(o, opwire.Field{Key: "serverVersion", Value: r.ServerVersion})
	}
	return o
}

// rowReader adapts the partition's transactional row reads for a command.
type rowReader struct {
	reg *Registry
	get partition.CommandRowGetter
}

// GetRow implements RowReader.
func (r rowReader) GetRow(ctx context.Context, table, rowID string) (map[string]any, error) {
	row, err := r.get(ctx, table, rowID)
	if err != nil || row == nil {
		return nil, err
	}
	return RowValues(r.reg.Schema().Table(table), row), nil
}

// QueryTables returns the tables the registered query operationID reads
// (ok false when no such query is registered); live watches rerun a query
// when a commit touches one of them.
func (s *Service) QueryTables(operationID string) (tables []string, ok bool) {
	if s.reg == nil {
		return nil, false
	}
	q := s.reg.Query(operationID)
	if q == nil {
		return nil, false
	}
	return q.Tables(), true
}
