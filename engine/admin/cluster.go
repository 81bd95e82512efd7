package admin

import (
	"context"
	"fmt"

	"github.com/synclane/synclane/engine"
)

// ClusterSummary is the overview's line on cluster mode (nil in
// single-process mode): this member and its view, read from the engine
// without asking the other members.
type ClusterSummary struct {
	// Self is this member's ID (its advertise URL).
	Self string `json:"self"`
	// Healthy reports this member's own registration known alive; Leaving
	// that it is handing its partitions off.
	Healthy bool `json:"healthy"`
	Leaving bool `json:"leaving"`
	// Members is the number of members in this member's view.
	Members int `json:"members"`
}

func clusterSummary(e *engine.Engine) *ClusterSummary {
	st, ok := e.ClusterStats()
	if !ok {
		return nil
	}
	return &ClusterSummary{Self: st.Self, Healthy: st.Healthy, Leaving: st.Leaving, Members: len(st.Members)}
}

// MaxOwnedListed bounds the partition names an OwnershipView lists.
const MaxOwnedListed = 200

// OwnershipView is how the registered partitions divide among the members
// by this member's current view (each member computes the same division
// from the same view).
type OwnershipView struct {
	// Self is this member's ID.
	Self string `json:"self"`
	// Partitions counts the registered partitions.
	Partitions int `json:"partitions"`
	// Owned counts those this member owns; OwnedList names the first
	// MaxOwnedListed of them in name order (OwnedTruncated: there are more).
	Owned          int      `json:"owned"`
	OwnedList      []string `json:"ownedList"`
	OwnedTruncated bool     `json:"ownedTruncated"`
	// Members counts the partitions of each member of the view (every
	// member, in the view's order, zero included); Unowned those without
	// an owner (the view has no member).
	Members []MemberOwnership `json:"members"`
	Unowned int               `json:"unowned"`
}

// MemberOwnership is one member's share of the partitions.
type MemberOwnership struct {
	Member     string `json:"member"`
	Partitions int    `json:"partitions"`
}

// Ownership divides the registered partitions among the members of this
// member's view (one read of the partition registry). In single-process
// mode it is ErrFeatureOff.
func (s *Service) Ownership(ctx context.Context) (*OwnershipView, error) {
	st, ok := s.eng.ClusterStats()
	if !ok {
		return nil, fmt.Errorf("%w: this server does not run in cluster mode", ErrFeatureOff)
	}
	ps, err := s.eng.Backend().Retention.ListPartitions(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: ownership: partitions: %w", err)
	}
	v := &OwnershipView{Self: st.Self, Partitions: len(ps), OwnedList: []string{}, Members: []MemberOwnership{}}
	idx := map[string]int{}
	for _, m := range st.Members {
		idx[m.ID] = len(v.Members)
		v.Members = append(v.Members, MemberOwnership{Member: m.ID})
	}
	for _, p := range ps {
		owner, ok := s.eng.Owner(p.Partition)
		i, known := idx[owner]
		switch {
		case !ok || owner == "":
			v.Unowned++
			continue
		case !known:
			// The view changed between ClusterStats and Owner.
			idx[owner] = len(v.Members)
			i = len(v.Members)
			v.Members = append(v.Members, MemberOwnership{Member: owner})
		}
		v.Members[i].Partitions++
		if owner == st.Self {
			v.Owned++
			if len(v.OwnedList) < MaxOwnedListed {
				v.OwnedList = append(v.OwnedList, p.Partition)
			} else {
				v.OwnedTruncated = true
			}
		}
	}
	return v, nil
}
