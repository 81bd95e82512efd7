package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// Readiness phases reported by EnsureReady.
const (
	PhaseSchemaCompile    = "schema_compile"
	PhaseStorageMigration = "storage_migration"
)

// ReadinessError says why a server is not ready to serve: its schema does
// not compile, or storage could not be made current for it. Its code is
// sync.schema_not_ready.
type ReadinessError struct {
	// Phase is where it failed: PhaseSchemaCompile or
	// PhaseStorageMigration.
	Phase string
	// SchemaVersion is the schema version being made ready (0 when the
	// schema did not compile).
	SchemaVersion int32
	// Cause is the underlying error (Unwrap returns it).
	Cause error
}

// Error implements error.
func (e *ReadinessError) Error() string {
	return fmt.Sprintf("%s: not ready (phase %s, schema version %d): %v", syncerr.SchemaNotReady, e.Phase, e.SchemaVersion, e.Cause)
}

// Unwrap returns the cause.
func (e *ReadinessError) Unwrap() error { return e.Cause }

// Gated reports whether the only problem is a pending checkpoint this
// process did not declare: the process can run, and its serve gate refuses
// requests until the checkpoint is activated.
func (e *ReadinessError) Gated() bool { return errors.Is(e.Cause, storage.ErrCheckpointIncomplete) }

// EnsureReady is startup readiness: it compiles the schema source and makes
// storage current for it, installing decls with a schema bump. Failures are
// *ReadinessError with the phase that failed.
func EnsureReady(ctx context.Context, source []byte, st storage.Lifecycle, decls []storage.CheckpointDeclaration) (*schema.Schema, error) {
	s, err := schema.Parse(source)
	if err != nil {
		return nil, &ReadinessError{Phase: PhaseSchemaCompile, Cause: err}
	}
	if err := st.EnsureSchema(ctx, s, decls...); err != nil {
		return s, &ReadinessError{Phase: PhaseStorageMigration, SchemaVersion: s.Version, Cause: err}
	}
	return s, nil
}

// Ready reports whether this engine may serve now: nil when the serve gate
// is open, otherwise the refusal (sync.schema_not_ready, with the details
// clients get) or the storage failure that kept it from reading the gate.
// It applies the same gate as every request; use it for readiness probes.
func (e *Engine) Ready(ctx context.Context) error {
	_, err := e.pcfg.Gate.Open(ctx, e.cfg.Backend.Checkpoints, "")
	return err
}
