package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Host write hooks (SPEC §6.7-6.9). The partition's actor runs them inside
// the push transaction, under the partition's write lock, in this order
// per commit: for each operation a row validator (after authorization,
// scope stripping and merging, before the row is staged), then once the
// whole-commit validator (after every operation is staged), then the
// commit's reactions are stored with the commit. A hook that rejects rolls
// back its own commit only (its savepoint); the other commits of the
// request and of the group commit are unaffected.
//
// Hooks run on the actor's goroutine: a slow hook delays every write of
// its partition, and the actor's storage timeout (engine
// Config.StorageTimeout) bounds the whole turn. A hook must not keep the
// views it is given after it returns.

// RowValidator checks one write of a table. Returning nil accepts it. A
// *Rejection (found with errors.As) rejects the commit with the host's
// code, message and details; any other error, a panic, or a Rejection
// with an invalid code or details rejects it with
// sync.constraint_violation (the latter two are host bugs and are logged).
type RowValidator func(ctx context.Context, w *RowWrite) error

// CommitValidator checks a whole commit once, after every operation was
// staged, and may read the candidate state (the commit's own writes
// included) through the view. Its errors map like a RowValidator's; a
// Rejection names the operation it blames with OpIndex (0 when out of
// range).
type CommitValidator func(ctx context.Context, c *CommitView) error

// Hooks are the host's write hooks. The zero value has none.
type Hooks struct {
	// Validators holds at most one row validator per table name.
	Validators map[string]RowValidator
	// CommitValidator, when set, runs once per commit.
	CommitValidator CommitValidator
	// KnownReaction reports whether a reaction name has a handler; React
	// refuses other names. nil accepts none (no reactions configured).
	KnownReaction func(name string) bool
	// DefaultMaxAttempts is the MaxAttempts of a Reaction without one
	// (0: DefaultReactionMaxAttempts).
	DefaultMaxAttempts int
}

// DefaultReactionMaxAttempts is the default delivery attempts of a reaction.
const DefaultReactionMaxAttempts = 10

// Reaction is a side effect a hook schedules with its commit (SPEC §6.9):
// stored in the push transaction with the commit (so it exists exactly
// when the commit does) and delivered at least once afterwards to the
// host's handler for Name. A commit may schedule up to 100.
type Reaction struct {
	// Name selects the handler (1-128 bytes, registered with the engine).
	Name string
	// Payload is handed to the handler as is (at most 64 KiB).
	Payload []byte
	// MaxAttempts is 1-100 delivery attempts before the reaction is
	// dead-lettered; 0 means the configured default (10 unless set).
	MaxAttempts int
}

// React schedules r with the commit being validated. It fails (and
// schedules nothing) for an unknown name, a payload over 64 KiB,
// MaxAttempts outside 0-100, or a 101st reaction of the commit. If the
// commit is rejected later, its reactions are discarded with it.
func (w *RowWrite) React(r Reaction) error { return w.commit.react(r) }

// React schedules r with the commit (see RowWrite.React).
func (c *CommitView) React(r Reaction) error { return c.commit.react(r) }

// CommitInfo identifies the commit being applied.
type CommitInfo struct {
	Partition      string
	ActorID        string
	ClientID       string
	ClientCommitID string
}

// RowWrite is one operation as a row validator sees it.
type RowWrite struct {
	CommitInfo
	// OpIndex is the operation's index in its commit: a client operation's
	// own, or, for an operation a declared reference appended (a cascaded
	// delete, a SET NULL upsert; SPEC §6.11), an index past the client's
	// operations.
	OpIndex int32
	// Origin is the client operation the write comes from: OpIndex itself,
	// or the client delete an appended operation follows. A rejection is
	// attributed to it.
	Origin int32
	// Table is the written table.
	Table *schema.Table
	// Op is ssp2.OpUpsert or ssp2.OpDelete.
	Op    ssp2.OpKind
	RowID string
	// Row is the row that would be stored, in column order: the columns
	// the operation presented laid over the stored row, crdt columns
	// merged (SPEC §6.7 "the merged full row"). nil for a delete. Do not
	// modify it.
	Row ssp2.Row
	// Present holds the columns the operation presented (a wire version 3
	// push may present only some; older versions and inserts present
	// every column). nil for a delete. Do not modify it.
	Present ssp2.ColumnSet
	// Stored is the row as stored before this operation (as this commit
	// sees it), or nil when absent. Do not modify it.
	Stored *storage.RowRecord

	commit *commitState
}

