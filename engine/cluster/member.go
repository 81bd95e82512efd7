// Package cluster holds what every member of a synclane cluster agrees on:
// the views of the live members (from a Membership such as
// engine/cluster/etcdmembers) and the placement of each partition on one
// of them (Owner, rendezvous hashing). It links no coordination client:
// the engine consumes a Membership and never learns where it comes from.
package cluster

// Member is one live member of a cluster.
type Member struct {
	// ID identifies the member: its advertise URL (where peers reach it),
	// stable across restarts.
	ID string `json:"id"`
	// Incarnation is random per process start, so a restarted member is
	// told apart from its previous run.
	Incarnation string `json:"incarnation"`
	// StartedAtMs is when the member process registered (unix ms).
	StartedAtMs int64 `json:"startedAtMs"`
}

// View is an immutable snapshot of the cluster's live members.
type View struct {
	// Members are the registered members, sorted by ID (self included once
	// registered).
	Members []Member
	// Revision is the coordination store's revision the view was read at
	// (grows with every change).
	Revision int64
	// Healthy reports that this member's own registration is known to be
	// alive: its lease was renewed less than the lease TTL ago. A member
	// that is not Healthy must stop committing for the partitions it owns
	// (another member may own them by now).
	Healthy bool
}

// Has reports whether the view lists a member with id.
func (v View) Has(id string) bool {
	for _, m := range v.Members {
		if m.ID == id {
			return true
		}
	}
	return false
}

// Membership is a source of views (implemented by package
// engine/cluster/etcdmembers).
type Membership interface {
	// View returns the current view.
	View() View
	// Changed returns a channel that is closed at the next change after
	// the call (members or Healthy).
	Changed() <-chan struct{}
}
