// Package partition is one partition of a synclane server: the state its
// actor owns and everything the actor does with it, next to the pure rules
// (scopes, conflicts, epochs, pull modes, the serve gate) those steps apply.
//
// A Partition is owned by exactly one actor (package actors runs it): every
// push, pull, bootstrap and backfill batch of the partition is a Job handed
// to Partition.Handle on the actor's goroutine, so the partition has one
// writer and its state needs no locks. The state is
//
//   - the serve-gate token it last verified (stored schema version and the
//     partition's log epoch): per-epoch state is dropped when it changes;
//   - the client records it has seen (clientId → actor binding, registered
//     subscriptions, cursor watermark) and those waiting to be written back;
//   - the in-memory tail of the log it committed itself, which answers
//     incremental pulls without a storage scan (never below the horizon).
//
// The actor reads storage, builds the reply, re-reads the gate and only
// then releases the reply (read, verify, refuse): a reply built under a
// token that changed meanwhile is refused with sync.schema_not_ready.
package partition

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/segstore"
)

// Config is what every partition of one server shares. It is read-only
// once the first Partition exists; build it with NewConfig.
type Config struct {
	// Schema is the served schema; Codecs holds one row codec per table.
	Schema *schema.Schema
	Codecs map[string]*ssp2.RowCodec
	// Backend is the storage backend: a partition uses its Log, Rows,
	// Clients and Checkpoints roles (required), Retention for prune jobs
	// and Snapshots for restore jobs (a job answers an error without
	// them), and the fast paths RowEncoder and ImageCopier when set.
	Backend storage.Backend
	// Gate applies the serve-gate rules for this process.
	Gate Gate
	// Logger receives the partition's logs (never nil).
	Logger *zap.Logger
	// Now is the clock every timestamp reads.
	Now func() time.Time
	// MaxOperations caps push operations per request.
	MaxOperations int
	// MaxCascadeOperations caps the operations a commit's declared
	// references may append (SPEC §6.11; NewConfig:
	// DefaultMaxCascadeOperations); beyond it the commit is refused with
	// sync.reference_violation, reason cascade_limit.
	MaxCascadeOperations int
	// hasReferences is set when a table of Schema declares a reference:
	// without any, a commit pays nothing for the reference rules.
	hasReferences bool
	// Limits bound requests and replies (defaults applied by NewConfig).
	Limits Limits
	// MinSchemaVersion is the oldest client schema version served.
	MinSchemaVersion int32
	// ClientFlushInterval is how long a dirty client record may wait in
	// memory before it is written back.
	ClientFlushInterval time.Duration
	// Segments is the segment cache bootstraps store rows segments in and
	// reference with SEGMENT_REF; nil serves every bootstrap inline.
	Segments *segstore.Cache
	// Images builds the SQLite images of tables over one page for clients
	// accepting them; nil serves no images (such a client gets rows
	// segments, inline or by ref, as a client not accepting images does).
	// Images are served only with Segments set.
	Images ImageBuilder
	// InlineSegmentMaxBytes is the largest first page a client accepting
	// both lanes gets inline (default 256 KiB); larger tables go by ref.
	InlineSegmentMaxBytes int
	// SignURL, when set, signs a segment URL for clients accepting signed
	// URLs (bit 3): the URL and its expiry in Unix ms.
	SignURL func(partition string, m segstore.Meta) (url string, expiresAtMs int64)
	// Submit hands a job to the partition's actor; when set, bootstrap
	// sections after their first page are streamed as the reply is written
	// (one page in memory at a time, each verified against the gate).
	Submit func(partition string, job Job)
	// OnCommit, when set, is called after commits become durable with the
	// partition's highest commit seq; it must not block.
	OnCommit func(partition string, maxSeq int64)
	// OnCommitKeys, when set, is called right before the transaction
	// holding commits this actor made commits, with the scope keys each
	// touches (see CommitKeys), in seq order; OnCommitOutcome then follows
	// once its outcome is known: durable reports that they are (before
	// OnCommit reports them), false that they were rolled back or that
	// the outcome is unknown. Neither may block; the slice is the callee's.
	OnCommitKeys    func(partition string, commits []CommitKeys)
	OnCommitOutcome func(partition string, durable bool)
	// OnRegistration, when set, is called after each served round of a
	// client is recorded (see Registration); it must not block.
	OnRegistration func(partition string, r Registration)
	// Counters, when set, counts what the partitions sharing it do (the
	// engine's metrics read it).
	Counters *Counters

	// Hooks are the host's write hooks (hooks.go), run inside the push
	// transaction; the zero value has none.
	Hooks Hooks
	// TxQuery runs registered queries inside the push transaction for
	// the hooks (CommitView.Query, RowWrite.Query) and commands
	// (txquery.go); the engine sets it. nil: none is registered (every
	// such query is operation.unknown).
	TxQuery TxQueryFunc

	// Leases, when set, slides auth leases and authorizes outage rounds
	// (lease.go); nil: leases are off, no LEASE frame is ever sent.
	Leases LeaseKeeper

	// Mergers maps a crdt column's crdtType to its Merger (see crdt.go);
	// a push writing a crdt column without one is refused with
	// sync.crdt_merge_failed (engine.New refuses such a schema before
	// serving, see CheckMergers).
	Mergers map[string]Merger

	// Claim, when set (cluster mode), takes the partition's ownership
	// generation for this member (storage.Ownership.ClaimPartition): a
	// Partition claims once, before its first job, and runs every job,
	// tick and stop with the generation in its context
	// (storage.WithFence), so the store refuses its writes with
	// storage.ErrOwnershipLost once another member has claimed the
	// partition. Jobs that arrive while no claim has succeeded are failed
	// as unavailable (retryable). nil: single-process mode, no fencing.
	Claim func(ctx context.Context, partition string) (generation int64, err error)

	// IdempotencyFault, when set, is a test-only fault injector (see
	// lookupIdempotency): nil in production.
	IdempotencyFault func() bool

	// Tracer, when set, traces the steps of every job whose request
	// context carries a recording span (trace.go); nil: tracing is off
	// and costs nothing.
	Tracer trace.Tracer
	// OnReactionOrigin, when set (reaction tracing), is told, once a
	// traced request's commit that scheduled reactions is durable, the
	// commit's seq and the request's span context (engine/reactions links
	// the deliveries to it). It must not block.
	OnReactionOrigin func(partition string, commitSeq int64, sc trace.SpanContext)

	// encoder encodes bootstrap pages: Backend.RowEncoder, or
	// storage.VisitEncoder on Backend.Rows without one (chosen by
	// NewConfig).
	encoder storage.RowEncoder
	// buildImage builds a SQLite image: with Backend.ImageCopier, or from
	// Rows.ScanRows pages without one (chosen by NewConfig).
	buildImage func(p *Partition, ctx context.Context, src tablePages, tok BootstrapToken) ([]byte, int64, error)
}

