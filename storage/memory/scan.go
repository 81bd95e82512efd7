package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/synclane/synclane/storage"
)

// ScanChanges answers from the scope index: it takes the posting lists of
// the effective scope var with the fewest candidate commits, then filters
// each candidate commit's changes with storage.MatchScopes.
func (s *Store) ScanChanges(ctx context.Context, partition string, q storage.ChangeQuery) (storage.ChangeScan, error) {
	if err := ctx.Err(); err != nil {
		return storage.ChangeScan{}, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return storage.ChangeScan{}, fmt.Errorf("memory: scan changes: %w", err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	base := p.info.HorizonSeq // commits up to the horizon are pruned
	upTo := min(q.UpToSeq, base+int64(len(p.commits)))
	var seqs []int64
	if len(q.Scopes) == 0 {
		for seq := max(q.AfterSeq, base) + 1; seq <= upTo; seq++ {
			seqs = append(seqs, seq)
		}
	} else {
		idx := p.scopeIdx[q.Table]
		best := -1
		for v, vals := range q.Scopes {
			var cand []int64
			for _, val := range vals {
				cand = append(cand, idx[v+"\x00"+val]...)
			}
			if best < 0 || len(cand) < best {
				best, seqs = len(cand), cand
			}
		}
		slices.Sort(seqs)
		seqs = slices.Compact(seqs)
	}
	var out storage.ChangeScan
	n := 0
	for i, seq := range seqs {
		if seq <= q.AfterSeq || seq <= base || seq > upTo {
			continue
		}
		c := p.commits[seq-base-1]
		var chs []storage.ChangeRecord
		for _, ch := range c.Changes {
			if ch.Table == q.Table && storage.MatchScopes(ch.Scopes, q.Scopes) {
				chs = append(chs, copyChange(ch))
			}
		}
		if len(chs) == 0 {
			continue
		}
		out.Commits = append(out.Commits, storage.CommitChanges{Seq: c.Seq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, Changes: chs})
		n += len(chs)
		if q.LimitChanges > 0 && n >= q.LimitChanges {
			out.Truncated = seq < q.UpToSeq && i+1 < len(seqs) && seqs[i+1] <= upTo
			break
		}
	}
	return out, nil
}

// LatestScopeCommit finds the newest seq <= q.UpToSeq in the posting
// lists of q.Var's values (binary search per value).
func (s *Store) LatestScopeCommit(ctx context.Context, partition string, q storage.ScopeCommitQuery) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return 0, fmt.Errorf("memory: latest scope commit: %w", err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	idx := p.scopeIdx[q.Table]
	var latest int64
	for _, val := range q.Values {
		seqs := idx[q.Var+"\x00"+val]
		i, _ := slices.BinarySearch(seqs, q.UpToSeq+1) // the first seq above UpToSeq
		if i > 0 {
			latest = max(latest, seqs[i-1])
		}
	}
	return latest, nil
}

// ScanRows returns committed rows in primary-key order (st.CompareRowIDs:
// the key's native order, storage/keys.go).
func (s *Store) ScanRows(ctx context.Context, partition string, q storage.RowQuery) ([]storage.RowRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sch, p, err := s.schemaAndPart(partition)
	if err != nil {
		return nil, fmt.Errorf("memory: scan rows: %w", err)
	}
	st := sch.Table(q.Table.Name)
	if st == nil {
		return nil, fmt.Errorf("memory: scan rows: table %q is not in the ensured schema", q.Table.Name)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []storage.RowRecord
	for id, r := range p.rows[st.Name] {
		if q.AfterRowID != nil && st.CompareRowIDs(id, *q.AfterRowID) <= 0 {
			continue
		}
		if rowMatches(st, r.Values, q.Scopes) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b storage.RowRecord) int { return st.CompareRowIDs(a.RowID, b.RowID) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	for i := range out {
		out[i] = copyRecord(out[i], len(st.Columns))
	}
	return out, nil
}

// VisitRows implements storage.Rows over ScanRows (the memory store
// holds every row anyway); each row's values are a fresh copy.
func (s *Store) VisitRows(ctx context.Context, partition string, q storage.RowQuery, fn func(rec storage.RowRecord) error) error {
	rows, err := s.ScanRows(ctx, partition, q)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}
