package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// Admin reads run on the read-only pool (never the writer connection), so
// they never hold or wait for the write lock pushes take. Every statement
// is a primary-key range read bounded by LIMIT; the per-partition client
// count and newest update are aggregates over the partition's client
// records (primary-key prefix).
const (
	adminPartitionCols = `SELECT p.partition_id, p.log_epoch, p.epoch_required, p.max_commit_seq, p.horizon_seq,
		(SELECT COUNT(*) FROM sync_clients c WHERE c.partition_id = p.partition_id),
		(SELECT COALESCE(MAX(c.updated_at_ms), 0) FROM sync_clients c WHERE c.partition_id = p.partition_id),
		COALESCE((SELECT m.created_at_ms FROM sync_commits m WHERE m.partition_id = p.partition_id AND m.seq = p.max_commit_seq), 0)
		FROM sync_partitions p `
	adminPartitionsSQL = adminPartitionCols + `WHERE p.partition_id > ? ORDER BY p.partition_id LIMIT ?`
	adminPartitionSQL  = adminPartitionCols + `WHERE p.partition_id = ?`
	adminClientsSQL    = `SELECT client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms FROM sync_clients
		WHERE partition_id = ? AND client_id > ? ORDER BY client_id LIMIT ?`
	adminCommitsSQL = `SELECT seq, created_at_ms, actor_id, client_id, client_commit_id FROM sync_commits
		WHERE partition_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?`
	adminChangesSQL = `SELECT commit_seq, table_name, row_id, op, row_version, scopes, row FROM sync_changes
		WHERE partition_id = ? AND commit_seq >= ? AND commit_seq <= ? ORDER BY commit_seq, idx`
)

// AdminPartitions reads a page of the partition registry.
func (s *Store) AdminPartitions(ctx context.Context, after string, limit int) ([]storage.PartitionOverview, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: admin partitions: %w", err)
	}
	return s.adminPartitions(ctx, adminPartitionsSQL, after, storage.ClampAdminLimit(limit))
}

// AdminPartition reads one partition's overview entry.
func (s *Store) AdminPartition(ctx context.Context, partition string) (storage.PartitionOverview, error) {
	if _, _, _, err := s.current(); err != nil {
		return storage.PartitionOverview{}, fmt.Errorf("sqlite: admin partition: %w", err)
	}
	out, err := s.adminPartitions(ctx, adminPartitionSQL, partition)
	if err != nil || len(out) == 0 {
		return storage.PartitionOverview{PartitionInfo: storage.PartitionInfo{Partition: partition}}, err
	}
	return out[0], nil
}

func (s *Store) adminPartitions(ctx context.Context, query string, args ...any) ([]storage.PartitionOverview, error) {
	rows, err := s.readQuery(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: admin partitions: %w", err)
	}
	defer rows.Close()
	var out []storage.PartitionOverview
	for rows.Next() {
		o := storage.PartitionOverview{PartitionInfo: storage.PartitionInfo{Exists: true}}
		var req int64
		if err := rows.Scan(&o.Partition, &o.LogEpoch, &req, &o.MaxCommitSeq, &o.HorizonSeq, &o.Clients, &o.LastClientAtMs, &o.LastCommitAtMs); err != nil {
			return nil, fmt.Errorf("sqlite: admin partitions: %w", err)
		}
		o.EpochRequired = req != 0
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: admin partitions: %w", err)
	}
	return out, nil
}

// AdminClients reads a page of the partition's client records.
func (s *Store) AdminClients(ctx context.Context, partition, after string, limit int) ([]storage.ClientRecord, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: admin clients: %w", err)
	}
	rows, err := s.readQuery(ctx, adminClientsSQL, partition, after, storage.ClampAdminLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("sqlite: admin clients: %w", err)
	}
	defer rows.Close()
	var out []storage.ClientRecord
	for rows.Next() {
		var rec storage.ClientRecord
		var subs []byte
		var wire int64
		if err := rows.Scan(&rec.ClientID, &rec.ActorID, &subs, &rec.Cursor, &wire, &rec.UpdatedAtMs); err != nil {
			return nil, fmt.Errorf("sqlite: admin clients: %w", err)
		}
		rec.Subscriptions, rec.WireVersion = subs, uint16(wire)
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: admin clients: %w", err)
	}
	return out, nil
}

