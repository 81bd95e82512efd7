package engine

import (
	"context"
	"time"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/syncerr"
)

// The calls below serve a realtime transport (package transport/realtime):
// each reaches the partition's actor as a job, so sockets read client
// records and the log only where the actor owns them.

// The types a realtime transport exchanges with the engine, re-exported
// from package partition (whose actor builds them) so a transport needs
// only this package. `go doc github.com/synclane/synclane/partition.<Name>`
// prints each with its fields; transport/realtime is the reference user.
type (
	// ClientState is what a connecting realtime socket starts from, as
	// Engine.ClientState reads it: the partition's registry entry (Info)
	// and the client's record — whether it exists, the actor it is bound
	// to, its cursor, wire version and registered subscriptions.
	ClientState = partition.ClientState
	// StoredSubscription is a registered subscription as loaded from a
	// client record (ClientState.Subscriptions).
	StoredSubscription = partition.StoredSubscription
	// Registration is a served round of a client, reported through
	// Config.OnRegistration.
	Registration = partition.Registration
	// RegisteredSubscription is one subscription of a Registration: its
	// ID, table, effective scopes (nil when revoked or reset) and cursor.
	RegisteredSubscription = partition.RegisteredSubscription
	// CommitKeys are the scope keys one commit touches, reported through
	// Config.OnCommitKeys.
	CommitKeys = partition.CommitKeys
	// DeltaRequest asks Engine.BuildDeltas for the delta sections of
	// groups of sockets (DeltaGroup) up to the partition's newest commit,
	// bounded per subscription (LimitChanges) and per group (MaxBytes).
	DeltaRequest = partition.DeltaRequest
	// DeltaGroup is one subscription set shared by one or more sockets,
	// so the sections are built once for all of them.
	DeltaGroup = partition.DeltaGroup
	// DeltaSub is one subscription a delta continues: its ID, table,
	// effective scopes and the cursor the delta starts after.
	DeltaSub = partition.DeltaSub
	// DeltaSections is one group's answer in a DeltaResult: the frames to
	// send (per subscription SUB_START, its COMMITs after the cursor,
	// SUB_END), or Incomplete / TooLarge when its sockets must catch up by
	// a round instead.
	DeltaSections = partition.DeltaSections
	// DeltaResult answers a DeltaRequest: one DeltaSections per group and
	// the log epoch and newest commit seq (UpTo) they were built under.
	DeltaResult = partition.DeltaResult
	// Ack is one client's acknowledgement of realtime deltas through
	// Cursor, from a socket of ActorID registered under LogEpoch, recorded
	// by Engine.Ack as the client's progress.
	Ack = partition.Ack
	// Allowed is a scope resolution's result: scope variable to allowed
	// values (Resolve).
	Allowed = partition.Allowed
)

// ValidateIdentity checks an authenticated actor id and partition name
// against the identifier limits, as every engine call does; a transport
// checks it before it holds a connection for the identity.
func ValidateIdentity(actorID, partitionName string) *syncerr.Error {
	return partition.ValidateIdentity(actorID, partitionName)
}

// ValidateClientID checks a clientId given outside an SSP2 request (a
// realtime connect's query parameter) against the identifier limits.
func ValidateClientID(clientID string) *syncerr.Error { return partition.ValidateClientID(clientID) }

// CheckClientID validates clientID, used by actorID, against the actor it
// is bound to in its partition (boundActor, "" when unbound), as a sync
// request's clientId is checked.
func CheckClientID(clientID, actorID, boundActor string) *syncerr.Error {
	return partition.CheckClientID(clientID, actorID, boundActor)
}

// Effective computes a subscription's effective scopes from its requested
// scope map and the actor's Allowed map (resolved false: the resolver
// failed), as a pull does; revoked reports a subscription left with no
// effective scope.
func Effective(requested map[string][]string, allowed Allowed, resolved bool) (effective map[string][]string, revoked bool) {
	return partition.Effective(requested, allowed, resolved)
}

// Now returns the engine's clock (Config.Now).
func (e *Engine) Now() time.Time { return e.cfg.Now() }