// NewConfig returns a Config for s and b with the row codecs built, the
// bootstrap encoding path chosen from b's roles, and the defaults the
// engine documents (no-op logger, wall clock). b must have the required
// roles (storage.Backend.CheckRequired).
func NewConfig(s *schema.Schema, b storage.Backend, gate Gate) *Config {
	c := &Config{Schema: s, Backend: b, Gate: gate, Codecs: make(map[string]*ssp2.RowCodec, len(s.Tables)),
		Logger: zap.NewNop(), Now: time.Now, MaxOperations: 500, MinSchemaVersion: s.Version, ClientFlushInterval: time.Second, Limits: Limits{}.WithDefaults(),
		InlineSegmentMaxBytes: DefaultInlineSegmentMaxBytes}
	c.MaxCascadeOperations = DefaultMaxCascadeOperations
	for _, t := range s.Tables {
		c.Codecs[t.Name] = ssp2.NewRowCodec(t.Columns)
		c.hasReferences = c.hasReferences || len(t.References) > 0
	}
	c.encoder = b.RowEncoder
	if c.encoder == nil {
		c.encoder = storage.VisitEncoder{Rows: b.Rows}
	}
	c.buildImage = (*Partition).copyImage
	if b.ImageCopier == nil {
		c.buildImage = (*Partition).scanImage
	}
	return c
}

// DefaultInlineSegmentMaxBytes is the default Config.InlineSegmentMaxBytes.
const DefaultInlineSegmentMaxBytes = 256 << 10

