package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// adminSQL returns the admin read statements for this store's schema.
// Each is a primary-key range read bounded by LIMIT on the pool (no row
// locks, never the partition write lock), so admin reads never wait for
// pushes nor make them wait.
func (s *Store) adminSQL(stmt string) string {
	return strings.NewReplacer("{partitions}", s.q.partitions, "{clients}", s.q.clients,
		"{commits}", s.q.commits, "{changes}", s.q.changes).Replace(stmt)
}

const (
	adminPartitionCols = `SELECT p.partition, p.log_epoch, p.epoch_required, p.max_commit_seq, p.horizon_seq,
	(SELECT COUNT(*) FROM {clients} c WHERE c.partition = p.partition),
	(SELECT COALESCE(MAX(c.updated_at_ms), 0) FROM {clients} c WHERE c.partition = p.partition),
	COALESCE((SELECT m.created_at_ms FROM {commits} m WHERE m.partition = p.partition AND m.seq = p.max_commit_seq), 0)
FROM {partitions} p `
	adminPartitionsSQL = adminPartitionCols + `WHERE p.partition > $1 ORDER BY p.partition LIMIT $2`
	adminPartitionSQL  = adminPartitionCols + `WHERE p.partition = $1`
	adminClientsSQL    = `SELECT client_id, actor_id, subscriptions, cursor, wire_version, updated_at_ms FROM {clients}
WHERE partition = $1 AND client_id > $2 ORDER BY client_id LIMIT $3`
	adminCommitsSQL = `SELECT seq, created_at_ms, actor_id, client_id, client_commit_id FROM {commits}
WHERE partition = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`
	adminChangesSQL = `SELECT seq, table_name, row_id, op, row_version, scopes, row_data FROM {changes}
WHERE partition = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq, idx`
)

// AdminPartitions reads a page of the partition registry.
func (s *Store) AdminPartitions(ctx context.Context, after string, limit int) ([]storage.PartitionOverview, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if !storage.Storable(after) {
		return nil, nil
	}
	return s.adminPartitions(ctx, adminPartitionsSQL, after, storage.ClampAdminLimit(limit))
}

// AdminPartition reads one partition's overview entry.
func (s *Store) AdminPartition(ctx context.Context, partition string) (storage.PartitionOverview, error) {
	none := storage.PartitionOverview{PartitionInfo: storage.PartitionInfo{Partition: partition}}
	if err := s.ready(); err != nil {
		return none, err
	}
	if !storage.Storable(partition) {
		return none, nil
	}
	out, err := s.adminPartitions(ctx, adminPartitionSQL, partition)
	if err != nil || len(out) == 0 {
		return none, err
	}
	return out[0], nil
}

func (s *Store) adminPartitions(ctx context.Context, query string, args ...any) ([]storage.PartitionOverview, error) {
	var out []storage.PartitionOverview
	err := retry(ctx, "AdminPartitions", func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, s.adminSQL(query), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			o := storage.PartitionOverview{PartitionInfo: storage.PartitionInfo{Exists: true}}
			if err := rows.Scan(&o.Partition, &o.LogEpoch, &o.EpochRequired, &o.MaxCommitSeq, &o.HorizonSeq,
				&o.Clients, &o.LastClientAtMs, &o.LastCommitAtMs); err != nil {
				return err
			}
			out = append(out, o)
		}
		return rows.Err()
	})
	return out, err
}

// AdminClients reads a page of the partition's client records.
func (s *Store) AdminClients(ctx context.Context, partition, after string, limit int) ([]storage.ClientRecord, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if !storage.Storable(partition) || !storage.Storable(after) {
		return nil, nil
	}
	var out []storage.ClientRecord
	err := retry(ctx, "AdminClients", func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, s.adminSQL(adminClientsSQL), partition, after, storage.ClampAdminLimit(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r storage.ClientRecord
			var subs pgtype.Text
			var wire int32
			if err := rows.Scan(&r.ClientID, &r.ActorID, &subs, &r.Cursor, &wire, &r.UpdatedAtMs); err != nil {
				return err
			}
			if subs.Valid {
				r.Subscriptions = json.RawMessage(subs.String)
			}
			r.WireVersion = uint16(wire)
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// AdminCommits reads a page of commits and their changes in one read-only
// repeatable-read transaction (one snapshot).
func (s *Store) AdminCommits(ctx context.Context, partition string, beforeSeq int64, limit int) ([]storage.CommitRecord, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	if !storage.Storable(partition) {
		return nil, nil
	}
	if beforeSeq <= 0 {
		beforeSeq = 1<<63 - 1
	}
	var out []storage.CommitRecord
	err := retry(ctx, "AdminCommits", func() error {
		out = out[:0]
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, s.adminSQL(adminCommitsSQL), partition, beforeSeq, storage.ClampAdminLimit(limit))
			if err != nil {
				return err
			}
			for rows.Next() {
				var c storage.CommitRecord
				if err := rows.Scan(&c.Seq, &c.CreatedAtMs, &c.ActorID, &c.ClientID, &c.ClientCommitID); err != nil {
					rows.Close()
					return err
				}
				out = append(out, c)
			}
			rows.Close()
			if err := rows.Err(); err != nil || len(out) == 0 {
				return err
			}
			bySeq := make(map[int64]*storage.CommitRecord, len(out))
			for i := range out {
				bySeq[out[i].Seq] = &out[i]
			}
			rows, err = tx.Query(ctx, s.adminSQL(adminChangesSQL), partition, out[len(out)-1].Seq, out[0].Seq)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var (
					seq, ver int64
					op       int16
					scopes   string
					ch       storage.ChangeRecord
				)
				if err := rows.Scan(&seq, &ch.Table, &ch.RowID, &op, &ver, &scopes, &ch.Row); err != nil {
					return err
				}
				ch.Op, ch.RowVersion = ssp2.OpKind(op), ver
				if err := json.Unmarshal([]byte(scopes), &ch.Scopes); err != nil {
					return fmt.Errorf("commit %d: stored scopes: %w", seq, err)
				}
				if c := bySeq[seq]; c != nil {
					c.Changes = append(c.Changes, ch)
				}
			}
			return rows.Err()
		})
	})
	return out, err
}

// AdminRow reads the committed row on the pool.
func (s *Store) AdminRow(ctx context.Context, partition string, t *schema.Table, rowID string) (*storage.RowRecord, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	ts, err := s.table(t.Name)
	if err != nil {
		return nil, err
	}
	key, ok := keyArg(ts.t, rowID)
	if !storage.Storable(partition) || !ok {
		return nil, nil
	}
	var rec *storage.RowRecord
	err = retry(ctx, "AdminRow", func() error {
		rs := newRowScanner(ts.t)
		err := s.pool.QueryRow(ctx, ts.get, partition, key).Scan(rs.targets...)
		if errors.Is(err, pgx.ErrNoRows) {
			rec = nil
			return nil
		}
		if err != nil {
			return err
		}
		r := rs.record()
		rec = &r
		return nil
	})
	return rec, err
}
