// Package cluster holds what the members of a synclane cluster agree on:
// the membership views (which `synclane serve` processes sharing one store
// are alive, as a coordination store such as etcd reports them) and the
// placement of partitions on those members. It links no coordination
// client: a Membership is implemented elsewhere (engine/cluster/etcdmembers)
// and handed in by the binary.
package cluster

import (
	"slices"
	"strings"
)

// Member is one live member of a cluster.
type Member struct {
	// ID identifies the member: its advertise URL (where peers reach it), stable across restarts.
	ID string `json:"id"`
	// Incarnation is random per process start, so a restarted member is told apart from its previous run.
	Incarnation string `json:"incarnation"`
	// StartedAtMs is when the member process registered (unix ms).
	StartedAtMs int64 `json:"startedAtMs"`
}

// View is an immutable snapshot of the cluster's live members.
type View struct {
	// Members are the registered members, sorted by ID (self included once registered).
	Members []Member
	// Revision is the coordination store's revision the view was read at (grows with every change).
	Revision int64
	// Healthy reports that this member's own registration is known to be alive: its lease was renewed
	// less than the lease TTL ago. A member that is not Healthy may be seen gone by the others, who
	// then claim its partitions: it must not claim a partition another member holds, and it keeps
	// serving one only under the ownership generation the database still records for it (the
	// engine fences every write and every reply with it).
	Healthy bool
}

// Has reports whether a member with this ID is in the view (Members
// sorted by ID, as a View's are).
func (v View) Has(id string) bool {
	_, found := slices.BinarySearchFunc(v.Members, id, func(m Member, id string) int { return strings.Compare(m.ID, id) })
	return found
}

// Membership is a source of views (implemented by package engine/cluster/etcdmembers).
type Membership interface {
	// View returns the current view.
	View() View
	// Changed returns a channel that is closed at the next change after the call (members or Healthy).
	Changed() <-chan struct{}
}
