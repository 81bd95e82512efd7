package homes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// The serve gate across homes. A partition's gate is its home's gate plus
// the pending checkpoints of every other home. Reading K-1 other
// databases on every gate read would cost each request as many
// statements, so each home carries a gate generation
// (postgres.GateGenerationTable, read in the same statement as its gate)
// that every call able to change which checkpoints are pending
// (DeclareCheckpoint, ClaimCheckpoint, ActivateCheckpoint, EnsureSchema:
// in any process) replaces in every home after its own change committed.
// A home's gate read that finds the generation it last read the other
// homes under reuses that reading; any other generation reads them
// again. So once such a call returned, every gate read that begins later
// sees its effect. A reading is also never reused for longer than
// maxPendingAge: a process that died between its change and the new
// generation delays the other homes' gates by at most that much.

// maxPendingAge bounds how long a reading of the other homes' pending
// checkpoints is reused under an unchanged generation.
const maxPendingAge = time.Second

// pendingReading is the other homes' pending checkpoints as read after
// home i's generation gen was seen.
type pendingReading struct {
	gen     string
	running int32
	at      time.Time
	refs    []storage.CheckpointRef
}

// withPending adds refs, pending checkpoints of other homes, to g's,
// keeping the gate's (partition, name) order.
func withPending(g storage.ServeGate, refs []storage.CheckpointRef) storage.ServeGate {
	if len(refs) == 0 {
		return g
	}
	g.Pending = append(slices.Clip(g.Pending), refs...)
	slices.SortFunc(g.Pending, func(a, b storage.CheckpointRef) int {
		if c := strings.Compare(a.Partition, b.Partition); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return g
}

// cachedPending returns the last reading of the homes other than i if it
// was taken under generation gen at running and is recent enough.
func (h *Homes) cachedPending(i int, gen string, running int32) *pendingReading {
	if r := h.pending[i].Load(); r != nil && r.gen == gen && r.running == running && time.Since(r.at) < maxPendingAge {
		return r
	}
	return nil
}

// homePending is one home's own pending checkpoints at running, as last
// read.
type homePending struct {
	running int32
	refs    []storage.CheckpointRef
}

// readPending reads hm's pending checkpoints at running. When hm cannot be
// reached, its last reading at running is used instead (logged): the
// partitions of the other homes keep serving through an outage of hm,
// under the checkpoints hm had pending when it was last read (its own
// partitions cannot serve meanwhile, and which of them are pending
// changes only by a declaration, a claim or an activation, which need hm
// too). Without such a reading the error is returned.
func (h *Homes) readPending(ctx context.Context, hm *home, running int32) ([]storage.CheckpointRef, error) {
	ps, err := hm.st.ReadPending(ctx, running)
	if err == nil {
		h.lastPending[hm.idx].Store(&homePending{running: running, refs: ps})
		return ps, nil
	}
	err = h.unavailable(hm, fmt.Errorf("homes: read the pending checkpoints of home %q: %w", hm.name, err))
	if last := h.lastPending[hm.idx].Load(); last != nil && last.running == running && errors.Is(err, storage.ErrHomeUnavailable) {
		h.log.Debug("homes: serve gates use the last reading of an unreachable home's pending checkpoints", zap.String("home", hm.name), zap.Error(err))
		return last.refs, nil
	}
	return nil, err
}

// pendingElsewhere returns the pending checkpoints of the homes other
// than i, reusing the last reading taken under generation gen (see
// readPending for a home that cannot be reached).
func (h *Homes) pendingElsewhere(ctx context.Context, i int, gen string, running int32) ([]storage.CheckpointRef, error) {
	if r := h.cachedPending(i, gen, running); r != nil {
		return r.refs, nil
	}
	at := time.Now()
	var refs []storage.CheckpointRef
	for j, hm := range h.homes {
		if j == i {
			continue
		}
		ps, err := h.readPending(ctx, hm, running)
		if err != nil {
			return nil, err
		}
		refs = append(refs, ps...)
	}
	h.pending[i].Store(&pendingReading{gen: gen, running: running, at: at, refs: refs})
	h.gateReads.Add(1)
	return refs, nil
}

// newCheckpointGen gives every home a new gate generation.
func (h *Homes) newCheckpointGen(ctx context.Context) error {
	gen := storage.NewLogEpoch()
	var errs []error
	for _, hm := range h.homes { // a home that fails does not keep the others from their new generation
		if err := hm.st.SetGateGeneration(ctx, gen); err != nil {
			errs = append(errs, fmt.Errorf("homes: new gate generation of home %q: %w", hm.name, err))
		}
	}
	return errors.Join(errs...)
}

// afterCheckpointChange gives the homes a new gate generation after a
// call that may have changed which checkpoints are pending; err is the
// call's error, returned as it is. A failed generation write is logged,
// not returned: the call's change is committed, and the other homes'
// gates see it within maxPendingAge without it.
func (h *Homes) afterCheckpointChange(ctx context.Context, err error) error {
	if genErr := h.newCheckpointGen(context.WithoutCancel(ctx)); genErr != nil {
		h.log.Warn("homes: gate generation not renewed; the other homes' serve gates see the change within their backstop",
			zap.Duration("backstop", maxPendingAge), zap.Error(genErr))
	}
	return err
}

// genReader is what the postgres push transaction adds for the router.
type genReader interface {
	ReadServeGateGen(ctx context.Context, running int32) (storage.ServeGate, string, error)
}

// homeTx is a push transaction of one home: the home's own transaction,
// with the serve gate made deployment-wide and blob claims made in main,
// where blob metadata lives.
type homeTx struct {
	storage.PushTx
	h  *Homes
	hm *home
}

// ReadServeGate implements storage.CheckpointTx: the home's gate read in
// the transaction, with the other homes' pending checkpoints.
func (tx *homeTx) ReadServeGate(ctx context.Context, running int32) (storage.ServeGate, error) {
	gr, ok := tx.PushTx.(genReader)
	if !ok {
		return storage.ServeGate{}, errors.New("homes: the home's push transaction reads no gate generation")
	}
	g, gen, err := gr.ReadServeGateGen(ctx, running)
	if err != nil {
		return g, tx.h.unavailable(tx.hm, err)
	}
	refs, err := tx.h.pendingElsewhere(ctx, tx.hm.idx, gen, running)
	if err != nil {
		return storage.ServeGate{}, err
	}
	return withPending(g, refs), nil
}

// ClaimBlob implements storage.BlobTx. Blob metadata lives in main: a
// push of another home touches the blob there, in a statement of its own
// committed before the push (see MarkOrphanBlobs).
func (tx *homeTx) ClaimBlob(ctx context.Context, id string, nowMs int64) (bool, error) {
	if tx.hm.idx == 0 {
		return tx.PushTx.ClaimBlob(ctx, id, nowMs)
	}
	ok, err := tx.h.main().st.TouchPresentBlob(ctx, id, nowMs)
	return ok, tx.h.unavailable(tx.h.main(), err)
}

// Commit implements storage.PushTx.
func (tx *homeTx) Commit(ctx context.Context) error {
	return tx.h.unavailable(tx.hm, tx.PushTx.Commit(ctx))
}

// The writes of a push transaction pass their errors through unavailable,
// so a move guard's refusal (storage.ErrPartitionMoved) drops the stale
// cached entry that sent the push to this home, whichever write met it.

// PutRow implements storage.PushTx.
func (tx *homeTx) PutRow(ctx context.Context, t *schema.Table, rec storage.RowRecord) error {
	return tx.h.unavailable(tx.hm, tx.PushTx.PutRow(ctx, t, rec))
}

// DeleteRow implements storage.PushTx.
func (tx *homeTx) DeleteRow(ctx context.Context, t *schema.Table, rowID string, tombstoneSeq int64) error {
	return tx.h.unavailable(tx.hm, tx.PushTx.DeleteRow(ctx, t, rowID, tombstoneSeq))
}

// Tombstone implements storage.PushTx.
func (tx *homeTx) Tombstone(ctx context.Context, t *schema.Table, rowID string) (int64, error) {
	n, err := tx.PushTx.Tombstone(ctx, t, rowID)
	return n, tx.h.unavailable(tx.hm, err)
}

// ClearTombstone implements storage.PushTx.
func (tx *homeTx) ClearTombstone(ctx context.Context, t *schema.Table, rowID string) error {
	return tx.h.unavailable(tx.hm, tx.PushTx.ClearTombstone(ctx, t, rowID))
}

// AppendCommit implements storage.PushTx.
func (tx *homeTx) AppendCommit(ctx context.Context, c storage.CommitRecord) error {
	return tx.h.unavailable(tx.hm, tx.PushTx.AppendCommit(ctx, c))
}

// PutIdempotency implements storage.PushTx.
func (tx *homeTx) PutIdempotency(ctx context.Context, rec storage.IdempotencyRecord) error {
	return tx.h.unavailable(tx.hm, tx.PushTx.PutIdempotency(ctx, rec))
}

// PutClients implements storage.PushTx.
func (tx *homeTx) PutClients(ctx context.Context, recs ...storage.ClientRecord) error {
	return tx.h.unavailable(tx.hm, tx.PushTx.PutClients(ctx, recs...))
}

// PutReactions implements storage.ReactionTx.
func (tx *homeTx) PutReactions(ctx context.Context, rs []storage.NewReaction) error {
	return tx.h.unavailable(tx.hm, tx.PushTx.PutReactions(ctx, rs))
}
