// Package engine is synclane's transport-independent sync entry point.
//
// A transport authenticates a request (yielding an Identity), decodes the
// SSP2 envelope and calls Engine.Sync. The engine validates the request,
// routes it to its partition's actor (package actors), where pushes are
// applied and pulls are read from storage, and returns a Reply that the
// transport streams with Reply.WriteTo. Sync returns an error only before
// any response byte exists; such errors carry a protocol code
// (syncerr.CodeOf) and belong in the transport's pre-stream error form
// (HTTP JSON with the catalog status). Any custom transport uses the same
// two calls.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/synclane/synclane/actors"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
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
type ScopeResolver interface {
	ResolveScopes(ctx context.Context, id Identity) (map[string][]string, error)
}

// ScopeResolverFunc adapts a function to ScopeResolver.
type ScopeResolverFunc func(ctx context.Context, id Identity) (map[string][]string, error)

// ResolveScopes calls f.
func (f ScopeResolverFunc) ResolveScopes(ctx context.Context, id Identity) (map[string][]string, error) {
	return f(ctx, id)
}

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

// Config configures an Engine.
type Config struct {
	// Schema is the compiled schema served (required).
	Schema *schema.Schema
	// Store is the storage backend (required). The engine runs
	// EnsureSchema on it in New.
	Store storage.Store
	// Resolver resolves scopes (required).
	Resolver ScopeResolver
	// Logger receives structured logs (default: no-op).
	Logger *zap.Logger
	// MaxOperations caps push operations per request (default 500).
	MaxOperations int
	// MinSchemaVersion is the oldest client schema version served (default:
	// Schema.Version, the only one this engine can codec).
	MinSchemaVersion int32
	// IdleTimeout passivates idle partition actors (default 2m).
	IdleTimeout time.Duration
	// StorageTimeout bounds one actor turn of storage work (default 30s).
	StorageTimeout time.Duration
	// MaxBatch caps how many queued pushes one storage transaction applies
	// (default 256).
	MaxBatch int
	// DisableGroupCommit applies every push request in its own storage
	// transaction (the benchmark baseline).
	DisableGroupCommit bool
	// ClientFlushInterval is how often buffered client records (cursor
	// watermarks, subscriptions) are written back (default 1s). They are
	// always written when a partition actor stops and on Close.
	ClientFlushInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Checkpoints are the backfill checkpoints this process declares (RFC
	// 0007): New installs them when it raises the stored schema version, and
	// the serve gate lets this process serve while they are pending; every
	// other pending checkpoint at the running version closes the gate.
	Checkpoints []storage.CheckpointDeclaration
	// Feed, when set, reports commits made by other processes sharing the
	// store (PostgreSQL LISTEN/NOTIFY); *postgres.Store implements it. The
	// engine subscribes in New and stops in Close.
	Feed CommitFeed
	// OnCommit, when set, is called after commits become durable: for this
	// process's pushes (after their transaction commits) and for commits
	// reported by Feed. maxSeq is the partition's highest commit seq. It
	// must not block; realtime fan-out hooks in here.
	OnCommit func(partition string, maxSeq int64)
}

// CommitFeed reports commits made to a shared store by any process.
// Subscribe blocks, calling fn for every notification, until ctx ends or
// the feed fails; after a reconnect it reports every partition so nothing
// is missed.
type CommitFeed interface {
	Subscribe(ctx context.Context, fn func(partition string, maxSeq int64)) error
}

// Engine serves SSP2 requests. It is safe for concurrent use.
type Engine struct {
	cfg     Config
	system  *actor.ActorSystem
	manager *actors.Manager
	codecs  map[string]*ssp2.RowCodec
	metrics *Metrics

	closeOnce sync.Once
	stopFeed  context.CancelFunc
	feedDone  chan struct{}
}

// New validates cfg, ensures the storage schema and starts the partition
// actor system.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.Schema == nil || cfg.Store == nil || cfg.Resolver == nil {
		return nil, errors.New("engine: Schema, Store and Resolver are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxOperations <= 0 {
		cfg.MaxOperations = 500
	}
	if cfg.MinSchemaVersion <= 0 || cfg.MinSchemaVersion > cfg.Schema.Version {
		cfg.MinSchemaVersion = cfg.Schema.Version
	}
	if cfg.ClientFlushInterval <= 0 {
		cfg.ClientFlushInterval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Store.EnsureSchema(ctx, cfg.Schema, cfg.Checkpoints...); err != nil {
		if !errors.Is(err, storage.ErrCheckpointIncomplete) {
			return nil, fmt.Errorf("engine: ensure storage schema: %w", err)
		}
		// Serve anyway: the gate refuses every request with
		// sync.schema_not_ready until the checkpoint is activated.
		cfg.Logger.Warn("a backfill checkpoint at the running schema version is pending and not declared by this process; requests are refused until it is activated", zap.Error(err))
	}
	e := &Engine{cfg: cfg, codecs: map[string]*ssp2.RowCodec{}, metrics: newMetrics()}
	for _, t := range cfg.Schema.Tables {
		e.codecs[t.Name] = ssp2.NewRowCodec(t.Columns)
	}
	h := zapslog.NewHandler(cfg.Logger.Core(), zapslog.WithName("protoactor"))
	e.system = actor.NewActorSystem(actor.WithLoggerFactory(func(s *actor.ActorSystem) *slog.Logger {
		return slog.New(h).With("lib", "protoactor", "system", s.ID)
	}))
	maxBatch := cfg.MaxBatch
	if cfg.DisableGroupCommit {
		maxBatch = 1
	}
	e.manager = actors.NewManager(e.system, e.newWorker, actors.Options{
		IdleTimeout: cfg.IdleTimeout,
		JobTimeout:  cfg.StorageTimeout,
		MaxBatch:    maxBatch,
		Logger:      cfg.Logger,
	})
	if cfg.Feed != nil {
		fctx, cancel := context.WithCancel(context.Background())
		e.stopFeed, e.feedDone = cancel, make(chan struct{})
		go e.runFeed(fctx)
	}
	return e, nil
}

// runFeed keeps the commit feed subscribed until Close, resubscribing with
// backoff when it fails.
func (e *Engine) runFeed(ctx context.Context) {
	defer close(e.feedDone)
	backoff := 100 * time.Millisecond
	for {
		err := e.cfg.Feed.Subscribe(ctx, e.observeRemoteCommit)
		if ctx.Err() != nil {
			return
		}
		e.cfg.Logger.Warn("commit feed failed; resubscribing", zap.Error(err), zap.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// observeRemoteCommit tells a live partition actor about a commit another
// process made (it updates its view of the partition) and calls OnCommit.
func (e *Engine) observeRemoteCommit(partition string, maxSeq int64) {
	e.metrics.remoteCommits.Add(1)
	e.manager.SubmitIfLive(partition, &observeJob{seq: maxSeq})
	if e.cfg.OnCommit != nil {
		e.cfg.OnCommit(partition, maxSeq)
	}
}

// observeJob carries a commit notification to a partition actor.
type observeJob struct{ seq int64 }

func (*observeJob) Batchable() bool { return false }
func (*observeJob) Fail(error)      {}

// Schema returns the served schema.
func (e *Engine) Schema() *schema.Schema { return e.cfg.Schema }

// Store returns the storage backend.
func (e *Engine) Store() storage.Store { return e.cfg.Store }

// ActorStats reports the partition actor manager's counters.
func (e *Engine) ActorStats() actors.Stats { return e.manager.Stats() }

// Close stops every partition actor after the jobs already routed to it and
// writes back buffered client records. It does not close the Store.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		if e.stopFeed != nil {
			e.stopFeed()
			<-e.feedDone
		}
		e.manager.Stop()
		e.system.Shutdown()
	})
	return nil
}

