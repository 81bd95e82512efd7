package peer

import (
	"fmt"
	"io"
	"sort"

	"github.com/synclane/synclane/engine"
)

// MetricsWriter returns a writer of the engine's cluster counters in the
// Prometheus text format, for the /metrics route (nothing in
// single-process mode):
//
//	synclane_cluster_members                     members in this member's view
//	synclane_cluster_healthy                     1 while this member's lease is known alive
//	synclane_cluster_forwarded_total{call}       calls forwarded to an owner
//	synclane_cluster_served_total{call}          calls served for other members
//	synclane_cluster_route_retries_total         routing attempts repeated (moved or unreachable owner)
//	synclane_cluster_unavailable_total           requests answered 503 after the move timeout
//	synclane_cluster_ownership_lost_total        local writes refused by the fence
//	synclane_cluster_evictions_total             actors stopped because their partition moved
//
// No label carries a partition: calls are the five routed kinds.
func MetricsWriter(eng *engine.Engine) func(io.Writer) {
	return func(w io.Writer) {
		st, ok := eng.ClusterStats()
		if !ok {
			return
		}
		healthy := 0
		if st.Healthy {
			healthy = 1
		}
		fmt.Fprintf(w, "# HELP synclane_cluster_members Members in this member's view of the cluster.\n# TYPE synclane_cluster_members gauge\nsynclane_cluster_members %d\n", len(st.Members))
		fmt.Fprintf(w, "# HELP synclane_cluster_healthy Whether this member's membership lease is known alive.\n# TYPE synclane_cluster_healthy gauge\nsynclane_cluster_healthy %d\n", healthy)
		byCall := func(name, help string, m map[string]uint64) {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
			calls := make([]string, 0, len(m))
			for c := range m {
				calls = append(calls, c)
			}
			sort.Strings(calls)
			for _, c := range calls {
				fmt.Fprintf(w, "%s{call=%q} %d\n", name, c, m[c])
			}
		}
		byCall("synclane_cluster_forwarded_total", "Calls forwarded to the partition's owner.", st.Forwarded)
		byCall("synclane_cluster_served_total", "Calls served for other members.", st.Served)
		for _, c := range []struct {
			name, help string
			v          uint64
		}{
			{"synclane_cluster_route_retries_total", "Routing attempts repeated after a moved or unreachable owner.", st.Retries},
			{"synclane_cluster_unavailable_total", "Requests answered unavailable (503) after the move timeout.", st.Unavailable},
			{"synclane_cluster_ownership_lost_total", "Local writes refused by the ownership fence.", st.OwnershipLost},
			{"synclane_cluster_evictions_total", "Partition actors stopped because their partition moved.", st.Evictions},
		} {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", c.name, c.help, c.name, c.name, c.v)
		}
	}
}
