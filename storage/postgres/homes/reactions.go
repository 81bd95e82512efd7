package homes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/synclane/synclane/storage"
)

// Reactions across homes. Each home numbers its reactions itself; the
// deployment's id of reaction l of home i is l*K + i (Homes.reactionID),
// so ids stay unique and increasing within a home and the home of an id
// is id mod K. Ids are stable while the list of homes is (adding a home
// renumbers them: a claim does not outlive a restart, but an id an
// operator copied from the admin API before does).

func (h *Homes) globalReactions(hm *home, rs []storage.Reaction) []storage.Reaction {
	for i := range rs {
		rs[i].ID = h.reactionID(hm.idx, rs[i].ID)
	}
	return rs
}

// ClaimReactions implements storage.Reactions: up to limit due reactions
// of every home, the homes asked in turn (starting one further each call,
// so no home's reactions wait behind another's). A home that cannot be
// reached is skipped (logged): the other homes' reactions are still
// delivered. Any other failure gives back the claims the homes before it
// made and fails the call with nothing claimed.
func (h *Homes) ClaimReactions(ctx context.Context, nowMs, leaseMs int64, limit int) ([]storage.Reaction, error) {
	k := len(h.homes)
	start := int(h.claimTurn.Add(1) % uint64(k))
	var out []storage.Reaction
	for n := 0; n < k && len(out) < limit; n++ {
		hm := h.homes[(start+n)%k]
		rs, err := hm.st.ClaimReactions(ctx, nowMs, leaseMs, limit-len(out))
		if err = h.unavailable(hm, err); errors.Is(err, storage.ErrHomeUnavailable) {
			h.log.Warn("homes: reactions of an unreachable home not claimed", zap.String("home", hm.name), zap.Error(err))
			continue
		}
		if err != nil {
			return nil, errors.Join(err, h.giveBack(context.WithoutCancel(ctx), out, nowMs))
		}
		out = append(out, h.globalReactions(hm, rs)...)
	}
	slices.SortFunc(out, func(a, b storage.Reaction) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// giveBack releases the claims of rs.
func (h *Homes) giveBack(ctx context.Context, rs []storage.Reaction, nowMs int64) error {
	if len(rs) == 0 {
		return nil
	}
	claims := make([]storage.ReactionClaim, len(rs))
	for i, r := range rs {
		claims[i] = storage.ReactionClaim{ID: r.ID, Attempt: r.Attempts}
	}
	if _, err := h.ReleaseReactions(ctx, claims, nowMs); err != nil {
		return fmt.Errorf("homes: give back the reactions claimed before the failure: %w", err)
	}
	return nil
}

// byHome groups claims by home, with the homes' own ids, in home order.
func (h *Homes) byHome(claims []storage.ReactionClaim) [][]storage.ReactionClaim {
	out := make([][]storage.ReactionClaim, len(h.homes))
	for _, c := range claims {
		hm, l := h.splitReaction(c.ID)
		out[hm.idx] = append(out[hm.idx], storage.ReactionClaim{ID: l, Attempt: c.Attempt})
	}
	return out
}

// ReleaseReactions implements storage.Reactions (one transaction per
// home).
func (h *Homes) ReleaseReactions(ctx context.Context, claims []storage.ReactionClaim, nowMs int64) (int, error) {
	total := 0
	for i, cs := range h.byHome(claims) {
		if len(cs) == 0 {
			continue
		}
		n, err := h.homes[i].st.ReleaseReactions(ctx, cs, nowMs)
		total += n
		if err != nil {
			return total, h.unavailable(h.homes[i], err)
		}
	}
	return total, nil
}

// CompleteReactions implements storage.Reactions (one transaction per
// home).
func (h *Homes) CompleteReactions(ctx context.Context, done []storage.ReactionClaim) (int, error) {
	total := 0
	for i, cs := range h.byHome(done) {
		if len(cs) == 0 {
			continue
		}
		n, err := h.homes[i].st.CompleteReactions(ctx, cs)
		total += n
		if err != nil {
			return total, h.unavailable(h.homes[i], err)
		}
	}
	return total, nil
}

// FailReaction implements storage.Reactions.
func (h *Homes) FailReaction(ctx context.Context, id int64, attempt int, errMsg string, retryAtMs int64, dead bool, nowMs int64) (bool, error) {
	hm, l := h.splitReaction(id)
	ok, err := hm.st.FailReaction(ctx, l, attempt, errMsg, retryAtMs, dead, nowMs)
	return ok, h.unavailable(hm, err)
}

// ListReactions implements storage.Reactions: every home's page after
// f.AfterID (only the partition's home's when f names one), merged in id
// order.
func (h *Homes) ListReactions(ctx context.Context, f storage.ReactionFilter) ([]storage.Reaction, error) {
	k := int64(len(h.homes))
	limit := storage.ReactionListLimit(f.Limit)
	var only *home
	if f.Partition != "" {
		hm, err := h.lookup(ctx, f.Partition)
		if err != nil {
			return nil, err
		}
		only = hm
	}
	var out []storage.Reaction
	for i, hm := range h.homes {
		if only != nil && hm != only {
			continue
		}
		ff := f
		// home i's ids l with l*k+i > AfterID.
		if a := f.AfterID - int64(i); a >= 0 {
			ff.AfterID = a / k
		} else {
			ff.AfterID = 0
		}
		ff.Limit = limit
		rs, err := hm.st.ListReactions(ctx, ff)
		if err != nil {
			return nil, h.unavailable(hm, err)
		}
		for _, r := range h.globalReactions(hm, rs) {
			if r.ID > f.AfterID {
				out = append(out, r)
			}
		}
	}
	slices.SortFunc(out, func(a, b storage.Reaction) int { return cmp.Compare(a.ID, b.ID) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// CountReactions implements storage.Reactions: summed over the homes.
func (h *Homes) CountReactions(ctx context.Context) (storage.ReactionCounts, error) {
	var sum storage.ReactionCounts
	for _, hm := range h.homes {
		c, err := hm.st.CountReactions(ctx)
		if err != nil {
			return storage.ReactionCounts{}, h.unavailable(hm, err)
		}
		sum.Pending += c.Pending
		sum.Dead += c.Dead
	}
	return sum, nil
}

// RedriveReaction implements storage.Reactions.
func (h *Homes) RedriveReaction(ctx context.Context, id, nowMs int64) (bool, error) {
	hm, l := h.splitReaction(id)
	ok, err := hm.st.RedriveReaction(ctx, l, nowMs)
	return ok, h.unavailable(hm, err)
}

// DeleteDeadReaction implements storage.Reactions.
func (h *Homes) DeleteDeadReaction(ctx context.Context, id int64) (bool, error) {
	hm, l := h.splitReaction(id)
	ok, err := hm.st.DeleteDeadReaction(ctx, l)
	return ok, h.unavailable(hm, err)
}
