package engine

import (
	"fmt"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Host write hooks: the types a host implements, re-exported from package
// partition (whose actor runs them inside the push transaction) so an
// embedding server needs only this package. Each alias's comment says what
// the type holds and guarantees; `go doc github.com/synclane/synclane/partition.<Name>`
// prints the same type with every field.
type (
	// RowValidator checks one write of a table (SPEC §6.7), set per table
	// in Config.Validators: func(ctx, *RowWrite) error. nil accepts; a
	// *Rejection (errors.As) rejects the commit with the host's code,
	// message and details; any other error or a panic rejects it with
	// sync.constraint_violation and the fixed message "write validator
	// failed". It runs on the partition's actor inside the push
	// transaction, for every client operation and every operation a
	// declared reference appended, after the row is merged.
	RowValidator = partition.RowValidator
	// CommitValidator checks a whole commit once, after every operation is
	// staged (SPEC §6.8), set in Config.CommitValidator:
	// func(ctx, *CommitView) error. Its errors map like a RowValidator's
	// (fixed message "whole-commit validator failed"); a Rejection blames
	// the operation its OpIndex names.
	CommitValidator = partition.CommitValidator
	// RowWrite is one write as a row validator sees it: CommitInfo
	// (Partition, ActorID, ClientID, ClientCommitID), OpIndex and Origin
	// (the client operation a rejection is attributed to), Table
	// (*schema.Table), Op (upsert or delete), RowID, Row (the row as it
	// would be stored: presented columns laid over the stored row, crdt
	// columns merged; nil for a delete), Present (the columns the
	// operation presented) and Stored (the row before the write, nil when
	// absent). Read columns by name with Value and Presented; React
	// schedules a reaction with the commit; Query runs a registered query
	// inside the push transaction. The views are valid only during the
	// call and must not be modified.
	RowWrite = partition.RowWrite
	// CommitView is the whole-commit validator's view: CommitInfo, Ops
	// (every applied operation in order, the client's then those declared
	// references appended), and reads of the candidate state inside the
	// push transaction — GetRow, ScanRows (scoped, paged, at most 1,000
	// rows a page) and Query (a registered query) — which see the commit's
	// own writes. React schedules a reaction. Valid only during the call.
	CommitView = partition.CommitView
	// StagedOp is one operation of CommitView.Ops: OpIndex, Origin, Table
	// (name), Op, RowID, Row (merged full row, nil for a delete), Present
	// and Stored, as in RowWrite.
	StagedOp = partition.StagedOp
	// ScanQuery selects rows for CommitView.ScanRows: Table, Scopes
	// (required: scope variable to accepted values), AfterRowID (paging,
	// exclusive) and Limit (1-1,000; 0 means 100).
	ScanQuery = partition.ScanQuery
	// Rejection is the error a hook returns to reject a commit with its
	// own code: Code (1-128 printable ASCII bytes, no spaces, no reserved
	// prefix sync./blob./operation./presence./client.), Message (what the
	// client is told, at most 1 KiB kept), Details (PUSH_RESULT_DETAILS)
	// and OpIndex (the operation a commit validator blames). A Rejection
	// that fails Check is a host bug: the commit is rejected with
	// sync.constraint_violation instead, and it is logged.
	Rejection = partition.Rejection
	// RejectionDetails are a rejection's structured details, sent as
	// PUSH_RESULT_DETAILS and stored with the idempotent outcome:
	// FieldPaths (1-32 paths), Reason and RequiredAction (tokens), and
	// References (1-16 token keys to short values).
	RejectionDetails = partition.RejectionDetails
	// Reaction is a side effect a hook schedules with its commit
	// (RowWrite.React, CommitView.React; SPEC §6.9): Name (a handler
	// registered in Config.Reactions' handlers), Payload (at most 64 KiB) and
	// MaxAttempts (1-100, 0 the default). It is stored in the push
	// transaction, so it exists exactly when the commit does, and is
	// delivered at least once afterwards (engine/reactions).
	Reaction = partition.Reaction
	// QueryRows is the answer of RowWrite.Query and CommitView.Query: the
	// statement's column names and its rows, driver values normalized as
	// remote query results are.
	QueryRows = partition.QueryRows
)

// configureHooks checks cfg's hooks and installs them in pc.
func configureHooks(cfg Config, pc *partition.Config) error {
	for table, v := range cfg.Validators {
		if cfg.Schema.Table(table) == nil {
			return fmt.Errorf("engine: Validators names table %q, which is not in the schema", table)
		}
		if v == nil {
			return fmt.Errorf("engine: Validators[%q] is nil", table)
		}
	}
	pc.Hooks = partition.Hooks{Validators: cfg.Validators, CommitValidator: cfg.CommitValidator}
	// Hooks and commands run registered queries in the push transaction
	// (CommitView.Query, RowWrite.Query, operations.Invocation.Query).
	if reg := cfg.Operations.Registry; reg != nil {
		pc.TxQuery = reg.TxQuery
	}
	return nil
}

// EqualValue reports whether two decoded row values (elements of an
// ssp2.Row, as RowWrite.Row and RowWrite.Stored hold them) are equal: the
// same Go type and value, floats bit for bit, json values by their raw
// text, bytes by content.
func EqualValue(a, b any) bool { return partition.EqualValue(a, b) }

// ExtractScopes returns scope variable → value for every declared scope
// variable of t, read from row; a missing value is sync.missing_scopes.
func ExtractScopes(t *schema.Table, row ssp2.Row) (map[string]string, *syncerr.Error) {
	return partition.ExtractScopes(t, row)
}
