package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"

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

// withPendingElsewhere adds to g, the gate file i read, the pending
// checkpoints of every other file, keeping the gate's (partition, name)
// order: the serve gate is database-wide across the directory.
func (d *Dir) withPendingElsewhere(ctx context.Context, g storage.ServeGate, i int, running int32) (storage.ServeGate, error) {
	added := false
	for j, st := range d.files {
		if j == i {
			continue
		}
		ps, err := st.readPending(ctx, running)
		if err != nil {
			return storage.ServeGate{}, fmt.Errorf("sqlite: read serve gate: %w", err)
		}
		if len(ps) > 0 {
			g.Pending = append(slices.Clip(g.Pending), ps...)
			added = true
		}
	}
	if added {
		slices.SortFunc(g.Pending, func(a, b storage.CheckpointRef) int {
			if c := strings.Compare(a.Partition, b.Partition); c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
	}
	return g, nil
}

// dirTx is a push transaction of one file of a Dir: the file's own
// transaction, with the serve gate made directory-wide and blob claims
// made in the home file, where blob metadata lives.
type dirTx struct {
	storage.PushTx
	d    *Dir
	file int
	// running is the version of the transaction's gate read (gateRead),
	// which CommittedGate answers for.
	running  int32
	gateRead bool
}

// ReadServeGate implements storage.CheckpointTx: the file's gate read in
// the transaction, with the other files' pending checkpoints.
func (tx *dirTx) ReadServeGate(ctx context.Context, running int32) (storage.ServeGate, error) {
	g, err := tx.PushTx.ReadServeGate(ctx, running)
	if err != nil {
		return g, err
	}
	tx.running, tx.gateRead = running, true
	return tx.d.withPendingElsewhere(ctx, g, tx.file, running)
}

// CommittedGate implements storage.PushTx: the file's gate read after the
// COMMIT, with the other files' pending checkpoints read now (after it
// too); ok is false when that read fails.
func (tx *dirTx) CommittedGate() (storage.ServeGate, bool) {
	g, ok := tx.PushTx.CommittedGate()
	if !ok {
		return g, false
	}
	full, err := tx.d.withPendingElsewhere(context.Background(), g, tx.file, tx.running)
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