// Sync serves one decoded request for an authenticated caller. On success
// the Reply holds the whole response (bounded by the pull limits), ready to
// stream; on error nothing has been produced and the error carries the
// protocol code for the transport's pre-stream error form.
func (e *Engine) Sync(ctx context.Context, id Identity, msg *ssp2.Message) (*Reply, error) {
	start := e.cfg.Now()
	rep, err := e.sync(ctx, id, msg)
	e.metrics.observe(rep, err, e.cfg.Now().Sub(start))
	return rep, err
}

func (e *Engine) sync(ctx context.Context, id Identity, msg *ssp2.Message) (*Reply, error) {
	if id.Partition == "" || id.ActorID == "" {
		return nil, syncerr.New(syncerr.AuthRequired, "request has no authenticated actor or partition")
	}
	if msg == nil || msg.Kind != ssp2.KindRequest {
		return nil, syncerr.New(syncerr.InvalidRequest, "not an SSP2 request")
	}
	req, err := msg.Request()
	if err != nil {
		return nil, err
	}
	job := &syncJob{ctx: ctx, id: id, req: req, done: make(chan jobResult, 1)}
	if len(req.Commits) > 0 || len(req.Subscriptions) > 0 {
		allowed, rerr := e.cfg.Resolver.ResolveScopes(ctx, id)
		if rerr != nil {
			e.cfg.Logger.Warn("scope resolver failed", zap.String("actor", id.ActorID),
				zap.String("partition", id.Partition), zap.Error(rerr))
		} else {
			job.allowed, job.resolved = partition.Allowed(allowed), true
		}
	}
	e.manager.Submit(id.Partition, job)
	select {
	case r := <-job.done:
		return r.reply, r.err
	case <-ctx.Done():
		return nil, syncerr.Wrap(syncerr.InternalError, ctx.Err(), "request abandoned before the partition answered")
	}
}

// syncJob is one Sync call traveling to its partition actor.
type syncJob struct {
	ctx      context.Context
	id       Identity
	req      *ssp2.Request
	allowed  partition.Allowed
	resolved bool
	done     chan jobResult
}

type jobResult struct {
	reply *Reply
	err   error
}

func (j *syncJob) Batchable() bool { return len(j.req.Commits) > 0 }

func (j *syncJob) Fail(err error) {
	var perr *actors.PanicError
	switch {
	case errors.As(err, &perr):
		err = syncerr.Wrap(syncerr.InternalError, err, "the partition failed while serving this request; retry")
	case errors.Is(err, actors.ErrStopped):
		err = syncerr.Wrap(syncerr.InternalError, err, "the server is shutting down; retry")
	}
	j.answer(nil, err)
}

func (j *syncJob) answer(r *Reply, err error) {
	select {
	case j.done <- jobResult{reply: r, err: err}:
	default: // already answered; never block the actor
	}
}
