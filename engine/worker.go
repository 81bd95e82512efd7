package engine

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/actors"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

// worker is one partition's state, owned by its actor: the partition's log
// epoch as last read, the clientId → actor bindings it has seen, and the
// client records waiting to be written back.
type worker struct {
	e         *Engine
	partition string

	epoch string
	// clients caches the partition's client records this actor has seen:
	// the clientId → actor binding and the record to write back (dirty).
	// Allocated on first use, so an idle actor costs little.
	clients   map[string]*clientEntry
	dirty     int
	lastFlush time.Time
	// knownSeq is the highest commit seq this worker knows of, from its own
	// commits, its reads and other processes' notifications.
	knownSeq int64
	// tail is the newest part of the log this actor committed itself;
	// staged holds the commits of the open push transaction.
	tail   logTail
	staged []storage.CommitRecord
	// token is the serve-gate token (stored schema version, log epoch) as
	// last read; replies are only released under an unchanged token.
	token partition.GateToken
}

func (e *Engine) newWorker(p string) actors.Worker {
	return &worker{e: e, partition: p}
}

// log returns the worker's logger (built on use: idle actors keep none).
func (w *worker) log() *zap.Logger { return w.e.cfg.Logger.With(zap.String("partition", w.partition)) }

// Start reloads the partition from storage (first start and every restart).
func (w *worker) Start(ctx context.Context) error {
	w.clients, w.dirty = nil, 0
	w.tail.reset()
	w.lastFlush = w.e.cfg.Now()
	info, err := w.e.cfg.Store.TouchPartition(ctx, w.partition, w.e.cfg.Now().UnixMilli())
	if err != nil {
		return err
	}
	w.epoch = info.LogEpoch
	return nil
}

// Stop writes back buffered client records.
func (w *worker) Stop(ctx context.Context) { w.flushClients(ctx) }

// Handle serves one pull-only job, or a batch of jobs with pushes applied
// in one storage transaction (group commit).
func (w *worker) Handle(ctx context.Context, jobs []actors.Job) {
	sjobs := make([]*syncJob, 0, len(jobs))
	for _, j := range jobs {
		if o, ok := j.(*observeJob); ok {
			w.knownSeq = max(w.knownSeq, o.seq)
			continue
		}
		if b, ok := j.(*backfillJob); ok {
			b.done <- w.handleBackfill(ctx, b)
			continue
		}
		sj := j.(*syncJob)
		if err := sj.ctx.Err(); err != nil {
			sj.answer(nil, syncerr.Wrap(syncerr.InternalError, err, "request abandoned"))
			continue
		}
		sjobs = append(sjobs, sj)
	}
	if len(sjobs) == 0 {
		return
	}
	if sjobs[0].Batchable() {
		w.handlePushes(ctx, sjobs)
	} else {
		w.handlePull(ctx, sjobs[0])
	}
	w.maybeFlushClients(ctx)
}

// load reads the partition registry entry, creating it on first contact.
func (w *worker) load(ctx context.Context) (storage.PartitionInfo, error) {
	info, err := w.e.cfg.Store.ReadPartition(ctx, w.partition)
	if err == nil && !info.Exists {
		info, err = w.e.cfg.Store.TouchPartition(ctx, w.partition, w.e.cfg.Now().UnixMilli())
	}
	if err != nil {
		return info, err
	}
	w.observeEpoch(info.LogEpoch)
	w.knownSeq = max(w.knownSeq, info.MaxCommitSeq)
	return info, nil
}

// observeEpoch drops per-epoch state when the log epoch changed (a rotation
// deletes client records, so cached bindings are void).
func (w *worker) observeEpoch(epoch string) {
	if epoch != w.epoch {
		if w.epoch != "" {
			w.log().Info("partition log epoch changed", zap.String("old_epoch", w.epoch), zap.String("epoch", epoch))
		}
		w.epoch = epoch
		w.clients, w.dirty = nil, 0
		w.tail.reset()
	}
}

func (w *worker) handlePull(ctx context.Context, j *syncJob) {
	token, refusal, err := w.entryGate(ctx)
	if err != nil || refusal != nil {
		j.answer(nil, gateErr(refusal, err))
		return
	}
	info, err := w.load(ctx)
	if err != nil {
		j.answer(nil, storageErr(err))
		return
	}
	if token.LogEpoch != "" && info.LogEpoch != token.LogEpoch {
		// Rotated between the two reads: the reply would not be built
		// under the token it is verified against.
		j.answer(nil, (&partition.Refusal{Kind: partition.RefuseEpoch}).Error())
		return
	}
	rep, stop, verr := w.precheck(ctx, j, info)
	if verr != nil {
		j.answer(nil, verr)
		return
	}
	if !stop {
		if err := w.servePulls(ctx, j, info, rep); err != nil {
			j.answer(nil, err)
			return
		}
	}
	// Verify before releasing a byte: the gate is still open and the reply
	// was built under an unchanged token.
	if refusal, err := w.verifyGate(ctx, token); err != nil || refusal != nil {
		j.answer(nil, gateErr(refusal, err))
		return
	}
	if !stop {
		w.recordClient(j, rep)
	}
	j.answer(rep, nil)
}

// entryGate reads the serve gate for a request and applies the refusal
// rules; it returns the token the reply is built under.
func (w *worker) entryGate(ctx context.Context) (partition.GateToken, *partition.Refusal, error) {
	g, err := w.e.cfg.Store.ReadServeGate(ctx, w.partition, w.e.cfg.Schema.Version)
	if err != nil {
		return partition.GateToken{}, nil, err
	}
	w.token = partition.TokenOf(g)
	return w.token, partition.GateRefusal(g, w.e.cfg.Schema.Version, w.e.cfg.Checkpoints), nil
}

