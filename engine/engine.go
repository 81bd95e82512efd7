// Package engine is synclane's transport-independent sync entry point.
//
// A transport authenticates a request (yielding an Identity), decodes the
// SSP2 envelope and calls Engine.Sync. The engine resolves the caller's
// scopes and routes the request to its partition's actor (package actors
// runs it; package partition is what the actor owns and does), where
// pushes are applied and pulls are read from storage, and returns a Reply that the
// transport streams with Reply.WriteTo. Sync returns an error only before
// any response byte exists; such errors carry a protocol code
// (syncerr.CodeOf) and belong in the transport's pre-stream error form
// (HTTP JSON with the catalog status). Any custom transport uses the same
// two calls.
//
// The engine is the router and the lifecycle: it routes an identity to its
// partition (Sync, and the realtime calls ClientState, BuildDeltas, Ack),
// checks at New that the backend has the storage role of every configured
// feature (roles.go), and starts and stops the feature services, each in
// its own package with its own options and background loop: Segments
// (engine/segments), Blobs (engine/blobs), Retention (engine/retention:
// pruning, the maintenance loop, snapshots), Reactions
// (engine/reactions), Leases (engine/lease), Operations
// (engine/operations) and Backfill (engine/backfill). Transports and
// hosts call a service through its accessor (eng.Blobs().Upload, ...);
// the services import no engine: what they need from it comes in through
// engine/access and small interfaces of their own.
package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/synclane/synclane/actors"
	"github.com/synclane/synclane/engine/access"
	"github.com/synclane/synclane/engine/backfill"
	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/engine/lease"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore"
)

// The caller types, re-exported from package engine/access (where the
// feature services take them too) so an embedder needs only this package.
type (
	// Identity is an authenticated caller, as a transport's authenticator
	// establishes it: ActorID (who), Partition (which partition the request
	// is for; "" is refused) and Grants (scope grants the authenticator
	// asserts, e.g. a token's scopes claim, for resolvers that trust them;
	// may be nil). Every engine call checks it (ValidateIdentity).
	Identity = access.Identity
	// ScopeResolver is the host hook that says which scope values an actor
	// may read and write: ResolveScopes(ctx, Identity) returns scope
	// variable → values, "*" meaning any value. It is called at most once
	// per request. An error revokes every subscription of the request and
	// denies its writes (sync.forbidden); an error wrapping
	// ErrResolverOutage is an outage instead: the round is authorized by
	// the client's auth lease, nothing is revoked.
	ScopeResolver = access.ScopeResolver
	// ScopeResolverFunc adapts a func(ctx, Identity) (map[string][]string,
	// error) to ScopeResolver.
	ScopeResolverFunc = access.ScopeResolverFunc
)

// ErrResolverOutage is what a ScopeResolver returns (or wraps) to signal
// an outage of the host's authorization source rather than a failure:
// the round is authorized by the client's auth lease (see
// access.ErrResolverOutage).
var ErrResolverOutage = access.ErrResolverOutage

// AllowAll is a ScopeResolver granting every declared scope variable "*".
// Use it only for development.
func AllowAll(s *schema.Schema) ScopeResolver { return access.AllowAll(s) }