// Partition is one partition's state, owned by its actor. Its methods run
// on the actor's goroutine only.
type Partition struct {
	name string
	cfg  *Config
	// fence is the ownership generation claimed in cluster mode (0: none
	// yet; see Config.Claim). A Partition whose writes were refused with
	// storage.ErrOwnershipLost is evicted by the engine, never re-claimed.
	fence int64

	// token is the serve-gate token last read (and verified): the stored
	// schema version and the partition's log epoch. A new epoch voids the
	// client bindings and the log tail.
	token GateToken
	// open is the token of the last gate read that found the gate open
	// after every reply built before it (a verify), valid when openOK: the
	// next pull builds under it instead of opening the gate again (see
	// pull).
	open   GateToken
	openOK bool
	// clients caches client records (bindings, subscriptions, cursors).
	clients clientCache
	// tail is the newest stretch of the log this actor committed itself;
	// staged holds the commits of the open push transaction until it commits.
	tail   logTail
	staged []storage.CommitRecord
	// pins remembers recent scope pins (scopePin), brought forward from the
	// tail instead of asking storage again.
	pins pinMemo
	// origins are the staged commits that scheduled reactions for traced
	// requests (see Config.OnReactionOrigin).
	origins []reactionOrigin
	// loaded reports that the registry entry was read since Start (load).
	loaded bool
	// group holds the reads a group of pulls shares while it is served
	// (pullGroup), nil otherwise.
	group *groupReads
}

// Counters are counts of the partitions' work that sharing one request
// among several saves; safe for concurrent use.
type Counters struct {
	// BindingWrites counts durable writes of client bindings
	// (Clients.BindClients calls); Bindings the clientIds they bound.
	// Bindings ÷ BindingWrites is how many fresh clients shared a write.
	BindingWrites, Bindings atomic.Uint64
	// PullGroups counts groups of bootstrap pulls served under one gate
	// verify; GroupedPulls the pulls they served.
	PullGroups, GroupedPulls atomic.Uint64
}

// New returns the state of partition name; its first job loads it.
func New(name string, cfg *Config) *Partition {
	return &Partition{name: name, cfg: cfg}
}

// Name returns the partition's name.
func (p *Partition) Name() string { return p.name }

// log returns the partition's logger (built on use: idle actors keep none).
func (p *Partition) log() *zap.Logger { return p.cfg.Logger.With(zap.String("partition", p.name)) }

// Start resets the partition's in-memory state; it runs when the actor
// starts and after every restart. It reads nothing: the registry entry
// (and the cluster-mode ownership claim) is loaded by the first job, in
// that job's context (load), so a start never waits on the database
// longer than the request that caused it, and a start during a database
// outage leaves nothing half-loaded behind.
func (p *Partition) Start(ctx context.Context) error {
	p.clients.reset(p.cfg.Now())
	p.tail.reset()
	p.token = GateToken{}
	p.forgetOpen()
	p.loaded = false
	p.pins = pinMemo{}
	return nil
}

// load reads the partition's registry entry, registering the partition on
// first contact, and adopts its log epoch, unless an earlier job did: the
// epoch is then known before the first push reads its client bindings (a
// push whose transaction finds a new epoch must start over, see
// openPrepared). A failure is left to the job's own storage calls, which
// fail the same way; the next job tries again.
func (p *Partition) load(ctx context.Context) {
	if p.loaded {
		return
	}
	info, err := p.cfg.Backend.Log.TouchPartition(ctx, p.name, p.cfg.Now().UnixMilli())
	if err != nil {
		p.log().Debug("loading the partition failed; the next job tries again", zap.Error(err))
		return
	}
	p.loaded = true
	p.adoptEpoch(info.LogEpoch)
}

// Tick writes back client records that have waited longer than the flush
// interval, so a partition gone quiet does not hold them; the runtime
// calls it periodically.
func (p *Partition) Tick(ctx context.Context) {
	if ctx, ok := p.claimed(ctx); ok {
		p.maybeFlushClients(ctx)
	}
}

