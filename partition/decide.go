package partition

import (
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// The write rules of wire version 3 (SPEC §2.2, §6.2), as pure functions
// the push path calls in the SPEC's order.

// UpsertVerdict is the outcome of the version rules for one upsert.
type UpsertVerdict int

// Upsert verdicts (SPEC §6.2).
const (
	// ApplyInsert: the row is absent; insert it at version 1.
	ApplyInsert UpsertVerdict = iota
	// ApplyUpdate: apply the present columns at version stored+1.
	ApplyUpdate
	// Conflict: sync.version_conflict with serverVersion, serverRow and
	// conflictColumns.
	Conflict
	// Missing: sync.row_missing (a baseVersion above 0, or a partial
	// payload, naming a row that does not exist).
	Missing
	// Deleted: sync.row_deleted (an unversioned upsert of a row deleted
	// above the horizon: the delete wins).
	Deleted
	// BaseAhead: sync.invalid_request (a baseVersion the server never
	// issued).
	BaseAhead
)

// ContendedColumns returns the columns of an upsert against an existing
// row that conflict (SPEC §6.2 steps 4-5, §6.3 conflictColumns): every
// present column that is neither crdt nor the primary key and whose version
// (versions, one per column) exceeds base. With base 0 (a lost insert race)
// that is every such present column. The set is empty when none does.
func ContendedColumns(t *schema.Table, present ssp2.ColumnSet, versions []int64, base int64) ssp2.ColumnSet {
	out := ssp2.NewColumnSet(len(t.Columns))
	for i, c := range t.Columns {
		if i == t.PK || c.Type == ssp2.TypeCRDT || !present.Has(i) {
			continue
		}
		if versions[i] > base {
			out.Add(i)
		}
	}
	return out
}

// ContendableColumns returns every column of t a conflict can mark: all
// but the primary key and the crdt columns.
func ContendableColumns(t *schema.Table) ssp2.ColumnSet {
	out := ssp2.NewColumnSet(len(t.Columns))
	for i, c := range t.Columns {
		if i != t.PK && c.Type != ssp2.TypeCRDT {
			out.Add(i)
		}
	}
	return out
}

// DecideUpdate applies the version rules to an upsert against an existing
// row at server_version stored, after authorization and the scope-column
// rule (SPEC §6.2 steps 3-6): a baseVersion above stored is BaseAhead; 0
// is always a Conflict (the client lost an insert race); any other
// baseVersion conflicts iff contended is non-empty; no baseVersion applies
// (last write wins per column).
func DecideUpdate(stored int64, baseVersion *int64, contended ssp2.ColumnSet) UpsertVerdict {
	switch {
	case baseVersion == nil:
		return ApplyUpdate
	case *baseVersion > stored:
		return BaseAhead
	case *baseVersion == 0 || contended.Len() > 0:
		return Conflict
	}
	return ApplyUpdate
}

// DecideInsert applies the absent-row table of SPEC §6.2: baseVersion 0
// inserts (and recreates over a tombstone); a baseVersion above 0 is
// Missing; without one, a tombstone above horizon is Deleted, and
// otherwise only a payload presenting every column (full) inserts.
func DecideInsert(baseVersion *int64, tombstone, horizon int64, full bool) UpsertVerdict {
	switch {
	case baseVersion != nil && *baseVersion != 0:
		return Missing
	case baseVersion == nil && tombstone > horizon:
		return Deleted
	case !full:
		return Missing
	}
	return ApplyInsert
}

// VerdictError returns the protocol error of a refusing verdict of
// operation i, or nil (a Conflict's record is built by the caller).
func VerdictError(v UpsertVerdict, i int32, stored int64, baseVersion *int64) *syncerr.Error {
	switch v {
	case Missing:
		if baseVersion != nil && *baseVersion != 0 {
			return syncerr.New(syncerr.RowMissing, "operation %d: baseVersion %d names a row that does not exist", i, *baseVersion)
		}
		return syncerr.New(syncerr.RowMissing, "operation %d: a partial payload names a row that does not exist (an insert presents every column)", i)
	case Deleted:
		return syncerr.New(syncerr.RowDeleted, "operation %d: the row was deleted; an upsert without baseVersion does not recreate it (baseVersion 0 does)", i)
	case BaseAhead:
		return syncerr.New(syncerr.InvalidRequest, "operation %d: baseVersion %d exceeds the row's server_version %d", i, *baseVersion, stored)
	}
	return nil
}

// ConflictMessage is the message of a sync.version_conflict record.
const ConflictMessage = "present columns moved past baseVersion (§6.2)"

// EpochVerdict is the outcome of the log-epoch check of a request.
type EpochVerdict int

// Epoch verdicts (SPEC §2.1, §9).
const (
	// EpochProceed: serve the request.
	EpochProceed EpochVerdict = iota
	// EpochReset: answer RESP_HEADER{logEpoch, resetRequired=true}, END and
	// do nothing else (acquisition or mismatch).
	EpochReset
	// EpochWireUnsupported: a v1 request while the epoch is required
	// (sync.client_wire_unsupported).
	EpochWireUnsupported
)

// CheckEpoch decides how a request's epoch relates to the partition's.
// wire is the request's wire version, clientEpoch its REQ_HEADER logEpoch
// (nil when absent).
func CheckEpoch(wire uint16, clientEpoch *string, stored string, required bool) EpochVerdict {
	if wire < 2 {
		if required {
			return EpochWireUnsupported
		}
		return EpochProceed
	}
	if clientEpoch == nil || *clientEpoch != stored {
		return EpochReset
	}
	return EpochProceed
}

// NeedsFloor reports whether a client's schema version is outside what the
// server can codec (below the floor or above the served version), in which
// case the server answers the schema-floor response (SPEC §1.6).
func NeedsFloor(clientVersion, floor, served int32) bool {
	return clientVersion < floor || clientVersion > served
}

// RemoteCommandPrefix is the clientId prefix reserved for remote commands.
const RemoteCommandPrefix = `["remote-command",`

// CheckClientID validates a clientId against its stored binding (the actor
// that first used it in the partition; "" when unbound).
func CheckClientID(clientID, actorID, boundActor string) *syncerr.Error {
	if len(clientID) >= len(RemoteCommandPrefix) && clientID[:len(RemoteCommandPrefix)] == RemoteCommandPrefix {
		return syncerr.New(syncerr.InvalidClientID, "clientId may not start with %s", RemoteCommandPrefix)
	}
	if boundActor != "" && boundActor != actorID {
		return syncerr.New(syncerr.InvalidClientID, "clientId %s", fmt.Sprintf("%q is bound to another actor in this partition", clientID))
	}
	return nil
}
