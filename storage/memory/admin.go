package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// peekPart returns the partition's state without allocating one for a
// name never used (admin reads of unknown names leave no trace), or nil.
func (s *Store) peekPart(name string) (*schema.Schema, *part, error) {
	sch, err := s.ensured()
	if err != nil {
		return nil, nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return sch, s.d.parts[name], nil
}

// AdminPartitions lists existing partitions in name order from the
// database's map (copied under its lock), then reads each page entry under
// its state lock.
func (s *Store) AdminPartitions(ctx context.Context, after string, limit int) ([]storage.PartitionOverview, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, fmt.Errorf("memory: admin partitions: %w", err)
	}
	limit = storage.ClampAdminLimit(limit)
	s.d.mu.Lock()
	var names []string
	parts := map[string]*part{}
	for name, p := range s.d.parts {
		if name > after {
			names = append(names, name)
			parts[name] = p
		}
	}
	s.d.mu.Unlock()
	slices.Sort(names)
	var out []storage.PartitionOverview
	for _, name := range names {
		if len(out) == limit {
			break
		}
		if o := parts[name].overview(); o.Exists {
			out = append(out, o)
		}
	}
	return out, nil
}

// AdminPartition reads one partition's overview entry.
func (s *Store) AdminPartition(ctx context.Context, partition string) (storage.PartitionOverview, error) {
	none := storage.PartitionOverview{PartitionInfo: storage.PartitionInfo{Partition: partition}}
	if err := ctx.Err(); err != nil {
		return none, err
	}
	_, p, err := s.peekPart(partition)
	if err != nil || p == nil {
		return none, wrapAdmin("admin partition", err)
	}
	if o := p.overview(); o.Exists {
		return o, nil
	}
	return none, nil
}

// overview reads the partition's overview entry under its state lock.
func (p *part) overview() storage.PartitionOverview {
	p.mu.RLock()
	defer p.mu.RUnlock()
	o := storage.PartitionOverview{PartitionInfo: p.info, Clients: int64(len(p.clients))}
	for _, c := range p.clients {
		o.LastClientAtMs = max(o.LastClientAtMs, c.UpdatedAtMs)
	}
	if n := len(p.commits); n > 0 && p.commits[n-1].Seq == p.info.MaxCommitSeq {
		o.LastCommitAtMs = p.commits[n-1].CreatedAtMs
	}
	return o
}

// AdminClients returns copies of the partition's client records in
// clientID order.
func (s *Store) AdminClients(ctx context.Context, partition, after string, limit int) ([]storage.ClientRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, p, err := s.peekPart(partition)
	if err != nil || p == nil {
		return nil, wrapAdmin("admin clients", err)
	}
	limit = storage.ClampAdminLimit(limit)
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []storage.ClientRecord
	for id, c := range p.clients {
		if id > after {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b storage.ClientRecord) int { return strings.Compare(a.ClientID, b.ClientID) })
	if len(out) > limit {
		out = out[:limit]
	}
	for i := range out {
		out[i].Subscriptions = cloneBytes(out[i].Subscriptions)
	}
	return out, nil
}

// AdminCommits copies the retained commits below beforeSeq, newest first.
func (s *Store) AdminCommits(ctx context.Context, partition string, beforeSeq int64, limit int) ([]storage.CommitRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, p, err := s.peekPart(partition)
	if err != nil || p == nil {
		return nil, wrapAdmin("admin commits", err)
	}
	limit = storage.ClampAdminLimit(limit)
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []storage.CommitRecord
	for i := len(p.commits) - 1; i >= 0 && len(out) < limit; i-- {
		c := p.commits[i]
		if beforeSeq > 0 && c.Seq >= beforeSeq {
			continue
		}
		out = append(out, copyCommit(c))
	}
	return out, nil
}

// AdminRow returns a copy of the committed row, or nil.
func (s *Store) AdminRow(ctx context.Context, partition string, t *schema.Table, rowID string) (*storage.RowRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sch, p, err := s.peekPart(partition)
	if err != nil || p == nil {
		return nil, wrapAdmin("admin row", err)
	}
	st := sch.Table(t.Name)
	if st == nil {
		return nil, fmt.Errorf("memory: admin row: table %q is not in the ensured schema", t.Name)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	r, ok := p.rows[st.Name][rowID]
	if !ok {
		return nil, nil
	}
	rec := copyRecord(r, len(st.Columns))
	return &rec, nil
}

// wrapAdmin wraps err (nil stays nil: an unknown partition reads empty).
func wrapAdmin(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("memory: %s: %w", op, err)
}
