// Package access holds who a caller is and how the host says what it may
// read and write: the Identity a transport authenticates, the host's
// ScopeResolver, and the Resolver the engine and its feature services ask
// (one place that survives a panicking resolver). It sits below package
// engine so the services (engine/blobs, engine/segments,
// engine/operations, ...) can take an Identity without importing the
// engine; package engine re-exports these names for embedders.
package access

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
)

// Identity is an authenticated caller: who it is and which partition its
// request addresses. Partitions never appear on the wire.
type Identity struct {
	ActorID   string
	Partition string
	// Grants are scope grants asserted by the authenticator (for example a
	// token's scopes claim), for resolvers that trust them; may be nil.
	Grants map[string][]string
}

// ScopeResolver is the host hook that says which scope values an actor may
// read and write: scope variable → values, "*" meaning any value. It is
// called at most once per request. An error revokes every subscription of
// the request and denies its writes (sync.forbidden); it is not an outage.
// To signal an outage instead, return an error wrapping ErrResolverOutage:
// the round is then authorized by the client's auth lease.
type ScopeResolver interface {
	ResolveScopes(ctx context.Context, id Identity) (map[string][]string, error)
}

// ScopeResolverFunc adapts a function to ScopeResolver.
type ScopeResolverFunc func(ctx context.Context, id Identity) (map[string][]string, error)

// ResolveScopes calls f.
func (f ScopeResolverFunc) ResolveScopes(ctx context.Context, id Identity) (map[string][]string, error) {
	return f(ctx, id)
}

// ErrResolverOutage is what a ScopeResolver returns (or wraps, checked
// with errors.Is) to signal an outage of the host's authorization source,
// as opposed to a failure: the round is then authorized by the client's
// auth lease (SPEC §7.3) and the lease is not refreshed. Without a valid
// lease (none, expired, issued to another actor, or with leases off) the
// request fails with 401 sync.auth_lease_required; with a revoked one,
// 401 sync.auth_lease_revoked. Neither purges anything on the client.
// Any other resolver error is a failure: subscriptions revoked, writes
// forbidden.
var ErrResolverOutage = errors.New("engine: scope resolver outage")

// AllowAll is a ScopeResolver granting every declared scope variable "*".
// Use it only for development.
func AllowAll(s *schema.Schema) ScopeResolver {
	all := map[string][]string{}
	for _, t := range s.Tables {
		for _, sv := range t.Scopes {
			all[sv.Var] = []string{partition.Wildcard}
		}
	}
	return ScopeResolverFunc(func(context.Context, Identity) (map[string][]string, error) { return all, nil })
}

// Resolver asks the host's ScopeResolver on behalf of the engine and its
// services. It is safe for concurrent use when the hook is.
type Resolver struct {
	hook   ScopeResolver
	schema *schema.Schema
	log    *zap.Logger
}

// NewResolver returns a Resolver over hook for schema s, logging to log
// (nil: no-op).
func NewResolver(hook ScopeResolver, s *schema.Schema, log *zap.Logger) *Resolver {
	if log == nil {
		log = zap.NewNop()
	}
	return &Resolver{hook: hook, schema: s, log: log}
}

// ResolveScopes calls the hook; a panic in it is logged and answered as a
// failed resolution (which every caller treats as no scopes: fail closed),
// so a host bug cannot take down the goroutine that asked.
func (r *Resolver) ResolveScopes(ctx context.Context, id Identity) (grants map[string][]string, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("scope resolver panicked", zap.String("actor", id.ActorID), zap.String("partition", id.Partition),
				zap.Any("panic", p), zap.Stack("stack"))
			grants, err = nil, fmt.Errorf("engine: scope resolver panicked: %v", p)
		}
	}()
	return r.hook.ResolveScopes(ctx, id)
}

// Resolve runs the scope resolver for id, as a sync request does once:
// ok is false when it failed (logged; every subscription is then revoked)
// or returned a variable no table declares.
func (r *Resolver) Resolve(ctx context.Context, id Identity) (allowed partition.Allowed, ok bool) {
	grants, err := r.ResolveScopes(ctx, id)
	if err != nil {
		r.log.Warn("scope resolver failed", zap.String("actor", id.ActorID),
			zap.String("partition", id.Partition), zap.Error(err))
		return nil, false
	}
	if partition.ValidateAllowed(r.schema, partition.Allowed(grants)) != nil {
		return nil, false
	}
	return partition.Allowed(grants), true
}
