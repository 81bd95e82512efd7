package engine

import (
	"fmt"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Host write hooks: the types a host implements, re-exported from package
// partition (whose actor runs them) so an embedding server needs only this
// package. See partition.Hooks for when each runs and how its errors map
// to protocol rejections.
type (
	// RowValidator checks one write of a table (SPEC §6.7).
	RowValidator = partition.RowValidator
	// CommitValidator checks a whole commit after staging (SPEC §6.8).
	CommitValidator = partition.CommitValidator
	// RowWrite is one operation as a row validator sees it.
	RowWrite = partition.RowWrite
	// CommitView is the commit validator's view of the commit.
	CommitView = partition.CommitView
	// StagedOp is one operation of a commit in CommitView.Ops.
	StagedOp = partition.StagedOp
	// ScanQuery selects rows for CommitView.ScanRows.
	ScanQuery = partition.ScanQuery
	// Rejection is the error a hook returns to reject with its own code.
	Rejection = partition.Rejection
	// RejectionDetails are a rejection's PUSH_RESULT_DETAILS.
	RejectionDetails = partition.RejectionDetails
	// Reaction is a side effect a hook schedules with its commit
	// (RowWrite.React, CommitView.React; see engine/reactions).
	Reaction = partition.Reaction
	// QueryRows is a registered query's answer inside the push
	// transaction (CommitView.Query, RowWrite.Query).
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