// Config configures an Engine (New). Schema, Backend and Resolver are
// required; every other field has a working zero value (a feature group
// such as Blobs, Reactions or Retention is off until configured). New
// reads the Config once: changing it afterwards has no effect. Extensions
// run their Configure on it first. ExampleNew is a complete embedded
// server.
type Config struct {
	// Schema is the schema served, compiled by schema.Parse from the
	// application's JSON schema (required). Its Version is the version
	// clients must speak (see MinSchemaVersion); New makes storage current
	// for it before serving.
	Schema *schema.Schema
	// Backend is the storage backend's roles (required), as its package
	// builds them (memory.Store.Backend, sqlite.Store.Backend,
	// postgres.Store.Backend). New refuses, before touching storage, a
	// Backend without a required role (storage.RequiredRoles()) and one
	// without the role a configured feature needs, naming both: Blobs for
	// Blobs.Store, Queries for registered queries in Operations, Reactions
	// for Reactions.Handlers, Leases for Leases.TTL, Retention for
	// Retention.Interval. Prune and MaintenancePass need Retention,
	// Capture and Restore Snapshots (they answer an error without; see
	// Engine.Retention). New runs EnsureSchema (Lifecycle) before serving.
	Backend storage.Backend
	// Resolver is the host's scope resolver (required): for each request
	// it says which scope values the authenticated actor may read and
	// write (see ScopeResolver). ScopeResolverFunc adapts a function;
	// transport/auth.GrantsResolver trusts a token's scopes claim;
	// AllowAll grants everything (development only).
	Resolver ScopeResolver
	// Logger receives structured logs (default: no-op).
	Logger *zap.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time

	// The partition runtime: requests, actors, storage turns, the serve
	// gate and what runs inside a push.

	// WireVersions is the window of SSP2 wire versions served (SPEC §9):
	// default DefaultWireVersions, version 3 alone, as the reference
	// server. A request in another version is refused with
	// sync.invalid_request before any frame is read. Listing 1 and 2 keeps
	// clients that have not upgraded working during a migration: their
	// requests are decoded with their own layouts (a push payload is a full
	// row: every column present) and answered with their own layouts (no
	// conflictColumns; realtime deltas in the client's version), under
	// version 3's write rules — one rule set (docs/write-semantics.md says
	// what an older client sees differently). sync.client_wire_unsupported
	// exists only where 1 is in the window. New refuses versions other
	// than 1, 2 and 3.
	WireVersions []uint16
	// MaxOperations caps push operations per request (default 500).
	MaxOperations int
	// MaxCascadeOperations caps the operations one commit's declared
	// references may append (cascaded deletes, SET NULL upserts; SPEC
	// §6.11): default partition.DefaultMaxCascadeOperations (1,000).
	// Beyond it the commit is refused with sync.reference_violation,
	// reason cascade_limit, and nothing of it is applied.
	MaxCascadeOperations int
	// Limits bound subscriptions and scope values per request and the bytes
	// one reply builds (see partition.Limits for defaults and answers).
	// Identifiers are always limited to partition.MaxIdentifierBytes.
	Limits partition.Limits
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
	// Checkpoints are the backfill checkpoints this process declares (RFC
	// 0007): New installs them when it raises the stored schema version, and
	// the serve gate lets this process serve while they are pending; every
	// other pending checkpoint at the running version closes the gate.
	Checkpoints []storage.CheckpointDeclaration
	// Mergers maps a crdtType to the merge of its crdt columns (SPEC
	// §5.10; see partition.Merger for the contract and the push rules).
	// Every crdtType the schema names must have one: New refuses a schema
	// whose crdt column names a crdtType without a merger (§5.10.1), with
	// an error naming the table, column and crdtType. The yjs-doc merger is
	// protocol/yjs.Merger.
	Mergers map[string]partition.Merger
	// Host write hooks (hooks.go; SPEC §6.7-6.9), run by the partition's
	// actor inside the push transaction. Validators holds one row validator
	// per table name (a name not in Schema fails New); CommitValidator
	// checks each whole commit after staging.
	Validators      map[string]RowValidator
	CommitValidator CommitValidator
	// IdempotencyFault is a test-only fault injector, nil in production
	// (where it costs one nil check per commit). When set it is called at
	// each authoritative idempotency read of a pushed commit or a command
	// (inside the push transaction, after the read); true makes that read
	// answer an unreadable record: the commit is answered rejected with
	// the retryable sync.idempotency_cache_miss and nothing is persisted
	// for it. The store and its transactions are the production ones
	// either way. It must not block: it runs on the partition's actor.
	IdempotencyFault func() bool

	// Commit notifications, from this process and from others sharing the
	// store.

	// Feed, when set, reports commits made by other processes sharing the
	// store (PostgreSQL LISTEN/NOTIFY); *postgres.Store implements it. The
	// engine subscribes in New and stops in Close.
	Feed CommitFeed
	// Extensions are components New wires in itself, so the order cannot
	// be wrong: each one's Configure runs first, before New reads anything
	// else of the Config (it installs its hooks, chaining those already
	// set), and its Start runs once the engine is built, before New
	// returns. A realtime.Hub is one: list it here instead of calling its
	// Hooks before New and its Start after.
	Extensions []Extension

	// OnCommit, when set, is called after commits become durable: for this
	// process's pushes (after their transaction commits) and for commits
	// reported by Feed. maxSeq is the partition's highest commit seq. It
	// must not block; realtime fan-out hooks in here. A panic in it is
	// logged and swallowed (the commits have happened).
	OnCommit func(partition string, maxSeq int64)
	// OnCommitKeys, when set, is called for this process's commits (never
	// for Feed's) right before their transaction commits, with the scope
	// keys each touches (see CommitKeys), so realtime wakes only
	// the sockets registered on them; OnCommitOutcome follows with whether
	// they became durable (before OnCommit reports them; false when rolled
	// back or the outcome is unknown). They must not block; a panic in
	// them is logged and swallowed.
	OnCommitKeys    func(partition string, commits []CommitKeys)
	OnCommitOutcome func(partition string, durable bool)
	// OnRegistration, when set, is called from the partition's actor after
	// each served round of a client is recorded: its wire version and, for
	// rounds carrying a pull, its new registered subscriptions (see
	// Registration). It must not block; realtime sockets follow
	// their client's registrations through it. A panic in it is logged
	// and swallowed.
	OnRegistration func(partition string, r Registration)

	// Server events (emit.go). Events, when set, receives the engine's
	// events: rejected commits, gate refusals, failed and slow requests,
	// actor restarts and passivations, operator actions. Emitting never
	// blocks a request (see package events).
	Events *events.Ring
	// SlowRequest is the Sync duration from which a request is reported
	// as a slow request event (0: DefaultSlowRequest; negative: never).
	SlowRequest time.Duration
	// AuthFailureSampling thins refused authentications in the event ring
	// (authfail.go): at most one auth.failed event per remote address per
	// Interval (default events.DefaultSampleInterval, 10s), each saying how
	// many were held back, over at most Sources tracked addresses (default
	// events.DefaultSampleSources, 64; the rest share one "other" bucket).
	// Now defaults to Config.Now. Every failure is still counted in
	// AuthFailureCounts.
	AuthFailureSampling events.SamplerOptions

	// SignedURLs, when set, signs segment URLs for clients accepting them
	// (accept bit 3) and blob URLs; PublicURL returns the base they are
	// issued under (the scheme, host and mount, e.g.
	// "https://sync.example.com/api"). Both are needed to issue segment
	// URLs.
	SignedURLs *segstore.Signer
	PublicURL  func() string

	// The feature services, one group each (their packages document the
	// options; New starts the services and Close stops them).

	// Segments configures the segments bootstraps hand out by reference:
	// their store, TTL, inline limit, memory budgets and the SQLite image
	// builder (see segments.Options; the zero value keeps them in memory
	// and serves no images). The engine closes the store in Close.
	Segments segments.Options
	// Blobs configures blob storage (SPEC §5.9; see blobs.Options): the
	// byte store, the size cap, the orphan age and where the
	// presigned-URL switch starts. Without Blobs.Store the blob routes are
	// not served (pushes still check blob_ref references: none can be
	// present).
	Blobs blobs.Options
	// Retention configures pruning and the maintenance loop (see
	// retention.Options); the zero value runs no loop.
	Retention retention.Options
	// Reactions configures durable reactions (see reactions.Options): the
	// handlers hooks may schedule reactions for, and the delivery worker
	// New starts and Close stops (none without handlers).
	Reactions reactions.Options
	// Leases configures auth leases (SPEC §7.3; see lease.Options):
	// Leases.TTL > 0 turns them on, Leases.Key signs the records.
	Leases lease.Options
	// Cluster, when set, runs this engine as one member of a cluster (see
	// ClusterConfig): partitions are placed on the live members, requests
	// for partitions owned elsewhere are forwarded, and every write is
	// fenced with the partition's ownership generation. It needs the
	// Backend's Ownership role (PostgreSQL) and excludes Feed: the owner
	// of a partition makes all of its commits, so its hooks see them all
	// (the realtime relay carries them to the other members). nil:
	// single-process mode, unchanged.
	Cluster *ClusterConfig

	// Operations configures remote operations (REMOTE.md revision 1; see
	// operations.Options): the registry of queries and commands served
	// (nil: every operation is operation.unknown; it must be built for
	// Schema) and the query timeout.
	Operations operations.Options

	// Tracing, when set, receives OpenTelemetry spans (tracing.go): one
	// per sync request with its steps on the partition's actor, storage
	// commits, segment builds, forwarded member calls and reaction
	// deliveries. nil (or a no-op provider) turns tracing off: no span is
	// allocated. The engine links only the OpenTelemetry API; the SDK and
	// the exporter are the embedder's.
	Tracing trace.TracerProvider
}