// Value returns the value of the named column in the row the write would
// store (Row: the presented columns laid over the stored row), so a
// validator reads a column by name rather than by position; ok is false
// for a delete or a column the table does not have.
func (w *RowWrite) Value(column string) (v any, ok bool) {
	i := w.Table.Column(column)
	if i < 0 || w.Row == nil || i >= len(w.Row) {
		return nil, false
	}
	return w.Row[i], true
}

// Presented reports whether the operation presented the named column (a
// wire version 3 push may present only some; see Present). It is false for
// a delete and for a column the table does not have.
func (w *RowWrite) Presented(column string) bool {
	i := w.Table.Column(column)
	return i >= 0 && w.Present != nil && w.Present.Has(i)
}

// StagedOp is one applied operation of a commit, as the commit validator
// sees it: the client's operations in order, then those its declared
// references appended (SPEC §6.11).
type StagedOp struct {
	// OpIndex and Origin are as in RowWrite.
	OpIndex int32
	Origin  int32
	Table   string
	Op      ssp2.OpKind
	RowID   string
	// Row is the staged row, the merged full row (nil for a delete). Do not
	// modify it.
	Row ssp2.Row
	// Present holds the columns the operation presented (nil for a
	// delete); see RowWrite.Present. Do not modify it.
	Present ssp2.ColumnSet
	// Stored is the row as stored before the operation, or nil when it was
	// absent (an insert, or a delete of an absent row). Do not modify it.
	Stored *storage.RowRecord
}

// Limits of CommitView.ScanRows.
const (
	// DefaultScanRowsLimit is the page size of a ScanRows query without one.
	DefaultScanRowsLimit = 100
	// MaxScanRowsLimit is the largest page a ScanRows query may ask for.
	MaxScanRowsLimit = 1000
)

// ErrScanNeedsScopes is returned by CommitView.ScanRows for a query
// without a scope filter.
var ErrScanNeedsScopes = errors.New("partition: ScanRows needs a scope filter (at least one scope variable with at least one value)")

// ScanQuery selects rows of one table for CommitView.ScanRows.
type ScanQuery struct {
	// Table is the table name.
	Table string
	// Scopes is required: scope variable → accepted values; a row matches
	// when, for every variable, its column holds one of the values.
	Scopes map[string][]string
	// AfterRowID, when set, starts strictly after that primary key (byte
	// order), for paging.
	AfterRowID *string
	// Limit is 1-1000; 0 means DefaultScanRowsLimit.
	Limit int
}

// CommitView is the whole-commit validator's view of the commit: its
// operations and the candidate state inside the push transaction. It is
// valid only during the call.
type CommitView struct {
	CommitInfo
	// Ops are the commit's applied operations in order (deletes of absent
	// rows, which change nothing, are included).
	Ops []StagedOp

	p      *Partition
	tx     storage.PushTx
	commit *commitState
}

// GetRow returns the row of table as the commit would leave it, or nil.
func (c *CommitView) GetRow(ctx context.Context, table, rowID string) (*storage.RowRecord, error) {
	t := c.p.cfg.Schema.Table(table)
	if t == nil {
		return nil, fmt.Errorf("partition: GetRow: unknown table %q", table)
	}
	rec, err := c.tx.GetRow(ctx, t, rowID)
	if err != nil {
		c.commit.storageFailed(err)
		return nil, err
	}
	return rec, nil
}