// ClientState returns the state a realtime socket of clientID in id's
// partition starts from: the partition's registry entry and the client's
// record (bindings, registered subscriptions, cursor). In cluster mode it
// is read on the partition's owner.
func (e *Engine) ClientState(ctx context.Context, id Identity, clientID string) (ClientState, error) {
	if verr := partition.ValidateIdentity(id.ActorID, id.Partition); verr != nil {
		return ClientState{}, verr
	}
	if e.cluster == nil {
		return e.clientStateLocal(ctx, id, clientID)
	}
	st, _, err := routeCall(ctx, e.cluster, callClientState, id.Partition, func() (ClientState, error) {
		return e.clientStateLocal(ctx, id, clientID)
	}, func(ctx context.Context, owner string) (ClientState, error) {
		return e.cluster.cfg.Peers.ClientState(ctx, owner, id, clientID)
	})
	return st, err
}

// ClientStateOwned is ClientState for a call another member forwarded
// here: run only while this member owns the partition (ErrNotOwner
// otherwise).
func (e *Engine) ClientStateOwned(ctx context.Context, id Identity, clientID string) (ClientState, error) {
	if verr := partition.ValidateIdentity(id.ActorID, id.Partition); verr != nil {
		return ClientState{}, verr
	}
	if e.cluster == nil {
		return e.clientStateLocal(ctx, id, clientID)
	}
	return ownedCall(e.cluster, callClientState, id.Partition, func() (ClientState, error) {
		return e.clientStateLocal(ctx, id, clientID)
	})
}

func (e *Engine) clientStateLocal(ctx context.Context, id Identity, clientID string) (ClientState, error) {
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
func (e *Engine) Resolve(ctx context.Context, id Identity) (allowed Allowed, ok bool) {
	return e.resolver.Resolve(ctx, id)
}

// BuildDeltas asks the partition's actor for realtime delta sections (see
// partition.DeltaJob); in cluster mode the owner's actor builds them.
func (e *Engine) BuildDeltas(ctx context.Context, partitionName string, req DeltaRequest) (*DeltaResult, error) {
	if e.cluster == nil {
		return e.buildDeltasLocal(ctx, partitionName, req)
	}
	res, _, err := routeCall(ctx, e.cluster, callDeltas, partitionName, func() (*DeltaResult, error) {
		return e.buildDeltasLocal(ctx, partitionName, req)
	}, func(ctx context.Context, owner string) (*DeltaResult, error) {
		return e.cluster.cfg.Peers.BuildDeltas(ctx, owner, partitionName, req)
	})
	return res, err
}

// BuildDeltasOwned is BuildDeltas for a call another member forwarded
// here (ErrNotOwner when this member does not own the partition).
func (e *Engine) BuildDeltasOwned(ctx context.Context, partitionName string, req DeltaRequest) (*DeltaResult, error) {
	if e.cluster == nil {
		return e.buildDeltasLocal(ctx, partitionName, req)
	}
	return ownedCall(e.cluster, callDeltas, partitionName, func() (*DeltaResult, error) {
		return e.buildDeltasLocal(ctx, partitionName, req)
	})
}

func (e *Engine) buildDeltasLocal(ctx context.Context, partitionName string, req DeltaRequest) (*DeltaResult, error) {
	j := partition.NewDeltaJob(ctx, req)
	e.runtime.Submit(partitionName, j)
	return j.Wait(ctx)
}

// Ack records realtime acknowledgements in the partition's client records
// (see partition.AckJob) and waits until the actor (the owner's, in
// cluster mode) has taken them.
func (e *Engine) Ack(ctx context.Context, partitionName string, acks []Ack) error {
	if e.cluster == nil {
		return e.ackLocal(ctx, partitionName, acks)
	}
	_, err := e.cluster.route(ctx, callAck, partitionName, func() error {
		return e.ackLocal(ctx, partitionName, acks)
	}, func(ctx context.Context, owner string) error {
		return e.cluster.cfg.Peers.Ack(ctx, owner, partitionName, acks)
	})
	return err
}

// AckOwned is Ack for a call another member forwarded here (ErrNotOwner
// when this member does not own the partition).
func (e *Engine) AckOwned(ctx context.Context, partitionName string, acks []Ack) error {
	if e.cluster == nil {
		return e.ackLocal(ctx, partitionName, acks)
	}
	return e.cluster.owned(callAck, partitionName, func() error { return e.ackLocal(ctx, partitionName, acks) })
}

func (e *Engine) ackLocal(ctx context.Context, partitionName string, acks []Ack) error {
	j := partition.NewAckJob(ctx, acks)
	e.runtime.Submit(partitionName, j)
	return j.Wait(ctx)
}
