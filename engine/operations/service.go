package operations

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/storage"
)

// Options configure remote operations (engine.Config.Operations;
// REMOTE.md revision 1).
type Options struct {
	// Registry is the registry of queries and commands served (nil: every
	// operation is operation.unknown). It must be built for the engine's
	// schema (engine.New refuses another).
	Registry *Registry
	// Timeout bounds one remote query's storage work (default
	// DefaultTimeout); a query running longer fails with
	// operation.query_failed. Commands are bounded by the engine's
	// StorageTimeout.
	Timeout time.Duration
}

// Actors runs a job on a partition's actor (the engine's actor runtime).
type Actors interface {
	Submit(partition string, job partition.Job)
}

// Resolver resolves a caller's scopes as a sync request does (ok false:
// the resolver failed or answered an undeclared variable).
type Resolver interface {
	Resolve(ctx context.Context, id access.Identity) (partition.Allowed, bool)
}

// Deps are what the engine gives the service.
type Deps struct {
	// Actors runs commands on the partition's actor.
	Actors Actors
	// Resolver resolves the caller's scopes for scoped queries and
	// commands.
	Resolver Resolver
	// Gate is the serve gate queries run under.
	Gate partition.Gate
	// Logger receives failed operations (required).
	Logger *zap.Logger
}

// Service runs remote operations and counts them. It is safe for
// concurrent use.
type Service struct {
	reg     *Registry
	clients storage.Clients
	queries storage.Querier
	opts    Options
	deps    Deps
	// ops counts remote operations (stats.go).
	ops operationCounters
}

// NewService builds the executor of opts.Registry over the storage
// Clients role (client bindings) and Queries role (needed only when
// queries are registered; engine.New checks it).
func NewService(clients storage.Clients, queries storage.Querier, opts Options, deps Deps) *Service {
	return &Service{reg: opts.Registry, clients: clients, queries: queries, opts: opts, deps: deps}
}