// ScanRows returns up to q.Limit rows of q.Table matching q.Scopes as the
// commit would leave them, in primary-key order. A query without a
// scope filter fails with ErrScanNeedsScopes; a limit outside 0-1000, an
// unknown table or a scope variable the table does not declare fails with
// an error (nothing is read).
func (c *CommitView) ScanRows(ctx context.Context, q ScanQuery) ([]storage.RowRecord, error) {
	t := c.p.cfg.Schema.Table(q.Table)
	if t == nil {
		return nil, fmt.Errorf("partition: ScanRows: unknown table %q", q.Table)
	}
	if len(q.Scopes) == 0 {
		return nil, ErrScanNeedsScopes
	}
	for v, vals := range q.Scopes {
		if len(vals) == 0 {
			return nil, ErrScanNeedsScopes
		}
		if t.ScopeVar(v) == nil {
			return nil, fmt.Errorf("partition: ScanRows: table %q has no scope variable %q", q.Table, v)
		}
	}
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultScanRowsLimit
	case limit < 0 || limit > MaxScanRowsLimit:
		return nil, fmt.Errorf("partition: ScanRows: limit %d outside 1-%d", q.Limit, MaxScanRowsLimit)
	}
	rs, err := c.tx.ScanRows(ctx, storage.RowQuery{Table: t, Scopes: q.Scopes, AfterRowID: q.AfterRowID, Limit: limit})
	if err != nil {
		c.commit.storageFailed(err)
		return nil, err
	}
	return rs, nil
}

// Rejection is the error a host hook returns to reject a commit with its
// own code. Code must be 1-128 printable ASCII bytes without spaces and
// must not start with a reserved prefix (sync., blob., operation.,
// presence., client.); Message is what the client is told (at most 1024
// bytes are kept; empty: a default); Details, when set, must satisfy
// PUSH_RESULT_DETAILS' rules (ssp2.CheckDetailsJSON).
type Rejection struct {
	Code    string
	Message string
	Details *RejectionDetails
	// OpIndex is the operation a commit validator blames (ignored for row
	// validators, which always blame their own operation).
	OpIndex int32
}

// Error describes the rejection.
func (r *Rejection) Error() string { return r.Code + ": " + r.Message }

// Check returns why r is not a valid host rejection (its code or details
// break the rules above), or nil. A hook returning a rejection that fails
// Check rejects its commit with sync.constraint_violation instead (a host
// bug, logged); hosts building rejections from input can Check them first.
func (r *Rejection) Check() error {
	if bug := checkHostCode(r.Code); bug != "" {
		return errors.New(bug)
	}
	if r.Details != nil {
		b, err := json.Marshal(r.Details)
		if err != nil {
			return err
		}
		if err := ssp2.CheckDetailsJSON(string(b)); err != nil {
			return err
		}
	}
	return nil
}

// EqualValue reports whether two decoded row values (elements of an
// ssp2.Row, as RowWrite.Row and RowWrite.Stored hold them) are equal: the
// same Go type and value, floats bit for bit, json values by their raw
// text, bytes by content.
func EqualValue(a, b any) bool { return equalValue(a, b) }

// RejectionDetails are the structured details of a rejection, sent as
// PUSH_RESULT_DETAILS and persisted with the idempotent outcome. Tokens
// (Reason, RequiredAction, reference keys) match
// [a-z][a-z0-9]*([._-][a-z0-9]+)*.
type RejectionDetails struct {
	// FieldPaths are 1-32 unique paths, each at most 160 characters.
	FieldPaths []string `json:"fieldPaths,omitempty"`
	// Reason is a token of at most 96 characters.
	Reason string `json:"reason,omitempty"`
	// RequiredAction is a token of at most 96 characters.
	RequiredAction string `json:"requiredAction,omitempty"`
	// References holds 1-16 entries: token keys (<= 64 characters) to
	// values of at most 256 bytes.
	References map[string]string `json:"references,omitempty"`
}

// ReservedCodePrefixes are the code prefixes a host may not use.
var ReservedCodePrefixes = []string{"sync.", "blob.", "operation.", "presence.", "client."}

// Limits of a host rejection.
const (
	maxHostCodeBytes    = 128
	maxHostMessageBytes = 1024
)

// checkHostCode returns why code is not a valid host code, or "".
func checkHostCode(code string) string {
	if code == "" || len(code) > maxHostCodeBytes {
		return "code must be 1-128 bytes"
	}
	for i := 0; i < len(code); i++ {
		if code[i] <= ' ' || code[i] > '~' {
			return "code must be printable ASCII without spaces"
		}
	}
	for _, p := range ReservedCodePrefixes {
		if strings.HasPrefix(code, p) {
			return "code uses the reserved prefix " + p
		}
	}
	return ""
}

