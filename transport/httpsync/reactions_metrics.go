package httpsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/reactions"
)

// writeReactionMetrics renders the durable-reaction counters of this
// process and the queue's sizes (nothing when reactions are off; the
// sizes are left out when the store cannot be read within 2s).
func writeReactionMetrics(ctx context.Context, w io.Writer, eng *engine.Engine) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := eng.Reactions().Stats(cctx)
	if errors.Is(err, reactions.ErrNoReactions) {
		return
	}
	for _, c := range []struct {
		name, help string
		v          uint64
	}{
		{"synclane_reactions_delivered_total", "Reactions this process delivered.", s.Delivered},
		{"synclane_reactions_retried_total", "Failed reaction attempts this process rescheduled.", s.Retried},
		{"synclane_reactions_dead_lettered_total", "Reactions this process dead-lettered after their last attempt.", s.DeadLettered},
	} {
		_, _ = fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", c.name, c.help, c.name, c.name, c.v)
	}
	if err != nil {
		return
	}
	_, _ = fmt.Fprintf(w, "# HELP synclane_reactions_pending Stored reactions waiting for delivery (all processes).\n# TYPE synclane_reactions_pending gauge\nsynclane_reactions_pending %d\n", s.Pending)
	_, _ = fmt.Fprintf(w, "# HELP synclane_reactions_dead Dead-lettered reactions stored (all processes).\n# TYPE synclane_reactions_dead gauge\nsynclane_reactions_dead %d\n", s.Dead)
}
