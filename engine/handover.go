package engine

import (
	"context"

	"go.uber.org/zap"

	"github.com/synclane/synclane/partition"
)

// writeBackForRelease serves a Release call for partition p that this
// member still owns by its view: its live actor (none: nothing is
// buffered) writes back the client records it buffered, after the jobs
// already routed to it and under its ownership generation
// (partition.WriteBackJob), and it returns once that is done or ctx ends.
// The caller then claims the partition with those records in storage, so
// the actor it starts reads them. The records this member's actor buffers
// after that (it serves until its view catches up or the fence refuses
// it) are handed over once the fence refuses their write-back (see
// storage.ClientHandOver).
func (e *Engine) writeBackForRelease(ctx context.Context, p string) {
	if live, _ := e.runtime.Live(p); !live {
		return
	}
	j := partition.NewWriteBackJob(ctx)
	e.runtime.Submit(p, j)
	left, err := j.Wait(ctx)
	if err != nil || left > 0 {
		e.cfg.Logger.Debug("writing back client records for a release did not finish", zap.String("partition", p),
			zap.Int("still_buffered", left), zap.Error(err))
	}
}
