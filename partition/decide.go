package partition

import (
	"fmt"

	"github.com/synclane/synclane/protocol/syncerr"
)

// UpsertVerdict is the outcome of the version check of one upsert.
type UpsertVerdict int

// Upsert verdicts (SPEC §6.2).
const (
	// ApplyInsert: the row is absent; insert it with version 1.
	ApplyInsert UpsertVerdict = iota
	// ApplyUpdate: update the existing row to version stored+1.
	ApplyUpdate
	// Conflict: baseVersion differs from the stored version
	// (sync.version_conflict with serverVersion and serverRow).
	Conflict
	// Missing: baseVersion names a version of a row that does not exist
	// (sync.row_missing).
	Missing
)

// DecideUpsert applies the conflict rules of SPEC §6.2. exists and stored
// describe the current row; baseVersion nil means last-write-wins.
func DecideUpsert(exists bool, stored int64, baseVersion *int64) UpsertVerdict {
	if baseVersion == nil {
		if exists {
			return ApplyUpdate
		}
		return ApplyInsert
	}
	base := *baseVersion
	switch {
	case !exists && base == 0:
		return ApplyInsert
	case !exists:
		return Missing
	case base == stored:
		return ApplyUpdate
	default:
		return Conflict
	}
}

// VerdictError returns the protocol error of a refusing verdict, or nil.
func VerdictError(v UpsertVerdict, stored int64, baseVersion *int64) *syncerr.Error {
	switch v {
	case Conflict:
		return syncerr.New(syncerr.VersionConflict, "baseVersion %d does not match server_version %d", *baseVersion, stored)
	case Missing:
		return syncerr.New(syncerr.RowMissing, "baseVersion %d given for a row that does not exist", *baseVersion)
	}
	return nil
}

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
