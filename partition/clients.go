package partition

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// registeredSub is the stored form of one registered subscription.
// Pending marks a subscription realtime deltas must not continue: it was
// not active at its last pull (revoked or reset) or its bootstrap is
// incomplete (records written before the field existed read as not
// pending).
type registeredSub struct {
	ID      string              `json:"id"`
	Table   string              `json:"table"`
	Scopes  map[string][]string `json:"scopes"`
	Cursor  int64               `json:"cursor"`
	Pending bool                `json:"pending,omitempty"`
}

// clientEntry is a cached client record. dirty marks one a served round
// changed: it is written back whole (Clients.PutClient: the round is
// authoritative for its registration). advance is a realtime ack not
// written back yet (nil: none): unless the record is written whole anyway,
// it is written as a conditional advance of the stored cursor and
// timestamp only (Clients.AdvanceClients, SPEC §8.2), which keeps what a
// round of another process wrote and never recreates a deleted record.
// acked is an ack (or, for a record read from storage, its cursor) not
// yet folded into rec.Subscriptions (-1: none): acks are frequent, the
// JSON is rewritten only when the record is written back or read.
type clientEntry struct {
	rec     storage.ClientRecord
	dirty   bool
	advance *pendingAdvance
	acked   int64
}

// pendingAdvance is the newest ack of a client awaiting write-back: the
// session's actor and log epoch, the highest acked cursor and when the
// last ack arrived.
type pendingAdvance struct {
	actorID, epoch string
	cursor, atMs   int64
}

// pending reports that the entry awaits a write-back of either kind.
func (ce *clientEntry) pending() bool { return ce.dirty || ce.advance != nil }

// settle folds a pending ack into the registered subscriptions' cursors:
// each subscription deltas continue (not pending, synced) is raised to it.
func (ce *clientEntry) settle() {
	if ce.acked < 0 {
		return
	}
	a := ce.acked
	ce.acked = -1
	var subs []registeredSub
	if len(ce.rec.Subscriptions) == 0 || json.Unmarshal(ce.rec.Subscriptions, &subs) != nil {
		return
	}
	changed := false
	for i := range subs {
		if !subs[i].Pending && subs[i].Cursor >= 0 && subs[i].Cursor < a {
			subs[i].Cursor, changed = a, true
		}
	}
	if !changed {
		return
	}
	if b, err := json.Marshal(subs); err == nil {
		ce.rec.Subscriptions = b
	}
}

// clientCache holds the client records a partition actor has seen: the
// clientId → actor binding and the records waiting to be written back
// (dirty counts the entries pending a write-back of either kind). The
// map is allocated on first use, so an idle actor costs little.
type clientCache struct {
	entries   map[string]*clientEntry
	dirty     int
	lastFlush time.Time
}

// reset forgets every cached record (dirty ones included: called when the
// records are void, after a log epoch change, or before a reload).
func (c *clientCache) reset(now time.Time) {
	c.entries, c.dirty, c.lastFlush = nil, 0, now
}

// maxCachedClients bounds the per-partition client cache; past it, clean
// entries are dropped (they are re-read from storage on demand).
const maxCachedClients = 50_000

// client returns the cached record of clientID, reading it from storage
// on a miss; nil when the client has no record.
func (p *Partition) client(ctx context.Context, clientID string) (*clientEntry, error) {
	if ce, ok := p.clients.entries[clientID]; ok {
		return ce, nil
	}
	rec, err := p.cfg.Backend.Clients.GetClient(ctx, p.name, clientID)
	if err != nil || rec == nil {
		return nil, err
	}
	// The stored cursor may have been raised by acks (AdvanceClients),
	// which leave the subscriptions as their round wrote them: it is
	// folded into the ready ones on read (settle), as a cached ack is.
	return p.cache(&clientEntry{rec: *rec, acked: rec.Cursor}), nil
}

func (p *Partition) cache(ce *clientEntry) *clientEntry {
	if p.clients.entries == nil {
		p.clients.entries = map[string]*clientEntry{}
	}
	if len(p.clients.entries) >= maxCachedClients {
		for id, c := range p.clients.entries {
			if !c.pending() {
				delete(p.clients.entries, id)
			}
		}
	}
	p.clients.entries[ce.rec.ClientID] = ce
	return ce
}