// commitState is what the hooks of one commit accumulate.
type commitState struct {
	// p and tx run the hooks' registered queries (txquery.go).
	p         *Partition
	tx        storage.PushTx
	hooks     *Hooks
	info      CommitInfo
	ops       []StagedOp
	reactions []storage.NewReaction
	// storageErr is the first storage failure a hook's read met: the
	// commit then fails as a storage error, whatever the hook returned.
	storageErr error
	// appended holds, for each operation the commit's declared references
	// appended (OpIndex = client operations + position), its origin.
	appended []int32
	// rejDetails is the details JSON of a row validator's rejection.
	rejDetails string
}

// stage records an applied operation for the commit validator.
func (s *commitState) stage(op StagedOp) { s.ops = append(s.ops, op) }

// rejected keeps a row validator's details and returns its record.
func (s *commitState) rejected(r *hookRejection) *ssp2.OpResult {
	if r == nil {
		return nil
	}
	s.rejDetails = r.details
	return r.rec
}

func (s *commitState) react(r Reaction) error {
	if s.hooks.KnownReaction == nil || !s.hooks.KnownReaction(r.Name) {
		return fmt.Errorf("partition: React: no handler is registered for reaction %q", r.Name)
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = s.hooks.DefaultMaxAttempts
		if r.MaxAttempts == 0 {
			r.MaxAttempts = DefaultReactionMaxAttempts
		}
	}
	if len(s.reactions) >= storage.MaxReactionsPerCommit {
		return fmt.Errorf("partition: React: a commit may schedule at most %d reactions", storage.MaxReactionsPerCommit)
	}
	nr := storage.NewReaction{Name: r.Name, Payload: slices.Clone(r.Payload), MaxAttempts: r.MaxAttempts}
	if err := storage.CheckReactions([]storage.NewReaction{nr}); err != nil {
		return fmt.Errorf("partition: React: %w", err)
	}
	s.reactions = append(s.reactions, nr)
	return nil
}

func (s *commitState) storageFailed(err error) {
	if s.storageErr == nil {
		s.storageErr = err
	}
}

// hookRejection is a hook's verdict on a commit: the op record and its
// details JSON ("" when none).
type hookRejection struct {
	rec     *ssp2.OpResult
	details string
}

// The fixed public messages of a hook that failed instead of rejecting
// (an error that is not a *Rejection, a panic, an invalid Rejection): SPEC
// §6.7 keeps the failure's own text out of wire results, persisted
// results and client outcomes (it is logged).
const (
	msgRowValidatorFailed    = "write validator failed"
	msgCommitValidatorFailed = "whole-commit validator failed"
)

// hookError maps a hook's error (or recovered panic) to the rejection of
// operation i (see RowValidator). For the commit validator, attribute
// maps the operation its Rejection names (Rejection.OpIndex) to the one
// the rejection is attributed to; ok false keeps i.
func (p *Partition) hookError(hook string, i int32, attribute func(int32) (int32, bool), err error) *hookRejection {
	failed := msgRowValidatorFailed
	if attribute != nil {
		failed = msgCommitValidatorFailed
	}
	var rj *Rejection
	if !errors.As(err, &rj) {
		p.log().Info("host hook failed; rejecting the commit with sync.constraint_violation", zap.String("hook", hook), zap.Error(err))
		return &hookRejection{rec: opError(i, syncerr.New(syncerr.ConstraintViolation, "%s", failed))}
	}
	if attribute != nil {
		if at, ok := attribute(rj.OpIndex); ok {
			i = at
		}
	}
	if bug := rj.Check(); bug != nil {
		p.log().Error("host hook returned an invalid rejection (a host bug); rejecting with sync.constraint_violation",
			zap.String("hook", hook), zap.String("code", rj.Code), zap.String("problem", bug.Error()))
		return &hookRejection{rec: opError(i, syncerr.New(syncerr.ConstraintViolation, "%s", failed))}
	}
	var details string
	if rj.Details != nil {
		b, _ := json.Marshal(rj.Details) // Check marshalled it
		details = string(b)
	}
	msg := rj.Message
	if msg == "" {
		msg = fmt.Sprintf("operation %d was rejected by the server's %s", i, hook)
	}
	if len(msg) > maxHostMessageBytes {
		msg = strings.ToValidUTF8(msg[:maxHostMessageBytes], "")
	}
	return &hookRejection{rec: &ssp2.OpResult{OpIndex: i, Status: ssp2.OpError, Code: rj.Code, Message: msg}, details: details}
}