// verifyGate re-reads the gate after a reply was built.
func (w *worker) verifyGate(ctx context.Context, before partition.GateToken) (*partition.Refusal, error) {
	g, err := w.e.cfg.Store.ReadServeGate(ctx, w.partition, w.e.cfg.Schema.Version)
	if err != nil {
		return nil, err
	}
	w.token = partition.TokenOf(g)
	return partition.VerifyGate(before, g, w.e.cfg.Schema.Version, w.e.cfg.Checkpoints), nil
}

// gateErr is the request error of a closed gate (or of failing to read it).
func gateErr(r *partition.Refusal, err error) error {
	if err != nil {
		return storageErr(err)
	}
	return r.Error()
}

// header builds the RESP_HEADER of a served (not reset) reply.
func (w *worker) header(wire uint16) *ssp2.RespHeader {
	latest := w.e.cfg.Schema.Version
	h := &ssp2.RespHeader{LatestSchemaVersion: &latest}
	if wire >= ssp2.WireV2 {
		h.LogEpoch = w.epoch
	}
	return h
}

// precheck runs the request-level checks in the reference order (after
// decode): wire/epoch requirement, epoch-less push, schema floor, epoch
// reset, clientId, op cap, accept bits, subscriptions, resolver keys. It
// returns either an error (request-level failure, nothing sent), a complete
// header-only reply with stop set, or the started reply to fill.
func (w *worker) precheck(ctx context.Context, j *syncJob, info storage.PartitionInfo) (*Reply, bool, error) {
	req := j.req
	wire := req.WireVersion
	h := req.Header
	verdict := partition.CheckEpoch(wire, h.LogEpoch, info.LogEpoch, info.EpochRequired)
	if verdict == partition.EpochWireUnsupported {
		return nil, true, syncerr.New(syncerr.ClientWireUnsupported, "this partition's log epoch was rotated; wire version 1 is no longer served, upgrade to wire version 2")
	}
	if wire >= ssp2.WireV2 && h.LogEpoch == nil && len(req.Commits) > 0 {
		return nil, true, syncerr.New(syncerr.InvalidRequest, "a request without a logEpoch acquires the epoch and may not carry pushes")
	}
	s := w.e.cfg.Schema
	if partition.NeedsFloor(h.SchemaVersion, w.e.cfg.MinSchemaVersion, s.Version) {
		v := s.Version
		rh := &ssp2.RespHeader{RequiredSchemaVersion: &v, LatestSchemaVersion: &v}
		if wire >= ssp2.WireV2 {
			rh.LogEpoch = info.LogEpoch
		}
		return &Reply{WireVersion: wire, Frames: []ssp2.Frame{rh}, Reset: true}, true, nil
	}
	if verdict == partition.EpochReset {
		rh := &ssp2.RespHeader{LogEpoch: info.LogEpoch, ResetRequired: true}
		return &Reply{WireVersion: wire, Frames: []ssp2.Frame{rh}, Reset: true}, true, nil
	}
	bound, err := w.boundActor(ctx, h.ClientID)
	if err != nil {
		return nil, true, storageErr(err)
	}
	if cerr := partition.CheckClientID(h.ClientID, j.id.ActorID, bound); cerr != nil {
		return nil, true, cerr
	}
	ops := 0
	for _, c := range req.Commits {
		ops += len(c.Operations)
	}
	if ops > w.e.cfg.MaxOperations {
		return nil, true, syncerr.New(syncerr.TooManyOperations, "request carries %d operations; the limit is %d", ops, w.e.cfg.MaxOperations)
	}
	if req.Pull != nil && req.Pull.Accept&(ssp2.AcceptInlineRows|ssp2.AcceptRefRows) == 0 {
		return nil, true, syncerr.New(syncerr.InvalidRequest, "PULL_HEADER.accept must include inline rows (bit 0) or ref rows (bit 1)")
	}
	seen := make(map[string]bool, len(req.Subscriptions))
	for _, sub := range req.Subscriptions {
		if seen[sub.ID] {
			return nil, true, syncerr.New(syncerr.InvalidSubscription, "duplicate subscription id %q", sub.ID)
		}
		seen[sub.ID] = true
		t := s.Table(sub.Table)
		if t == nil {
			return nil, true, syncerr.New(syncerr.UnknownTable, "subscription %q names unknown table %q", sub.ID, sub.Table)
		}
		if verr := partition.ValidateRequested(t, sub.Scopes); verr != nil {
			return nil, true, verr
		}
	}
	if j.resolved {
		if verr := partition.ValidateAllowed(s, j.allowed); verr != nil {
			return nil, true, verr
		}
	}
	return &Reply{WireVersion: wire, Frames: []ssp2.Frame{w.header(wire)}}, false, nil
}

// storageErr maps a storage failure to a protocol error: a writer-fence
// rejection (this process runs an older schema than the database requires)
// is sync.schema_not_ready; anything else is a retryable internal error.
func storageErr(err error) error {
	if _, ok := err.(*syncerr.Error); ok {
		return err
	}
	if errors.Is(err, storage.ErrWriterFenced) {
		return syncerr.Wrap(syncerr.SchemaNotReady, err, "the database requires a newer schema version than this server runs; retry later").
			WithDetails(map[string]any{"writerFenced": true})
	}
	return syncerr.Wrap(syncerr.InternalError, err, "storage is unavailable; retry")
}
