// Package backfill runs a backfill checkpoint to activation (RFC 0007):
// it claims the checkpoint, projects a source table's rows into a target
// table in batches, each one commit through the partition actor's push
// path, catches up with the source changes made meanwhile, and activates
// the checkpoint. The engine builds one Service; a host runs it through
// Engine.Backfill. It has no options and no background loop: Run works on
// the caller's goroutine.
package backfill

import (
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// Actors runs a job on a partition's actor (the engine's actor runtime).
type Actors interface {
	Submit(partition string, job partition.Job)
}

// Deps are what the engine gives the service (all required).
type Deps struct {
	// Schema is the served schema (the source and target tables).
	Schema *schema.Schema
	// Actors runs the batches on the partition's actor.
	Actors Actors
	// Now is the engine's clock and Logger the log.
	Now    func() time.Time
	Logger *zap.Logger
}

// Service runs backfills. It is safe for concurrent use (concurrent runs
// of one checkpoint supersede each other by owner epoch).
type Service struct {
	commitLog   storage.Log
	rows        storage.Rows
	checkpoints storage.Checkpoints
	deps        Deps
}

// New builds the service over the storage Log (the source's changes),
// Rows (its rows and the target's) and Checkpoints roles.
func New(log storage.Log, rows storage.Rows, checkpoints storage.Checkpoints, deps Deps) *Service {
	return &Service{commitLog: log, rows: rows, checkpoints: checkpoints, deps: deps}
}