// AdminCommits reads a page of commits and then their changes (one seq
// range on the changes' primary key) in one read transaction, so both
// come from one snapshot.
func (s *Store) AdminCommits(ctx context.Context, partition string, beforeSeq int64, limit int) ([]storage.CommitRecord, error) {
	if _, _, _, err := s.current(); err != nil {
		return nil, fmt.Errorf("sqlite: admin commits: %w", err)
	}
	if beforeSeq <= 0 {
		beforeSeq = 1<<63 - 1
	}
	rtx, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: admin commits: %w", err)
	}
	defer func() { _ = rtx.Rollback() }()
	out, err := func() ([]storage.CommitRecord, error) {
		rows, err := s.txQuery(ctx, rtx, adminCommitsSQL, partition, beforeSeq, storage.ClampAdminLimit(limit))
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []storage.CommitRecord
		for rows.Next() {
			var c storage.CommitRecord
			if err := rows.Scan(&c.Seq, &c.CreatedAtMs, &c.ActorID, &c.ClientID, &c.ClientCommitID); err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		return out, rows.Err()
	}()
	if err != nil || len(out) == 0 {
		return out, wrapSQLiteAdmin("admin commits", err)
	}
	bySeq := make(map[int64]*storage.CommitRecord, len(out))
	for i := range out {
		bySeq[out[i].Seq] = &out[i]
	}
	rows, err := s.txQuery(ctx, rtx, adminChangesSQL, partition, out[len(out)-1].Seq, out[0].Seq)
	if err != nil {
		return nil, fmt.Errorf("sqlite: admin commits: changes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq, op, ver int64
			ch           storage.ChangeRecord
			scopes       string
		)
		if err := rows.Scan(&seq, &ch.Table, &ch.RowID, &op, &ver, &scopes, &ch.Row); err != nil {
			return nil, fmt.Errorf("sqlite: admin commits: changes: %w", err)
		}
		ch.Op, ch.RowVersion = ssp2.OpKind(op), ver
		if err := json.Unmarshal([]byte(scopes), &ch.Scopes); err != nil {
			return nil, fmt.Errorf("sqlite: admin commits: commit %d: stored scopes: %w", seq, err)
		}
		if c := bySeq[seq]; c != nil {
			c.Changes = append(c.Changes, ch)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: admin commits: changes: %w", err)
	}
	return out, nil
}

// AdminRow reads the committed row on the read pool.
func (s *Store) AdminRow(ctx context.Context, partition string, t *schema.Table, rowID string) (*storage.RowRecord, error) {
	_, tables, _, err := s.current()
	if err != nil {
		return nil, fmt.Errorf("sqlite: admin row: %w", err)
	}
	ts := tables[t.Name]
	if ts == nil {
		return nil, fmt.Errorf("sqlite: admin row: table %q is not in the ensured schema", t.Name)
	}
	key, ok := keyArg(ts.t, rowID)
	if !ok {
		return nil, nil // names no row that can exist
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE partition_id = ? AND %s = ?", ts.selectCols, quote(ts.t.Name), quote(ts.t.Columns[ts.t.PK].Name))
	rows, err := s.readQuery(ctx, q, partition, key)
	rec, err := oneRow(rows, err, newRowBuf(ts.t))
	if err != nil {
		return nil, fmt.Errorf("sqlite: admin row %s/%q: %w", t.Name, rowID, err)
	}
	return rec, nil
}

func wrapSQLiteAdmin(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}
