package sqlite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/synclane/synclane/storage"
)

// pendingSQL lists a file's pending checkpoints at a running version, in
// the gate's order.
const pendingSQL = `SELECT partition_id, name FROM sync_backfill_checkpoints
	WHERE schema_version = ? AND state <> 'activated' ORDER BY partition_id, name`

// readPending reads the file's pending checkpoints at running on a read
// connection.
func (s *Store) readPending(ctx context.Context, running int32) ([]storage.CheckpointRef, error) {
	rows, err := s.readQuery(ctx, pendingSQL, running)
	if err != nil {
		return nil, fmt.Errorf("sqlite: read pending checkpoints of %s: %w", s.path, err)
	}
	defer rows.Close()
	var out []storage.CheckpointRef
	for rows.Next() {
		var r storage.CheckpointRef
		if err := rows.Scan(&r.Partition, &r.Name); err != nil {
			return nil, fmt.Errorf("sqlite: read pending checkpoints of %s: %w", s.path, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// The serve gate across files. A partition's gate is its own file's gate
// plus the pending checkpoints of every other file. Reading K-1 other
// files on every gate read would cost each request several statements,
// so each file carries a checkpoint generation (sync_meta
// 'checkpoint_gen', read in the same statement as its gate) that every
// call able to change which checkpoints are pending (DeclareCheckpoint,
// ClaimCheckpoint, ActivateCheckpoint, EnsureSchema: in any process)
// replaces in every file after its own change committed. A file's gate
// read that finds the generation it last read the other files under
// reuses that reading; any other generation reads them again. So once
// such a call returned, every gate read that begins later sees its
// effect; a read concurrent with the call may not, as with one file. A
// reading is also never reused for longer than maxPendingAge: a process
// that died between its change and the new generation delays the other
// files' gates by at most that much.

// maxPendingAge bounds how long a reading of the other files' pending
// checkpoints is reused under an unchanged generation.
const maxPendingAge = time.Second

// pendingReading is the other files' pending checkpoints as read after
// file i's generation gen was seen.
type pendingReading struct {
	gen     string
	running int32
	at      time.Time
	refs    []storage.CheckpointRef
}

// withPendingElsewhere adds to g, the gate file i read with checkpoint
// generation gen, the pending checkpoints of every other file, keeping
// the gate's (partition, name) order.
func (d *Dir) withPendingElsewhere(ctx context.Context, g storage.ServeGate, i int, gen string, running int32) (storage.ServeGate, error) {
	refs, err := d.pendingElsewhere(ctx, i, gen, running)
	if err != nil {
		return storage.ServeGate{}, fmt.Errorf("sqlite: read serve gate: %w", err)
	}
	return withPending(g, refs), nil
}

// withPending adds refs, pending checkpoints of other files, to g's,
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

// errPendingStale ends a query's snapshot whose gate needs the other
// files read again (Dir.Query).
var errPendingStale = errors.New("sqlite: the other files' pending checkpoints are to be read again")

// cachedPending returns the last reading of the files other than i if it
// was taken under generation gen at running and is recent enough to
// reuse, or nil.
func (d *Dir) cachedPending(i int, gen string, running int32) *pendingReading {
	if r := d.pending[i].Load(); r != nil && r.gen == gen && r.running == running && time.Since(r.at) < maxPendingAge {
		return r
	}
	return nil
}

// pendingElsewhere returns the pending checkpoints of the files other
// than i, reusing the last reading taken under generation gen.
func (d *Dir) pendingElsewhere(ctx context.Context, i int, gen string, running int32) ([]storage.CheckpointRef, error) {
	if r := d.cachedPending(i, gen, running); r != nil {
		return r.refs, nil
	}
	at := time.Now()
	var refs []storage.CheckpointRef
	for j, st := range d.files {
		if j == i {
			continue
		}
		ps, err := st.readPending(ctx, running)
		if err != nil {
			return nil, err
		}
		refs = append(refs, ps...)
	}
	d.pending[i].Store(&pendingReading{gen: gen, running: running, at: at, refs: refs})
	d.gateReads.Add(1)
	return refs, nil
}

// newCheckpointGen gives every file a new checkpoint generation, after a
// change of which checkpoints are pending committed: the other files'
// gates then read the pending checkpoints again.
func (d *Dir) newCheckpointGen(ctx context.Context) error {
	gen := storage.NewLogEpoch()
	var errs []error
	for _, st := range d.files { // a file that fails does not keep the others from their new generation
		if err := st.lock(ctx); err != nil {
			errs = append(errs, fmt.Errorf("sqlite: new checkpoint generation of %s: %w", st.path, err))
			continue
		}
		err := st.inWriteTx(ctx, "new checkpoint generation", func(ctx context.Context) error {
			_, err := st.conn.ExecContext(ctx, `INSERT INTO sync_meta(key, value) VALUES('checkpoint_gen', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`, gen)
			return err
		})
		st.unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("sqlite: new checkpoint generation of %s: %w", st.path, err))
		}
	}
	return errors.Join(errs...)
}

// dirTx is a push transaction of one file of a Dir: the file's own
// transaction, with the serve gate made directory-wide and blob claims
// made in the home file, where blob metadata lives.
type dirTx struct {
	storage.PushTx
	d    *Dir
	file int
	// inner is PushTx as the file's own transaction; running is the
	// version of the transaction's gate read, which CommittedGate answers
	// for.
	inner   *pushTx
	running int32
}

// ReadServeGate implements storage.CheckpointTx: the file's gate read in
// the transaction, with the other files' pending checkpoints.
func (tx *dirTx) ReadServeGate(ctx context.Context, running int32) (storage.ServeGate, error) {
	g, err := tx.PushTx.ReadServeGate(ctx, running)
	if err != nil {
		return g, err
	}
	tx.running = running
	return tx.d.withPendingElsewhere(ctx, g, tx.file, tx.inner.gen, running)
}

// CommittedGate implements storage.PushTx: the file's gate read after the
// COMMIT, with the other files' pending checkpoints read now (after it
// too); ok is false when that read fails.
func (tx *dirTx) CommittedGate() (storage.ServeGate, bool) {
	g, ok := tx.PushTx.CommittedGate()
	if !ok {
		return g, false
	}
	full, err := tx.d.withPendingElsewhere(context.Background(), g, tx.file, tx.inner.grp.afterGen, tx.running)
	if err != nil {
		return storage.ServeGate{}, false
	}
	return full, true
}

// ClaimBlob implements storage.BlobTx. Blob metadata lives in the home
// file: a push of another file touches the blob there, in a write
// transaction of its own committed before this one (see Dir.claimBlob).
func (tx *dirTx) ClaimBlob(ctx context.Context, id string, nowMs int64) (bool, error) {
	if tx.file == 0 {
		return tx.PushTx.ClaimBlob(ctx, id, nowMs)
	}
	return tx.d.home().touchPresentBlob(ctx, id, nowMs)
}