// CommitFeed reports commits made to a shared store by any process.
// Subscribe blocks, calling fn for every notification, until ctx ends or
// the feed fails. Once it listens, and after every reconnect, it reports
// every partition's max seq, so a commit made before a (re)subscription —
// at start-up, or while the engine waited to subscribe again after a
// failure — is not missed.
type CommitFeed interface {
	Subscribe(ctx context.Context, fn func(partition string, maxSeq int64)) error
}

// Engine serves SSP2 requests: New builds it from a Config, a transport
// hands it authenticated requests (Sync, SyncEncoded) and streams the
// Reply; the feature services are reached through its accessors
// (Segments, Blobs, Retention, Reactions, Leases, Operations, Backfill).
// It is safe for concurrent use; Close stops its loops and partition
// actors, after which it serves nothing.
type Engine struct {
	cfg     Config
	pcfg    *partition.Config
	runtime *actors.Runtime[partition.Job]
	metrics *Metrics
	// authFail counts and samples refused authentications (authfail.go).
	authFail *authFailures
	// resolver asks Config.Resolver, surviving its panics.
	resolver *access.Resolver

	closeOnce sync.Once
	stopFeed  context.CancelFunc
	feedDone  chan struct{}

	// The feature services, started in New and stopped in Close
	// (services.go gives access to them).
	segments   *segments.Service
	blobs      *blobs.Service
	leases     *lease.Service
	reactions  *reactions.Service
	operations *operations.Service
	retention  *retention.Service
	backfill   *backfill.Service

	// cluster is cluster mode's state (clustering.go); nil in
	// single-process mode.
	cluster *clusterState
}