// runHook calls fn, turning a panic into an error.
func runHook(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn()
}

// validateRow runs t's row validator, if any, on one write. It returns a
// rejection, or a storage error met by the hook's reads.
func (p *Partition) validateRow(ctx context.Context, cs *commitState, w *RowWrite) (*hookRejection, error) {
	v := p.cfg.Hooks.Validators[w.Table.Name]
	if v == nil {
		return nil, nil
	}
	w.CommitInfo, w.commit = cs.info, cs
	err := runHook(func() error { return v(ctx, w) })
	if cs.storageErr != nil {
		return nil, cs.storageErr
	}
	if err != nil {
		return p.hookError("row validator", w.Origin, nil, err), nil
	}
	return nil, nil
}

// validateCommit runs the whole-commit validator, if any.
func (p *Partition) validateCommit(ctx context.Context, tx storage.PushTx, cs *commitState, nops int) (*hookRejection, error) {
	v := p.cfg.Hooks.CommitValidator
	if v == nil {
		return nil, nil
	}
	view := &CommitView{CommitInfo: cs.info, Ops: cs.ops, p: p, tx: tx, commit: cs}
	err := runHook(func() error { return v(ctx, view) })
	if cs.storageErr != nil {
		return nil, cs.storageErr
	}
	if err != nil {
		// A rejection names a client operation (attributed to itself) or
		// one the commit's references appended (attributed to its origin);
		// any other index is attributed to operation 0.
		return p.hookError("commit validator", 0, func(k int32) (int32, bool) {
			switch {
			case k >= 0 && int(k) < nops:
				return k, true
			case int(k) >= nops && int(k)-nops < len(cs.appended):
				return cs.appended[int(k)-nops], true
			}
			return 0, false
		}, err), nil
	}
	return nil, nil
}

// outcome is one commit's result: its PUSH_RESULT and, for a host
// rejection with details, the detailsJson of its PUSH_RESULT_DETAILS.
type outcome struct {
	pr      *ssp2.PushResult
	details string
}

// addOutcome appends the commit's PUSH_RESULT, and its PUSH_RESULT_DETAILS
// right after it when the rejection has details.
func (r *Reply) addOutcome(o outcome) {
	r.addResult(o.pr)
	if o.details != "" && o.pr.Status == ssp2.CommitRejected && len(o.pr.Results) == 1 {
		r.Frames = append(r.Frames, &ssp2.PushResultDetails{ClientCommitID: o.pr.ClientCommitID,
			Entries: []ssp2.PushResultDetail{{OpIndex: o.pr.Results[0].OpIndex, DetailsJSON: o.details}}})
	}
}

// storeReactions stores the reactions the commit's hooks scheduled, in
// the push transaction, stamped with the commit's seq.
func (p *Partition) storeReactions(ctx context.Context, tx storage.PushTx, cs *commitState, rec storage.CommitRecord) error {
	if len(cs.reactions) == 0 {
		return nil
	}
	for i := range cs.reactions {
		cs.reactions[i].CommitSeq, cs.reactions[i].CreatedAtMs = rec.Seq, rec.CreatedAtMs
	}
	return tx.PutReactions(ctx, cs.reactions)
}

// storedDetails returns persisted details JSON if it is still valid
// PUSH_RESULT_DETAILS content ("" otherwise: a damaged record replays its
// rejection without details rather than failing the reply).
func storedDetails(d string) string {
	if d == "" || ssp2.CheckDetailsJSON(d) != nil {
		return ""
	}
	return d
}