// bind makes j's clientId binding durable before any reply relies on it: a
// clientId with no binding yet is bound to j's actor in storage (first
// binding wins, also across processes sharing the store), and remembers
// the binding in j for precheck, which reads no storage for it. Requests
// that only acquire the epoch, and reserved clientIds, bind nothing (and
// precheck answers them before the binding matters). It runs outside
// push transactions. A binding bindGroup already wrote for j's batch is
// found in the cache: no storage call.
func (p *Partition) bind(ctx context.Context, j *SyncJob) error {
	j.bound = ""
	if !bindable(j) {
		return nil
	}
	h := j.req.Header
	ce, err := p.client(ctx, h.ClientID)
	if err != nil {
		return err
	}
	if ce != nil && ce.rec.ActorID != "" {
		j.bound = ce.rec.ActorID
		return nil
	}
	got, err := p.storeBindings(ctx, []storage.ClientBinding{{ClientID: h.ClientID, ActorID: j.actorID}})
	if err != nil {
		return err
	}
	j.bound = got[0].ActorID
	return nil
}

// bindable reports whether j's clientId takes a binding (see bind).
func bindable(j *SyncJob) bool {
	if j.req.WireVersion >= ssp2.WireV2 && j.req.Header.LogEpoch == nil {
		return false
	}
	return CheckClientID(j.req.Header.ClientID, j.actorID, "") == nil
}