// Reply is the answer Sync and SyncEncoded build: the response's frames
// in grammar order (Frames; a bootstrap section's first page only), the
// push outcome counts (Applied, Cached, Rejected) and Header for the
// response header (its LogEpoch, ...). A transport writes it once with
// WriteTo, which streams further bootstrap pages as it goes and checks the
// serve gate before they leave; a Reply that is not written must be
// closed (Close: a reply forwarded from another cluster member holds that
// member's response body open until then). It is re-exported from
// package partition, whose actor builds it.
type Reply = partition.Reply

// New validates cfg, ensures the storage schema and starts the partition
// actor runtime.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	for _, x := range cfg.Extensions {
		x.Configure(&cfg)
	}
	if cfg.Schema == nil || cfg.Resolver == nil {
		return nil, errors.New("engine: Schema, Backend and Resolver are required")
	}
	if err := checkRoles(cfg); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if err := partition.CheckMergers(cfg.Schema, cfg.Mergers); err != nil {
		return nil, fmt.Errorf("engine: %w (Config.Mergers, SPEC §5.10.1)", err)
	}
	if cfg.Operations.Registry != nil && cfg.Operations.Registry.Schema() != cfg.Schema {
		return nil, errors.New("engine: Operations was registered for another schema than Schema")
	}
	wv, err := checkWireVersions(cfg.WireVersions)
	if err != nil {
		return nil, err
	}
	cfg.WireVersions = wv
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
	resolver := access.NewResolver(cfg.Resolver, cfg.Schema, cfg.Logger)
	bl, err := blobs.New(cfg.Backend.Blobs, cfg.Blobs, blobs.Deps{Schema: cfg.Schema, Resolver: resolver,
		SignedURLs: cfg.SignedURLs, PublicURL: cfg.PublicURL, Now: cfg.Now, Logger: cfg.Logger, Events: cfg.Events})
	if err != nil {
		return nil, err
	}
	if err := cfg.Backend.Lifecycle.EnsureSchema(ctx, cfg.Schema, cfg.Checkpoints...); err != nil {
		if !errors.Is(err, storage.ErrCheckpointIncomplete) {
			return nil, fmt.Errorf("engine: ensure storage schema: %w", err)
		}
		// Serve anyway: the gate refuses every request with
		// sync.schema_not_ready until the checkpoint is activated.
		cfg.Logger.Warn("a backfill checkpoint at the running schema version is pending and not declared by this process; requests are refused until it is activated", zap.Error(err))
	}
	e := &Engine{cfg: cfg, metrics: newMetrics(), resolver: resolver, blobs: bl}
	e.authFail = newAuthFailures(cfg.AuthFailureSampling, cfg.Now)
	pc := partition.NewConfig(cfg.Schema, cfg.Backend, partition.Gate{Running: cfg.Schema.Version, Declared: cfg.Checkpoints})
	pc.Logger, pc.Now = cfg.Logger, cfg.Now
	pc.MaxOperations, pc.MinSchemaVersion, pc.ClientFlushInterval = cfg.MaxOperations, cfg.MinSchemaVersion, cfg.ClientFlushInterval
	if cfg.MaxCascadeOperations > 0 {
		pc.MaxCascadeOperations = cfg.MaxCascadeOperations
	}
	pc.OnCommit, pc.OnCommitKeys, pc.OnCommitOutcome, pc.OnRegistration = cfg.OnCommit, cfg.OnCommitKeys, cfg.OnCommitOutcome, cfg.OnRegistration
	pc.Mergers = cfg.Mergers
	pc.IdempotencyFault = cfg.IdempotencyFault
	pc.Limits = cfg.Limits.WithDefaults()
	pc.Tracer = e.tracer()
	pc.Counters = &e.metrics.partitions
	if err := configureHooks(cfg, pc); err != nil {
		return nil, err
	}
	if e.leases, err = lease.NewService(cfg.Backend.Leases, cfg.Leases, cfg.Now, cfg.Logger); err != nil {
		return nil, err
	}
	e.leases.Configure(pc)
	if e.reactions, err = reactions.New(cfg.Backend.Reactions, cfg.Reactions, cfg.Logger); err != nil {
		return nil, err
	}
	e.reactions.Trace(pc.Tracer)
	e.reactions.Configure(pc)
	e.segments = segments.New(cfg.Segments, segments.Deps{Schema: cfg.Schema, Limits: pc.Limits, Resolver: e.resolver,
		Epochs: cfg.Backend.Log, SignedURLs: cfg.SignedURLs, PublicURL: cfg.PublicURL, Now: cfg.Now, Logger: cfg.Logger})
	e.segments.Configure(pc)
	e.segments.Start()
	if cfg.Cluster != nil {
		if cfg.Backend.Ownership == nil {
			return nil, errors.New("engine: Cluster needs a backend with the Ownership role (PostgreSQL): the members fence their writes in the shared store")
		}
		if cfg.Feed != nil {
			return nil, errors.New("engine: Cluster and Feed are exclusive: in cluster mode a partition's owner makes all its commits")
		}
		if e.cluster, err = newClusterState(e, *cfg.Cluster); err != nil {
			return nil, err
		}
		pc.Claim = e.claimer(cfg.Backend.Ownership, cfg.Cluster.Self)
	}
	e.pcfg = pc
	maxBatch := cfg.MaxBatch
	if cfg.DisableGroupCommit {
		maxBatch = 1
	}
	pc.Submit = func(name string, job partition.Job) { e.runtime.Submit(name, job) }
	e.runtime = actors.New(func(name string) actors.Worker[partition.Job] { return partition.New(name, pc) }, actors.Options{
		IdleTimeout:  cfg.IdleTimeout,
		JobTimeout:   cfg.StorageTimeout,
		MaxBatch:     maxBatch,
		Logger:       cfg.Logger,
		TickInterval: cfg.ClientFlushInterval,
		OnLifecycle:  e.lifecycleHook(),
	})
	var services interface {
		Submit(string, partition.Job)
	} = e.runtime
	if e.cluster != nil {
		services = ownedSubmitter{e}
	}
	e.operations = operations.NewService(cfg.Backend.Clients, cfg.Backend.Queries, cfg.Operations,
		operations.Deps{Actors: services, Resolver: e.resolver, Gate: pc.Gate, Logger: cfg.Logger})
	e.backfill = backfill.New(cfg.Backend.Log, cfg.Backend.Rows, cfg.Backend.Checkpoints,
		backfill.Deps{Schema: cfg.Schema, Actors: services, Now: cfg.Now, Logger: cfg.Logger})
	var owns func(string) bool
	if e.cluster != nil {
		owns = e.Owns
	}
	e.retention = retention.New(cfg.Backend.Retention, cfg.Backend.Snapshots, cfg.Retention,
		retention.Deps{Actors: services, Segments: e.segments, Blobs: e.blobs, Owns: owns, Now: cfg.Now, Logger: cfg.Logger})
	if cfg.Feed != nil {
		fctx, cancel := context.WithCancel(context.Background())
		e.stopFeed, e.feedDone = cancel, make(chan struct{})
		go e.runFeed(fctx)
	}
	if e.cluster != nil {
		e.cluster.start()
	}
	e.reactions.Start()
	e.retention.Start()
	for _, x := range cfg.Extensions {
		x.Start(e)
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

// observeRemoteCommit counts a commit another process made and calls
// OnCommit. Partition actors need no notice: each pull reads the
// partition's max seq, and their log tail never covers a window that ends
// past their own last commit.
func (e *Engine) observeRemoteCommit(partition string, maxSeq int64) {
	e.metrics.remoteCommits.Add(1)
	if e.cfg.OnCommit != nil {
		defer func() { // a host bug must not take down the feed's goroutine (and the process)
			if r := recover(); r != nil {
				e.cfg.Logger.Error("host callback panicked", zap.String("callback", "OnCommit"), zap.String("partition", partition),
					zap.Any("panic", r), zap.Stack("stack"))
			}
		}()
		e.cfg.OnCommit(partition, maxSeq)
	}
}

// Schema returns the served schema.
func (e *Engine) Schema() *schema.Schema { return e.cfg.Schema }

// Backend returns the storage backend's roles (Config.Backend).
func (e *Engine) Backend() storage.Backend { return e.cfg.Backend }

// ActorStats reports the partition actor runtime's counters.
func (e *Engine) ActorStats() actors.Stats { return e.runtime.Stats() }

// Close stops the maintenance loop (a pass in progress ends after its
// current batch), then every partition actor after the jobs already routed
// to it, and writes back buffered client records. It does not close the
// Store.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.reactions.Close()
		e.retention.Close()
		if e.stopFeed != nil {
			e.stopFeed()
			<-e.feedDone
		}
		if e.cluster != nil {
			e.cluster.close()
		}
		e.runtime.Stop()
		e.segments.Close()
	})
	return nil
}