// Stop writes back buffered client records (handing them over when the
// fence refuses them, see flushClients); it runs when the actor stops. An
// actor with nothing buffered writes nothing, and never claims the
// partition just to stop.
func (p *Partition) Stop(ctx context.Context) {
	if p.clients.dirty == 0 {
		return
	}
	if ctx, ok := p.claimed(ctx); ok {
		p.flushClients(ctx)
	}
}

// claimed returns ctx carrying the generation this Partition already
// holds (ctx itself in single-process mode); ok is false in cluster mode
// when it holds none. Ticks and stops never claim: a Partition that holds
// no generation served no job, so it has nothing to write back, and a
// claim made while it stops (its partition moved away) would take the
// partition from its new owner.
func (p *Partition) claimed(ctx context.Context) (context.Context, bool) {
	if p.cfg.Claim == nil {
		return ctx, true
	}
	if p.fence == 0 {
		return ctx, false
	}
	return storage.WithFence(ctx, p.fence), true
}

// fenced returns ctx carrying the partition's ownership generation in
// cluster mode (claiming it first if this Partition has none yet), ctx
// itself in single-process mode; the error is the claim's.
func (p *Partition) fenced(ctx context.Context) (context.Context, error) {
	if p.cfg.Claim == nil {
		return ctx, nil
	}
	if p.fence == 0 {
		gen, err := p.cfg.Claim(ctx, p.name)
		if err != nil {
			p.log().Warn("claiming the partition's ownership failed", zap.Error(err))
			return ctx, err
		}
		p.fence = gen
	}
	return storage.WithFence(ctx, p.fence), nil
}

// Handle serves jobs: one job alone, or several pushes together in one
// storage transaction (group commit). Every job is answered. The storage
// work ends with ctx (the runtime's storage timeout) or, when every job's
// request has a deadline, at the latest of them (withinDeadlines): no
// wait on the database outlasts the requests it serves.
func (p *Partition) Handle(ctx context.Context, jobs []Job) {
	ctx, cancel := withinDeadlines(ctx, jobs)
	defer cancel()
	if len(jobs) == 1 && p.clients.dirty == 0 {
		if w, ok := jobs[0].(*WriteBackJob); ok {
			w.answer(0, nil) // nothing to write: no claim for it
			return
		}
	}
	ctx, cerr := p.fenced(ctx)
	if cerr != nil {
		err := syncerr.Unavailable("ownership_claim_failed", cerr, "this member could not take ownership of the partition; retry")
		for _, j := range jobs {
			j.Fail(err)
		}
		return
	}
	p.load(ctx)
	if len(jobs) == 1 {
		jobs[0].run(ctx, p)
	} else {
		// The batch's fresh clientIds are bound in one durable write
		// first (pushes and bootstrap pulls alike), then its bootstrap
		// pulls are served as one group, then its pushes.
		p.bindGroup(ctx, jobs)
		group := make([]*SyncJob, 0, len(jobs))
		var pulls []*SyncJob
		for _, j := range jobs {
			if s := j.push(); s != nil {
				group = append(group, s)
			} else if s, ok := j.(*SyncJob); ok {
				pulls = append(pulls, s)
			} else {
				j.run(ctx, p)
			}
		}
		p.pullGroup(ctx, pulls)
		p.push(ctx, group)
	}
	p.maybeFlushClients(ctx)
}

// withinDeadlines returns ctx ending at the latest deadline of the jobs'
// requests when that comes before ctx's own end; ctx itself (with a no-op
// cancel) when a job's request has no deadline.
func withinDeadlines(ctx context.Context, jobs []Job) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, j := range jobs {
		rc := j.requestContext()
		if rc == nil {
			return ctx, func() {}
		}
		d, ok := rc.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	if d, ok := ctx.Deadline(); len(jobs) == 0 || (ok && !latest.Before(d)) {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, latest)
}

// read returns the partition's registry entry, creating it on first
// contact, and adopts its log epoch.
func (p *Partition) read(ctx context.Context) (storage.PartitionInfo, error) {
	info, err := p.cfg.Backend.Log.ReadPartition(ctx, p.name)
	if err == nil && !info.Exists {
		info, err = p.cfg.Backend.Log.TouchPartition(ctx, p.name, p.cfg.Now().UnixMilli())
	}
	if err != nil {
		return info, err
	}
	p.adoptEpoch(info.LogEpoch)
	p.tail.dropThrough(info.HorizonSeq)
	return info, nil
}

