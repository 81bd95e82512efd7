package httpsync

import (
	"fmt"
	"io"
	"sort"

	"github.com/synclane/synclane/engine"
)

// writeAuthMetrics renders synclane_auth_failures_total: refused
// authentications of every transport (the admin listener's too), by route
// kind and reason (both from fixed sets, see auth.ReportAuthFailure).
func writeAuthMetrics(w io.Writer, eng *engine.Engine) {
	counts := eng.AuthFailureCounts()
	_, _ = fmt.Fprintf(w, "# HELP synclane_auth_failures_total Refused authentications, by route kind and reason (error code). The event ring samples them (one auth.failed event per source per interval); this counts every one.\n# TYPE synclane_auth_failures_total counter\n")
	keys := make([]engine.AuthFailureKey, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Route != keys[j].Route {
			return keys[i].Route < keys[j].Route
		}
		return keys[i].Reason < keys[j].Reason
	})
	for _, k := range keys {
		_, _ = fmt.Fprintf(w, "synclane_auth_failures_total{route=%q,reason=%q} %d\n", k.Route, k.Reason, counts[k])
	}
}