// bindGroup writes the bindings of every unbound clientId among jobs (a
// batch the actor handed over together) in one Clients.BindClients call:
// one durable write for the batch instead of one per fresh client. Each
// job's own bind then finds its binding cached. A clientId that appears
// twice is bound to the first job's actor, as when the jobs are served
// one after the other. Nothing here answers a job: a failed read or
// write is left to each job's own bind, which fails the same way and
// answers its job.
func (p *Partition) bindGroup(ctx context.Context, jobs []Job) {
	var binds []storage.ClientBinding
	var seen map[string]bool
	for _, jb := range jobs {
		j, ok := jb.(*SyncJob)
		if !ok || !bindable(j) || j.ctx.Err() != nil {
			continue
		}
		cid := j.req.Header.ClientID
		if seen[cid] {
			continue
		}
		// An uncached clientId is not looked up first: BindClients
		// reports whether it was bound already (storeBindings then reads
		// its record), and in a batch of first requests most are fresh.
		if ce := p.clients.entries[cid]; ce != nil && ce.rec.ActorID != "" {
			continue
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[cid] = true
		binds = append(binds, storage.ClientBinding{ClientID: cid, ActorID: j.actorID})
	}
	if len(binds) > 0 {
		p.storeBindings(ctx, binds) //nolint:errcheck // each job's bind tries again and answers the failure
	}
}

// storeBindings binds binds' clientIds (none bound in the cache) in one
// durable write and caches the records: a record the write created is
// known without reading it back (the minimal record BindClients
// describes); one bound before (by another process, or before this
// actor's cache) is read from storage. The answers are BindClients'.
func (p *Partition) storeBindings(ctx context.Context, binds []storage.ClientBinding) ([]storage.BoundClient, error) {
	nowMs := p.cfg.Now().UnixMilli()
	got, err := p.cfg.Backend.Clients.BindClients(ctx, p.name, nowMs, binds...)
	if err != nil {
		return nil, err
	}
	if c := p.cfg.Counters; c != nil {
		c.BindingWrites.Add(1)
		c.Bindings.Add(uint64(len(binds)))
	}
	for i, b := range binds {
		ce := p.clients.entries[b.ClientID]
		switch {
		case ce != nil:
			ce.rec.ActorID = got[i].ActorID
		case got[i].Created:
			p.cache(&clientEntry{rec: storage.ClientRecord{ClientID: b.ClientID, ActorID: got[i].ActorID, Cursor: -1, UpdatedAtMs: nowMs}, acked: -1})
		default:
			if _, err := p.client(ctx, b.ClientID); err != nil {
				return nil, err
			}
		}
	}
	return got, nil
}

// recordClient buffers the client's record after a served request: its
// actor binding, wire version and, for pulls, the registered subscriptions
// (the request's list replaces the stored one) and the cursor watermark
// (minimum nextCursor over active subscriptions; kept when none is active).
func (p *Partition) recordClient(ctx context.Context, j *SyncJob, rep *Reply) {
	cid := j.req.Header.ClientID
	ce, err := p.client(ctx, cid)
	if err != nil || ce == nil {
		// Unknown (or unreadable) record: start a fresh one; a later flush
		// writes it.
		ce = p.cache(&clientEntry{rec: storage.ClientRecord{ClientID: cid, Cursor: -1}, acked: -1})
	}
	rec := &ce.rec
	rec.ActorID = j.actorID
	rec.WireVersion = j.req.WireVersion
	rec.UpdatedAtMs = p.cfg.Now().UnixMilli()
	reg := Registration{ClientID: cid, ActorID: j.actorID, WireVersion: j.req.WireVersion, LogEpoch: p.token.LogEpoch, Pulled: j.req.Pull != nil}
	if j.req.Pull != nil {
		subs := make([]registeredSub, 0, len(j.req.Subscriptions))
		cursors := map[string]int64{}
		active := map[string]bool{}
		pending := map[string]bool{}
		effective := map[string]map[string][]string{}
		var cur *ssp2.SubStart
		for _, f := range rep.Frames {
			switch x := f.(type) {
			case *ssp2.SubStart:
				cur = x
			case *ssp2.SubEnd:
				if cur != nil {
					cursors[cur.ID] = x.NextCursor
					active[cur.ID] = cur.Status == ssp2.SubActive
					pending[cur.ID] = cur.Status != ssp2.SubActive || x.BootstrapState != nil
					effective[cur.ID] = cur.EffectiveScopes
				}
			}
		}
		watermark := int64(-1)
		anyActive := false
		for _, s := range j.req.Subscriptions {
			subs = append(subs, registeredSub{ID: s.ID, Table: s.Table, Scopes: s.Scopes, Cursor: cursors[s.ID], Pending: pending[s.ID]})
			rs := RegisteredSubscription{ID: s.ID, Table: s.Table, Cursor: cursors[s.ID], Active: active[s.ID], Ready: active[s.ID] && !pending[s.ID]}
			if rs.Active {
				rs.Effective = effective[s.ID]
			}
			reg.Subscriptions = append(reg.Subscriptions, rs)
			if active[s.ID] {
				if !anyActive || cursors[s.ID] < watermark {
					watermark = cursors[s.ID]
				}
				anyActive = true
			}
		}
		if b, err := json.Marshal(subs); err == nil {
			rec.Subscriptions = b
			ce.acked = -1 // the pull's cursors replace any pending ack
		}
		if anyActive {
			rec.Cursor = watermark
		}
	}
	p.markDirty(ce)
	if p.cfg.OnRegistration != nil {
		p.callHost("OnRegistration", func() { p.cfg.OnRegistration(p.name, reg) })
	}
}

// markDirty queues a cached record for a whole write-back.
func (p *Partition) markDirty(ce *clientEntry) {
	if !ce.pending() {
		p.clients.dirty++
	}
	ce.dirty = true
}

// markAdvanced queues an accepted ack a (arrived at atMs) for write-back
// as an advance (see clientEntry).
func (p *Partition) markAdvanced(ce *clientEntry, a Ack, atMs int64) {
	if !ce.pending() {
		p.clients.dirty++
	}
	if ad := ce.advance; ad != nil && ad.epoch == a.LogEpoch && ad.actorID == a.ActorID {
		ad.cursor, ad.atMs = max(ad.cursor, a.Cursor), max(ad.atMs, atMs)
		return
	}
	ce.advance = &pendingAdvance{actorID: a.ActorID, epoch: a.LogEpoch, cursor: a.Cursor, atMs: atMs}
}

// written marks a pending entry written back (whole, or its advance).
func (p *Partition) written(ce *clientEntry, whole bool) {
	if !ce.pending() {
		return
	}
	if whole {
		ce.dirty = false
	}
	ce.advance = nil // a whole record carries the ack's cursor too
	if !ce.pending() {
		p.clients.dirty--
	}
}

// flushDue reports whether the buffered client records are due for
// write-back: one has waited the flush interval, or 512 are buffered.
func (p *Partition) flushDue() bool {
	return p.clients.dirty > 0 && (p.clients.dirty >= 512 || p.cfg.Now().Sub(p.clients.lastFlush) >= p.cfg.ClientFlushInterval)
}

func (p *Partition) maybeFlushClients(ctx context.Context) {
	if p.flushDue() {
		p.flushClients(ctx)
	}
}

// pendingClients returns the entries awaiting a whole write-back and
// their records (pending acks folded in), and the ones awaiting only an
// advance.
func (p *Partition) pendingClients() (whole []*clientEntry, recs []storage.ClientRecord, advances []*clientEntry) {
	for _, ce := range p.clients.entries {
		switch {
		case ce.dirty:
			ce.settle()
			whole, recs = append(whole, ce), append(recs, ce.rec)
		case ce.advance != nil:
			advances = append(advances, ce)
		}
	}
	return whole, recs, advances
}

// flushClients writes buffered client records back to storage: whole
// records in one transaction, advances in another. A failed write keeps
// its entries buffered for the next flush. Whole records the ownership
// fence refuses (another member claimed the partition since this actor
// did) are handed over instead (handOverClients), and refused advances
// written without the fence (advanceClients): they are never dropped.
func (p *Partition) flushClients(ctx context.Context) {
	p.clients.lastFlush = p.cfg.Now()
	if p.clients.dirty == 0 {
		return
	}
	whole, recs, advances := p.pendingClients()
	if len(recs) > 0 {
		err := p.cfg.Backend.Clients.PutClient(ctx, p.name, recs...)
		if errors.Is(err, storage.ErrOwnershipLost) {
			err = p.handOverClients(ctx, recs, err)
		}
		if err == nil || p.clientsDropped(err, len(recs)) {
			for _, ce := range whole {
				p.written(ce, true)
			}
		}
	}
	if len(advances) > 0 {
		p.advanceClients(ctx, advances)
	}
}

// handOverClients writes whole records the ownership fence refused (lost,
// the refusal) through the store's ClientHandOver role, without the fence:
// each record is the client's last round this actor served, and lands
// unless the store holds a newer one (the new owner's, from a later round
// of the client) or the log epoch moved on (the records are void then). A
// nil error means the records are done with; an error leaves them
// buffered, and the next flush tries again. A store without the role
// cannot take them: they are dropped, with an error logged.
func (p *Partition) handOverClients(ctx context.Context, recs []storage.ClientRecord, lost error) error {
	h := p.cfg.Backend.HandOver
	if h == nil {
		p.log().Error("client records dropped: refused by the ownership fence, and the store cannot take them handed over",
			zap.Int("clients", len(recs)), zap.Error(lost))
		return nil
	}
	n, err := h.HandOverClients(storage.WithoutFence(ctx), p.name, p.token.LogEpoch, recs...)
	if err != nil && !errors.Is(err, storage.ErrUnstorable) {
		return err
	}
	p.log().Info("client records handed over: the partition's ownership moved before they were written back",
		zap.Int("clients", len(recs)), zap.Int("written", n), zap.Int("newer_or_void", len(recs)-n), zap.NamedError("refusal", lost))
	return err
}

// advanceClients writes the pending acks of entries as advances, one
// Clients.AdvanceClients call per log epoch (the acks' sessions'). When
// fewer records moved than acks were written (a record deleted or rebound
// meanwhile, or the epoch rotated by another process), the entries are
// dropped from the cache: the next use reads what storage holds. Acks the
// ownership fence refuses are written again without it: an advance only
// raises a cursor and a timestamp to their maxima, for the session's actor
// and epoch, so it cannot undo anything the partition's new owner wrote.
func (p *Partition) advanceClients(ctx context.Context, entries []*clientEntry) {
	byEpoch := map[string][]*clientEntry{}
	for _, ce := range entries {
		byEpoch[ce.advance.epoch] = append(byEpoch[ce.advance.epoch], ce)
	}
	for epoch, group := range byEpoch {
		acks := make([]storage.ClientAdvance, len(group))
		for i, ce := range group {
			ad := ce.advance
			acks[i] = storage.ClientAdvance{ClientID: ce.rec.ClientID, ActorID: ad.actorID, Cursor: ad.cursor, AtMs: ad.atMs}
		}
		n, err := p.cfg.Backend.Clients.AdvanceClients(ctx, p.name, epoch, acks...)
		if errors.Is(err, storage.ErrOwnershipLost) {
			n, err = p.cfg.Backend.Clients.AdvanceClients(storage.WithoutFence(ctx), p.name, epoch, acks...)
		}
		if err != nil {
			p.log().Warn("realtime acks write failed; will retry", zap.Int("clients", len(acks)), zap.Error(err))
			continue
		}
		for _, ce := range group {
			p.written(ce, false)
			if n < len(acks) && !ce.pending() && p.clients.entries[ce.rec.ClientID] == ce {
				delete(p.clients.entries, ce.rec.ClientID)
			}
		}
	}
}

// clientsDropped logs a failed write-back of n records and reports whether
// it still counts as done: the storable records were written and the
// others never can be (storage.ErrUnstorable). Otherwise the records stay
// buffered and are retried.
func (p *Partition) clientsDropped(err error, n int) bool {
	if !errors.Is(err, storage.ErrUnstorable) {
		p.log().Warn("client records write failed; will retry", zap.Int("clients", n), zap.Error(err))
		return false
	}
	p.log().Warn("client records dropped: the store cannot hold them", zap.Error(err))
	return true
}

// writeBackInTx writes the buffered client records inside the push
// transaction tx when their write-back is due (storage.PushTx.PutClients),
// instead of in a write transaction of their own: with many partitions, each flushing every second, those small
// transactions cost about as much as the pushes. It returns the entries
// written; they turn clean only once tx commits (clientsWrittenBack) and
// stay buffered otherwise. An error is a storage failure of tx.
func (p *Partition) writeBackInTx(ctx context.Context, tx storage.PushTx) ([]*clientEntry, error) {
	if !p.flushDue() {
		return nil, nil
	}
	written, recs, advances := p.pendingClients()
	if len(advances) == 0 {
		// (Advances are not push-transaction writes: while some wait, the
		// flush stays due and the one after this job writes them.)
		p.clients.lastFlush = p.cfg.Now()
	}
	if len(recs) == 0 {
		return nil, nil
	}
	if err := tx.PutClients(ctx, recs...); err != nil && !p.clientsDropped(err, len(recs)) {
		return nil, err
	}
	return written, nil
}

// clientsWrittenBack marks entries written by a committed push transaction
// clean, unless the cache was reset or replaced them meanwhile.
func (p *Partition) clientsWrittenBack(written []*clientEntry) {
	for _, ce := range written {
		if ce.dirty && p.clients.entries[ce.rec.ClientID] == ce {
			p.written(ce, true)
		}
	}
}

// WriteBackJob writes the partition's buffered client records back now,
// after the pushes queued before it (AfterQueued), under the actor's
// ownership generation (handed over if the fence refuses them, see
// flushClients). An actor with nothing buffered answers it without
// claiming the partition. The engine runs it when another member asks this
// one to release a partition it still owns by its own view, so the records
// are in storage before that member claims and reads them.
type WriteBackJob struct {
	ctx context.Context
	// the answer is how many records are still buffered afterwards
	completion[int]
}

// NewWriteBackJob returns a write-back job for the partition it is
// submitted to.
func NewWriteBackJob(ctx context.Context) *WriteBackJob {
	j := &WriteBackJob{ctx: ctx}
	j.init()
	return j
}

// Wait returns how many records are still buffered once the write-back
// ran (0: every one written or handed over), or the failure (ctx's error
// when ctx ends first).
func (j *WriteBackJob) Wait(ctx context.Context) (int, error) { return j.wait(ctx, "") }

// Batchable is false: the write-back is its own transaction.
func (*WriteBackJob) Batchable() bool { return false }

// AfterQueued is true: the records of the pushes queued before it are
// written back too.
func (*WriteBackJob) AfterQueued() bool { return true }

func (*WriteBackJob) push() *SyncJob { return nil }

func (j *WriteBackJob) run(ctx context.Context, p *Partition) {
	if err := j.ctx.Err(); err != nil {
		j.Fail(err)
		return
	}
	p.flushClients(ctx)
	j.answer(p.clients.dirty, nil)
}

func (j *WriteBackJob) requestContext() context.Context { return j.ctx }