// adopt records a gate token as read; a changed log epoch drops the
// per-epoch state.
func (p *Partition) adopt(t GateToken) {
	p.adoptEpoch(t.LogEpoch)
	p.token.StoredVersion = t.StoredVersion
}

// adoptEpoch drops per-epoch state when the log epoch changed (a rotation
// deletes client records, so cached bindings are void, and the log the
// tail mirrors is gone).
func (p *Partition) adoptEpoch(epoch string) {
	if epoch == p.token.LogEpoch {
		return
	}
	if p.token.LogEpoch != "" {
		p.log().Info("partition log epoch changed", zap.String("old_epoch", p.token.LogEpoch), zap.String("epoch", epoch))
	}
	p.token.LogEpoch = epoch
	p.forgetOpen()
	p.clients.reset(p.cfg.Now())
	p.tail.reset()
}

// announceKeys reports the scope keys of recs, whose transaction is about
// to commit, through OnCommitKeys; it reports whether it did, for
// settleKeys.
func (p *Partition) announceKeys(recs []storage.CommitRecord) bool {
	if p.cfg.OnCommitKeys == nil || len(recs) == 0 {
		return false
	}
	keys := commitKeys(p.cfg.Schema, recs)
	p.callHost("OnCommitKeys", func() { p.cfg.OnCommitKeys(p.name, keys) })
	return true
}

// settleKeys reports the outcome of the transaction whose commits
// announceKeys reported (announced).
func (p *Partition) settleKeys(announced, durable bool) {
	if announced && p.cfg.OnCommitOutcome != nil {
		p.callHost("OnCommitOutcome", func() { p.cfg.OnCommitOutcome(p.name, durable) })
	}
}

// commitDurable is called once commits up to maxSeq are durable.
func (p *Partition) commitDurable(maxSeq int64) {
	if p.cfg.OnCommit != nil {
		p.callHost("OnCommit", func() { p.cfg.OnCommit(p.name, maxSeq) })
	}
}

// callHost runs a host notification callback (OnCommit, OnRegistration).
// A panic in it is logged and swallowed: the commit or registration it
// reports has happened, and a host bug must not fail the request or take
// the partition actor down.
func (p *Partition) callHost(name string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			p.log().Error("host callback panicked", zap.String("callback", name), zap.Any("panic", r), zap.Stack("stack"))
		}
	}()
	fn()
}

// storageErr maps a storage failure to a protocol error: a writer-fence
// rejection (this process runs an older schema than the database requires)
// is sync.schema_not_ready; a coded error passes through; the partition's
// database unreachable while others serve (storage.ErrHomeUnavailable) is
// a temporary unavailability (sync.internal_error, retryable, HTTP 503
// with Retry-After), and so is a write refused because the partition is
// moving between databases (storage.ErrPartitionMoved); anything else is a retryable internal error.
func storageErr(err error) error {
	var coded *syncerr.Error
	if errors.As(err, &coded) {
		return err
	}
	if errors.Is(err, storage.ErrUnstorable) {
		return syncerr.Wrap(syncerr.InvalidRequest, err, "the request holds a value synclane cannot store")
	}
	if errors.Is(err, storage.ErrPartitionMoved) {
		// A move between databases is switching the partition: a pause.
		return syncerr.Unavailable("partition_moving", err, "the partition is moving between databases; retry")
	}
	if errors.Is(err, storage.ErrHomeUnavailable) {
		// One database of several is unreachable: the partitions of the
		// others serve, this one is temporarily unavailable (503).
		return syncerr.Unavailable("database_unavailable", err, "storage is unavailable; retry")
	}
	if errors.Is(err, storage.ErrOwnershipLost) {
		return syncerr.Unavailable("partition_moved", err, "the partition moved to another cluster member; retry")
	}
	if errors.Is(err, storage.ErrWriterFenced) {
		return syncerr.Wrap(syncerr.SchemaNotReady, err, "the database requires a newer schema version than this server runs; retry later").
			WithDetails(map[string]any{"writerFenced": true})
	}
	return syncerr.Wrap(syncerr.InternalError, err, "storage is unavailable; retry")
}