// Sync serves one decoded request for an authenticated caller. On success
// the Reply holds the response (bounded by the pull limits), ready to
// stream with WriteTo, which builds a bootstrap section's pages after its
// first on the partition's actor as it writes (a gate change meanwhile ends
// the stream with an ERROR frame). On error nothing has been produced and
// the error carries the protocol code for the transport's pre-stream error
// form.
func (e *Engine) Sync(ctx context.Context, id Identity, msg *ssp2.Message) (*Reply, error) {
	start := e.cfg.Now()
	rep, forwarded, err := e.sync(ctx, id, msg)
	if forwarded {
		return rep, err // the owner counted and reported it
	}
	e.observeSync(id, rep, err, e.cfg.Now().Sub(start))
	return rep, err
}

// SyncEncoded serves one encoded SSP2 request (body, as the client sent
// it, decompressed): as decoding it and calling Sync, except that in
// cluster mode a request for a partition another member owns is forwarded
// as it came, without being decoded here (the owner decodes and checks
// it; authentication was this member's). msg is the decoded request when
// this member decoded it, nil when it was forwarded undecoded. body must
// stay unchanged until the call returns.
func (e *Engine) SyncEncoded(ctx context.Context, id Identity, body []byte) (rep *Reply, msg *ssp2.Message, err error) {
	if err := e.CheckWireVersion(body); err != nil {
		return nil, nil, err
	}
	if e.cluster == nil {
		if msg, err = ssp2.DecodeRequest(body); err != nil {
			return nil, nil, err
		}
		rep, err = e.Sync(ctx, id, msg)
		return rep, msg, err
	}
	start := e.cfg.Now()
	if id.Partition == "" || id.ActorID == "" {
		return nil, nil, syncerr.New(syncerr.AuthRequired, "request has no authenticated actor or partition")
	}
	if verr := partition.ValidateIdentity(id.ActorID, id.Partition); verr != nil {
		return nil, nil, verr
	}
	rep, forwarded, err := routeCall(ctx, e.cluster, callSync, id.Partition, func() (*Reply, error) {
		if msg == nil {
			var derr error
			if msg, derr = ssp2.DecodeRequest(body); derr != nil {
				return nil, derr
			}
		}
		req, verr := e.validate(id, msg)
		if verr != nil {
			return nil, verr
		}
		return e.syncLocal(ctx, id, req)
	}, func(ctx context.Context, owner string) (*Reply, error) {
		return e.forward(ctx, owner, id, body)
	})
	if !forwarded {
		e.observeSync(id, rep, err, e.cfg.Now().Sub(start))
	}
	return rep, msg, err
}

