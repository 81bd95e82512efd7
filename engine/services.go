package engine

import (
	"github.com/synclane/synclane/engine/backfill"
	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/engine/lease"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/engine/segments"
)

// The feature services the engine starts and stops. Transports and hosts
// call them directly; each is never nil (a feature that is off answers
// its own "not configured" error).

// Segments returns the segment service: downloads of the segments
// bootstraps hand out by reference, their counters and sweep.
func (e *Engine) Segments() *segments.Service { return e.segments }

// Blobs returns the blob service: uploads, grants, authorized downloads,
// the presigned-URL switch, the orphan sweep and the blob counters.
func (e *Engine) Blobs() *blobs.Service { return e.blobs }

// Leases returns the auth lease service: whether leases are on and the
// operator's revocations.
func (e *Engine) Leases() *lease.Service { return e.leases }

// Reactions returns the durable reaction service: the queue's listing
// and counters and the dead-letter actions (ErrNoReactions without
// handlers).
func (e *Engine) Reactions() *reactions.Service { return e.reactions }

// Operations returns the remote operation service: Run for a decoded
// request, the query tables live watches follow, the counters and the
// registered ids.
func (e *Engine) Operations() *operations.Service { return e.operations }

// Retention returns the pruning and maintenance service: Prune,
// MaintenancePass, the loop's policy and counters, and partition
// snapshots (Capture, Restore).
func (e *Engine) Retention() *retention.Service { return e.retention }

// Backfill returns the backfill service: Run drives a declared
// checkpoint's backfill to activation.
func (e *Engine) Backfill() *backfill.Service { return e.backfill }
