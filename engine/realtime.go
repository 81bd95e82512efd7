package engine

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/syncerr"
)

// The calls below serve a realtime transport (package transport/realtime):
// each reaches the partition's actor as a job, so sockets read client
// records and the log only where the actor owns them.

// Now returns the engine's clock (Config.Now).
func (e *Engine) Now() time.Time { return e.cfg.Now() }

// ClientState returns the state a realtime socket of clientID in id's
// partition starts from: the partition's registry entry and the client's
// record (bindings, registered subscriptions, cursor).
func (e *Engine) ClientState(ctx context.Context, id Identity, clientID string) (partition.ClientState, error) {
	if verr := partition.ValidateIdentity(id.ActorID, id.Partition); verr != nil {
		return partition.ClientState{}, verr
	}
	j := partition.NewClientJob(ctx, clientID)
	e.runtime.Submit(id.Partition, j)
	st, err := j.Wait(ctx)
	if err != nil && syncerr.CodeOf(err) == "" {
		err = syncerr.Wrap(syncerr.InternalError, err, "the partition could not load the client")
	}
	return st, err
}

// Resolve runs the scope resolver for id, as Sync does once per request:
// ok is false when it failed (every subscription is then revoked) or
// returned a variable no table declares.
func (e *Engine) Resolve(ctx context.Context, id Identity) (allowed partition.Allowed, ok bool) {
	grants, err := e.resolveScopes(ctx, id)
	if err != nil {
		e.cfg.Logger.Warn("scope resolver failed", zap.String("actor", id.ActorID),
			zap.String("partition", id.Partition), zap.Error(err))
		return nil, false
	}
	if partition.ValidateAllowed(e.cfg.Schema, partition.Allowed(grants)) != nil {
		return nil, false
	}
	return partition.Allowed(grants), true
}

// BuildDeltas asks the partition's actor for realtime delta sections (see
// partition.DeltaJob).
func (e *Engine) BuildDeltas(ctx context.Context, partitionName string, req partition.DeltaRequest) (*partition.DeltaResult, error) {
	j := partition.NewDeltaJob(ctx, req)
	e.runtime.Submit(partitionName, j)
	return j.Wait(ctx)
}

// Ack records realtime acknowledgements in the partition's client records
// (see partition.AckJob) and waits until the actor has taken them.
func (e *Engine) Ack(ctx context.Context, partitionName string, acks []partition.Ack) error {
	j := partition.NewAckJob(ctx, acks)
	e.runtime.Submit(partitionName, j)
	return j.Wait(ctx)
}