// SyncOwned serves a request another cluster member forwarded here (see
// ClusterConfig): as Sync, but only while this member owns id's partition
// (an error wrapping ErrNotOwner otherwise, also when the partition's
// ownership moved during the request), and never forwarded again. In
// single-process mode it is Sync.
func (e *Engine) SyncOwned(ctx context.Context, id Identity, msg *ssp2.Message) (*Reply, error) {
	if e.cluster == nil {
		return e.Sync(ctx, id, msg)
	}
	start := e.cfg.Now()
	req, err := e.validate(id, msg)
	var rep *Reply
	if err == nil {
		rep, err = ownedCall(e.cluster, callSync, id.Partition, func() (*Reply, error) { return e.syncLocal(ctx, id, req) })
	}
	if errors.Is(err, ErrNotOwner) {
		return nil, err // the forwarding member retries it elsewhere
	}
	e.observeSync(id, rep, err, e.cfg.Now().Sub(start))
	return rep, err
}

// observeSync counts a served request and reports its events.
func (e *Engine) observeSync(id Identity, rep *Reply, err error, d time.Duration) {
	e.metrics.observe(rep, err, d)
	if err == nil {
		e.blobs.ObserveReply(rep)
	}
	e.emitSync(id, rep, err, d)
}

// sync validates the request and runs it where its partition is owned;
// forwarded reports that another member answered it.
func (e *Engine) sync(ctx context.Context, id Identity, msg *ssp2.Message) (rep *Reply, forwarded bool, err error) {
	req, err := e.validate(id, msg)
	if err != nil {
		return nil, false, err
	}
	if e.cluster == nil {
		rep, err = e.syncLocal(ctx, id, req)
		return rep, false, err
	}
	var body []byte
	rep, forwarded, err = routeCall(ctx, e.cluster, callSync, id.Partition, func() (*Reply, error) {
		return e.syncLocal(ctx, id, req)
	}, func(ctx context.Context, owner string) (*Reply, error) {
		if body == nil {
			var eerr error
			if body, eerr = ssp2.Encode(msg); eerr != nil {
				return nil, syncerr.Wrap(syncerr.InternalError, eerr, "the request could not be encoded for its partition's owner")
			}
		}
		return e.forward(ctx, owner, id, body)
	})
	return rep, forwarded, err
}

