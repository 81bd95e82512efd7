package sqlite

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/synclane/synclane/storage"
)

// Reactions of a Dir. Each file numbers its reactions itself; the
// directory's id of reaction l of file f is l*K + f, so ids stay unique
// and increasing within a file, the file of an id is id mod K, and with
// K = 1 ids are the file's own.

// globalID maps file f's reaction id l.
func (d *Dir) globalID(f int, l int64) int64 { return l*int64(len(d.files)) + int64(f) }

// split maps a directory id to its file and the file's id.
func (d *Dir) split(id int64) (int, int64) {
	k := int64(len(d.files))
	if id < 0 {
		return 0, id
	}
	return int(id % k), id / k
}

func (d *Dir) globalReactions(f int, rs []storage.Reaction) []storage.Reaction {
	for i := range rs {
		rs[i].ID = d.globalID(f, rs[i].ID)
	}
	return rs
}

// ClaimReactions implements storage.Reactions: up to limit due reactions
// of every file, the files asked in turn (starting one further each call,
// so no file's reactions wait behind another's). Each file claims in a
// transaction of its own: when a file fails, the claims the files before
// it made are given back (ReleaseReactions: uncounted, due at nowMs) and
// the call fails with nothing claimed, as a failed claim of one file
// does. A claim left in place would cost its reaction an attempt no
// handler ran (the caller drops a failed call's reactions), and its last
// one a dead letter when the lease ran out.
func (d *Dir) ClaimReactions(ctx context.Context, nowMs, leaseMs int64, limit int) ([]storage.Reaction, error) {
	k := len(d.files)
	start := int(d.claimTurn.Add(1) % uint64(k))
	var out []storage.Reaction
	for n := 0; n < k && len(out) < limit; n++ {
		f := (start + n) % k
		rs, err := d.files[f].ClaimReactions(ctx, nowMs, leaseMs, limit-len(out))
		if err != nil {
			return nil, errors.Join(err, d.giveBack(context.WithoutCancel(ctx), out, nowMs))
		}
		out = append(out, d.globalReactions(f, rs)...)
	}
	slices.SortFunc(out, func(a, b storage.Reaction) int { return cmpInt64(a.ID, b.ID) })
	return out, nil
}

// giveBack releases the claims of rs (reactions as ClaimReactions returned
// them).
func (d *Dir) giveBack(ctx context.Context, rs []storage.Reaction, nowMs int64) error {
	if len(rs) == 0 {
		return nil
	}
	claims := make([]storage.ReactionClaim, len(rs))
	for i, r := range rs {
		claims[i] = storage.ReactionClaim{ID: r.ID, Attempt: r.Attempts}
	}
	if _, err := d.ReleaseReactions(ctx, claims, nowMs); err != nil {
		return fmt.Errorf("sqlite: give back the reactions claimed before the failure: %w", err)
	}
	return nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// byFile groups claims by file, with the files' own ids.
func (d *Dir) byFile(claims []storage.ReactionClaim) map[int][]storage.ReactionClaim {
	out := map[int][]storage.ReactionClaim{}
	for _, c := range claims {
		f, l := d.split(c.ID)
		out[f] = append(out[f], storage.ReactionClaim{ID: l, Attempt: c.Attempt})
	}
	return out
}

// ReleaseReactions implements storage.Reactions (one transaction per
// file).
func (d *Dir) ReleaseReactions(ctx context.Context, claims []storage.ReactionClaim, nowMs int64) (int, error) {
	total := 0
	for f, cs := range d.byFile(claims) {
		n, err := d.files[f].ReleaseReactions(ctx, cs, nowMs)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// CompleteReactions implements storage.Reactions (one transaction per
// file).
func (d *Dir) CompleteReactions(ctx context.Context, done []storage.ReactionClaim) (int, error) {
	total := 0
	for f, cs := range d.byFile(done) {
		n, err := d.files[f].CompleteReactions(ctx, cs)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// FailReaction implements storage.Reactions.
func (d *Dir) FailReaction(ctx context.Context, id int64, attempt int, errMsg string, retryAtMs int64, dead bool, nowMs int64) (bool, error) {
	f, l := d.split(id)
	return d.files[f].FailReaction(ctx, l, attempt, errMsg, retryAtMs, dead, nowMs)
}

// ListReactions implements storage.Reactions: every file's page after
// f.AfterID, merged in id order.
func (d *Dir) ListReactions(ctx context.Context, f storage.ReactionFilter) ([]storage.Reaction, error) {
	k := int64(len(d.files))
	limit := storage.ReactionListLimit(f.Limit)
	var out []storage.Reaction
	for i, st := range d.files {
		if f.Partition != "" && st != d.of(f.Partition) {
			continue
		}
		ff := f
		// file i's ids l with l*k+i > AfterID.
		if a := f.AfterID - int64(i); a >= 0 {
			ff.AfterID = a / k
		} else {
			ff.AfterID = 0
		}
		ff.Limit = limit
		rs, err := st.ListReactions(ctx, ff)
		if err != nil {
			return nil, err
		}
		for _, r := range d.globalReactions(i, rs) {
			if r.ID > f.AfterID {
				out = append(out, r)
			}
		}
	}
	slices.SortFunc(out, func(a, b storage.Reaction) int { return cmpInt64(a.ID, b.ID) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// CountReactions implements storage.Reactions: summed over the files.
func (d *Dir) CountReactions(ctx context.Context) (storage.ReactionCounts, error) {
	var sum storage.ReactionCounts
	for _, st := range d.files {
		c, err := st.CountReactions(ctx)
		if err != nil {
			return storage.ReactionCounts{}, err
		}
		sum.Pending += c.Pending
		sum.Dead += c.Dead
	}
	return sum, nil
}

// RedriveReaction implements storage.Reactions.
func (d *Dir) RedriveReaction(ctx context.Context, id, nowMs int64) (bool, error) {
	f, l := d.split(id)
	return d.files[f].RedriveReaction(ctx, l, nowMs)
}

// DeleteDeadReaction implements storage.Reactions.
func (d *Dir) DeleteDeadReaction(ctx context.Context, id int64) (bool, error) {
	f, l := d.split(id)
	return d.files[f].DeleteDeadReaction(ctx, l)
}
