package engine

import (
	"fmt"

	"github.com/synclane/synclane/partition"
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
	// ScanQuery selects rows for CommitView.ScanRows.
	ScanQuery = partition.ScanQuery
	// Rejection is the error a hook returns to reject with its own code.
	Rejection = partition.Rejection
	// RejectionDetails are a rejection's PUSH_RESULT_DETAILS.
	RejectionDetails = partition.RejectionDetails
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
	return nil
}