// forward sends an encoded request to its partition's owner and returns
// the owner's answer as a forwarded reply, streaming on the member call's
// context.
func (e *Engine) forward(ctx context.Context, owner string, id Identity, body []byte) (*Reply, error) {
	ctx, span := e.forwardSpan(ctx, owner, id)
	rc, err := e.cluster.cfg.Peers.Sync(ctx, owner, id, body)
	endForwardSpan(span, err)
	if err != nil {
		return nil, err
	}
	size := answerSize(rc)
	if rc, err = answerStarted(rc, owner); err != nil {
		return nil, err
	}
	// The answer streams on the call's context: it must not end before
	// the body is read.
	return forwardedReply(&heldBody{ReadCloser: rc, release: holdMemberCall(ctx)}, size), nil
}

// validate checks the identity and decodes and checks the request.
func (e *Engine) validate(id Identity, msg *ssp2.Message) (*ssp2.Request, error) {
	if id.Partition == "" || id.ActorID == "" {
		return nil, syncerr.New(syncerr.AuthRequired, "request has no authenticated actor or partition")
	}
	if msg == nil || msg.Kind != ssp2.KindRequest {
		return nil, syncerr.New(syncerr.InvalidRequest, "not an SSP2 request")
	}
	if err := e.checkWire(msg.WireVersion); err != nil {
		return nil, err
	}
	if verr := partition.ValidateIdentity(id.ActorID, id.Partition); verr != nil {
		return nil, verr
	}
	req, err := msg.Request()
	if err != nil {
		return nil, err
	}
	if verr := partition.ValidateRequest(req, e.pcfg.Limits); verr != nil {
		return nil, verr
	}
	return req, nil
}

