package admin

import (
	"context"
	"sync"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster"
)

// ClusterView is the answer of GET /api/cluster (Options.Cluster), what
// the console's cluster page and `synclane admin cluster` show: the
// members as this one sees them, each with its own counters when it
// answered.
type ClusterView struct {
	// Self is this member's ID; Healthy and Leaving its own state.
	Self    string `json:"self"`
	Healthy bool   `json:"healthy"`
	Leaving bool   `json:"leaving"`
	// Members are this member's view, in its order.
	Members []ClusterMember `json:"members"`
	// Forwarded and Served are this member's counters by call.
	Forwarded map[string]uint64 `json:"forwarded"`
	Served    map[string]uint64 `json:"served"`
	// Partition and Owner answer ?partition=P: P's owner by this member's
	// view ("" when the view has no member).
	Partition string `json:"partition,omitempty"`
	Owner     string `json:"owner,omitempty"`
}

// ClusterMember is one member of a ClusterView.
type ClusterMember struct {
	cluster.Member
	// Self marks the member answering.
	Self bool `json:"self"`
	// Reachable reports that its counters were read (always for Self);
	// Error says why they were not.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Stats are the member's own counters and view (nil when unreachable).
	Stats *engine.ClusterStats `json:"stats,omitempty"`
}

// ClusterAskTimeout bounds BuildClusterView's question to one member.
const ClusterAskTimeout = 2 * time.Second

// BuildClusterView builds a ClusterView of eng (in cluster mode; the zero
// view otherwise), asking every other member of its view for its counters
// through ask, concurrently, each within ClusterAskTimeout. With a
// partition it adds the partition's owner.
func BuildClusterView(ctx context.Context, eng *engine.Engine, partition string,
	ask func(ctx context.Context, member string) (engine.ClusterStats, error)) *ClusterView {
	own, ok := eng.ClusterStats()
	if !ok {
		return &ClusterView{Members: []ClusterMember{}}
	}
	v := &ClusterView{Self: own.Self, Healthy: own.Healthy, Leaving: own.Leaving, Members: make([]ClusterMember, len(own.Members)),
		Forwarded: own.Forwarded, Served: own.Served}
	var wg sync.WaitGroup
	for i, mb := range own.Members {
		v.Members[i] = ClusterMember{Member: mb, Self: mb.ID == own.Self}
		if v.Members[i].Self {
			st := own
			v.Members[i].Reachable, v.Members[i].Stats = true, &st
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, ClusterAskTimeout)
			defer cancel()
			st, err := ask(cctx, mb.ID)
			if err != nil {
				v.Members[i].Error = err.Error()
				return
			}
			v.Members[i].Reachable, v.Members[i].Stats = true, &st
		}()
	}
	wg.Wait()
	if partition != "" {
		v.Partition = partition
		v.Owner, _ = eng.Owner(partition)
	}
	return v
}
