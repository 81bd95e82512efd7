package engine

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/actors"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// DefaultSlowRequest is the default Config.SlowRequest.
const DefaultSlowRequest = time.Second

// maxRejectEvents bounds the rejected-commit events one request emits (a
// request of many rejected commits reports the first ones and a count).
const maxRejectEvents = 4

// Events returns the engine's event ring (nil when Config.Events is unset;
// a nil ring accepts Emit). Features and transports publish to it.
func (e *Engine) Events() *events.Ring { return e.cfg.Events }

// lifecycleHook turns actor restarts and passivations into events (nil
// without a ring, so the actors runtime calls nothing).
func (e *Engine) lifecycleHook() func(string, actors.Lifecycle) {
	ring := e.cfg.Events
	if ring == nil {
		return nil
	}
	return func(p string, ev actors.Lifecycle) {
		switch ev {
		case actors.Restarted:
			ring.Emit(events.Event{Kind: events.ActorRestarted, Partition: p, Source: "actors",
				Message: "partition actor restarted from storage after a panic"})
		case actors.Passivated:
			ring.Emit(events.Event{Kind: events.ActorPassivated, Partition: p, Source: "actors",
				Message: "idle partition actor passivated"})
		case actors.Evicted:
			ring.Emit(events.Event{Kind: events.ActorPassivated, Partition: p, Source: "cluster",
				Message: "partition actor stopped: its partition moved to another cluster member"})
		}
	}
}

// emitSync reports a Sync call's noteworthy outcomes. Without a ring, or
// for a fast request whose commits were all accepted, it does nothing but
// two comparisons.
func (e *Engine) emitSync(id Identity, rep *Reply, err error, d time.Duration) {
	ring := e.cfg.Events
	if ring == nil {
		return
	}
	slow := e.cfg.SlowRequest
	if slow == 0 {
		slow = DefaultSlowRequest
	}
	if slow > 0 && d >= slow {
		ring.Emit(events.Event{Kind: events.SlowRequest, Partition: id.Partition, Actor: id.ActorID, Source: "engine",
			DurationMs: float64(d) / float64(time.Millisecond), Message: fmt.Sprintf("sync request took %s (threshold %s)", d.Round(time.Millisecond), slow)})
	}
	if err != nil {
		se := syncerr.As(err)
		kind := events.RequestFailed
		if se.Code == syncerr.SchemaNotReady {
			kind = events.GateRefused
		}
		ring.Emit(events.Event{Kind: kind, Partition: id.Partition, Actor: id.ActorID, Source: "engine",
			Code: string(se.Code), Message: se.Message})
		return
	}
	if rep == nil || rep.Rejected == 0 {
		return
	}
	n := 0
	for _, f := range rep.Frames {
		pr, ok := f.(*ssp2.PushResult)
		if !ok || pr.Status != ssp2.CommitRejected {
			continue
		}
		if n++; n > maxRejectEvents {
			break
		}
		ev := events.Event{Kind: events.PushRejected, Partition: id.Partition, Actor: id.ActorID, Source: "engine"}
		msg := "commit " + pr.ClientCommitID + " rejected"
		for _, r := range pr.Results {
			if r.Code != "" {
				ev.Code = r.Code
				msg += fmt.Sprintf(": operation %d: %s", r.OpIndex, r.Message)
				break
			}
		}
		if rep.Rejected > maxRejectEvents && n == maxRejectEvents {
			msg += fmt.Sprintf(" (%d rejected commits in this request; the first %d reported)", rep.Rejected, maxRejectEvents)
		}
		ev.Message = msg
		ring.Emit(ev)
	}
}

// PartitionLive reports whether the partition's actor is live (not
// passivated) and when a job was last routed to it (zero when the engine
// runs without passivation).
func (e *Engine) PartitionLive(part string) (live bool, lastJob time.Time) {
	return e.runtime.Live(part)
}

// RotateEpoch gives the partition a new log epoch through its actor
// (partition.RotateJob): every client of the partition bootstraps again.
// It returns the new epoch and emits an EpochRotated event.
func (e *Engine) RotateEpoch(ctx context.Context, part string) (string, error) {
	if verr := partition.ValidateIdentity("admin", part); verr != nil {
		return "", verr
	}
	j := partition.NewRotateJob(ctx)
	if e.cluster != nil {
		ownedSubmitter{e}.Submit(part, j) // only the owner rotates
	} else {
		e.runtime.Submit(part, j)
	}
	ep, err := j.Wait(ctx)
	if err != nil {
		return "", fmt.Errorf("engine: rotate epoch of %q: %w", part, err)
	}
	e.cfg.Logger.Info("partition log epoch rotated by an operator", zap.String("partition", part), zap.String("epoch", ep))
	e.cfg.Events.Emit(events.Event{Kind: events.EpochRotated, Partition: part, Source: "admin",
		Message: "log epoch rotated to " + ep + "; clients bootstrap again"})
	return ep, nil
}