// syncLocal resolves the caller's scopes and runs the request on its
// partition's actor in this process.
func (e *Engine) syncLocal(ctx context.Context, id Identity, req *ssp2.Request) (*Reply, error) {
	var allowed partition.Allowed
	resolved, outage := false, false
	// With leases on every round resolves (each successful one slides the
	// lease); otherwise only rounds that push or pull need scopes.
	if len(req.Commits) > 0 || len(req.Subscriptions) > 0 || e.leases.Enabled() {
		grants, rerr := e.resolver.ResolveScopes(ctx, id)
		switch {
		case errors.Is(rerr, ErrResolverOutage):
			outage = true
			e.cfg.Logger.Info("scope resolver outage: the round is authorized by the client's lease", zap.String("actor", id.ActorID),
				zap.String("partition", id.Partition), zap.Error(rerr))
		case rerr != nil:
			e.cfg.Logger.Warn("scope resolver failed", zap.String("actor", id.ActorID),
				zap.String("partition", id.Partition), zap.Error(rerr))
		default:
			allowed, resolved = partition.Allowed(grants), true
		}
	}
	job := partition.NewSyncJob(ctx, id.ActorID, req, allowed, resolved)
	if outage {
		job.WithOutage()
	}
	e.runtime.Submit(id.Partition, job)
	return job.Wait(ctx)
}
