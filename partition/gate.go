package partition

import (
	"context"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// RefusalKind says why the serve gate refuses a request.
type RefusalKind int

// Refusal kinds.
const (
	// RefuseSchema: the database holds a newer schema than this process runs.
	RefuseSchema RefusalKind = iota + 1
	// RefuseCheckpoint: a checkpoint at the running version is pending and
	// this process did not declare it.
	RefuseCheckpoint
	// RefuseEpoch: the gate token (stored schema version, log epoch) changed
	// while the reply was being built.
	RefuseEpoch
)

// Refusal is a closed serve gate.
type Refusal struct {
	Kind           RefusalKind
	StoredVersion  int32
	RunningVersion int32
	Checkpoint     storage.CheckpointRef
}

// GateRefusal applies the serve-gate rules (RFC 0007 §3): a stored schema
// version above the running one refuses; otherwise the first pending
// checkpoint this process did not declare refuses (its declared version is
// not compared). A stored version below the running one is not refused
// (the running process migrates it). nil means serve.
func GateRefusal(g storage.ServeGate, running int32, declared []storage.CheckpointDeclaration) *Refusal {
	if g.StoredSchemaVersion > running {
		return &Refusal{Kind: RefuseSchema, StoredVersion: g.StoredSchemaVersion, RunningVersion: running}
	}
	for _, p := range g.Pending {
		mine := false
		for _, d := range declared {
			if d.Partition == p.Partition && d.Name == p.Name {
				mine = true
				break
			}
		}
		if !mine {
			return &Refusal{Kind: RefuseCheckpoint, Checkpoint: p, StoredVersion: g.StoredSchemaVersion, RunningVersion: running}
		}
	}
	return nil
}

// GateToken is the part of the gate a reply is built under: the stored
// schema version and the partition's log epoch. Including the epoch makes a
// restore that goes V → other → V visible.
type GateToken struct {
	StoredVersion int32
	LogEpoch      string
}

// TokenOf returns the gate's token.
func TokenOf(g storage.ServeGate) GateToken {
	return GateToken{StoredVersion: g.StoredSchemaVersion, LogEpoch: g.LogEpoch}
}

// VerifyGate is the check made after a reply is built and before any byte
// of it is released: the gate must still be open and its token unchanged.
func VerifyGate(before GateToken, after storage.ServeGate, running int32, declared []storage.CheckpointDeclaration) *Refusal {
	if r := GateRefusal(after, running, declared); r != nil {
		return r
	}
	if TokenOf(after) != before {
		return &Refusal{Kind: RefuseEpoch, StoredVersion: after.StoredSchemaVersion, RunningVersion: running}
	}
	return nil
}

// Error renders the refusal as sync.schema_not_ready (retryable, HTTP 503)
// with the details clients and operators key on.
func (r *Refusal) Error() *syncerr.Error {
	e := syncerr.New(syncerr.SchemaNotReady, "the server is not ready to serve this schema; retry later")
	switch r.Kind {
	case RefuseSchema:
		e.Message = "the database holds a newer schema version than this server runs; retry later"
		return e.WithDetails(map[string]any{"storedSchemaVersion": r.StoredVersion, "runningSchemaVersion": r.RunningVersion})
	case RefuseCheckpoint:
		e.Message = "a backfill checkpoint is not yet activated; retry later"
		return e.WithDetails(map[string]any{"partition": r.Checkpoint.Partition, "projection": r.Checkpoint.Name})
	default:
		e.Message = "the partition changed while the response was being built; retry"
		return e.WithDetails(map[string]any{"logEpochChanged": true})
	}
}

// Gate is one process's serve gate: the schema version it runs and the
// backfill checkpoints it declared. Pull, push, backfill and readiness all
// decide through it, so the rule is spelled once.
type Gate struct {
	// Running is the schema version this process serves.
	Running int32
	// Declared are the checkpoints this process declared (it serves while
	// they are pending).
	Declared []storage.CheckpointDeclaration
}

// GateReader reads a partition's serve gate in one consistent read;
// storage.Checkpoints implements it.
type GateReader interface {
	ReadServeGate(ctx context.Context, partition string, running int32) (storage.ServeGate, error)
}

// TxGateReader reads the serve gate inside a push transaction, under the
// partition lock; storage.PushTx implements it.
type TxGateReader interface {
	ReadServeGate(ctx context.Context, running int32) (storage.ServeGate, error)
}

// Open reads the gate of partition and applies the rules: it returns the
// token a reply is built under, or an error: the refusal
// (sync.schema_not_ready) or the read's failure as a protocol error.
func (g Gate) Open(ctx context.Context, r GateReader, partition string) (GateToken, error) {
	read, err := r.ReadServeGate(ctx, partition, g.Running)
	if err != nil {
		return GateToken{}, storageErr(err)
	}
	return g.open(read)
}

// OpenTx is Open inside a push transaction.
func (g Gate) OpenTx(ctx context.Context, tx TxGateReader) (GateToken, error) {
	read, err := tx.ReadServeGate(ctx, g.Running)
	if err != nil {
		return GateToken{}, storageErr(err)
	}
	return g.open(read)
}

func (g Gate) open(read storage.ServeGate) (GateToken, error) {
	if ref := GateRefusal(read, g.Running, g.Declared); ref != nil {
		return TokenOf(read), ref.Error()
	}
	return TokenOf(read), nil
}

// Verify re-reads the gate after a reply was built under before and
// returns nil only when the gate is still open with the same token: the
// reply may then be released, once its incremental sections below the
// returned horizon (read in the same snapshot) are expired (Reply's
// expireBelow). Otherwise the reply must be dropped and the error
// (sync.schema_not_ready, or the read's failure) answered instead.
func (g Gate) Verify(ctx context.Context, r GateReader, partition string, before GateToken) (GateToken, int64, error) {
	read, err := r.ReadServeGate(ctx, partition, g.Running)
	if err != nil {
		return before, 0, storageErr(err)
	}
	if ref := VerifyGate(before, read, g.Running, g.Declared); ref != nil {
		return TokenOf(read), read.HorizonSeq, ref.Error()
	}
	return before, read.HorizonSeq, nil
}
