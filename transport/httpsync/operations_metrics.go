package httpsync

import (
	"fmt"
	"io"
	"slices"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/opwire"
)

// writeOperationMetrics renders this process's remote operation counters:
// synclane_operations_executed_total{kind} (query and command always
// present) and synclane_operations_refused_total{kind,code}.
func writeOperationMetrics(w io.Writer, eng *engine.Engine) {
	s := eng.Operations().Stats()
	_, _ = fmt.Fprintf(w, "# HELP synclane_operations_executed_total Remote operations answered with a result (a command's cached replay included), by kind.\n# TYPE synclane_operations_executed_total counter\n")
	for _, k := range []string{opwire.KindQuery, opwire.KindCommand} {
		_, _ = fmt.Fprintf(w, "synclane_operations_executed_total{kind=%q} %d\n", k, s.Executed[k])
	}
	_, _ = fmt.Fprintf(w, "# HELP synclane_operations_refused_total Remote operations answered with an error, by kind (query, command, invalid) and protocol code.\n# TYPE synclane_operations_refused_total counter\n")
	kinds := make([]string, 0, len(s.Refused))
	for k := range s.Refused {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		codes := make([]string, 0, len(s.Refused[k]))
		for c := range s.Refused[k] {
			codes = append(codes, c)
		}
		slices.Sort(codes)
		for _, c := range codes {
			_, _ = fmt.Fprintf(w, "synclane_operations_refused_total{kind=%q,code=%q} %d\n", k, c, s.Refused[k][c])
		}
	}
}
