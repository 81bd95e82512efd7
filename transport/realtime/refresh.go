package realtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
)

// RefreshReport is what one Hub.RefreshScopes call did.
type RefreshReport struct {
	// Sessions counts the open sockets it re-resolved.
	Sessions int
	// Changed counts those whose registrations changed (a subscription
	// revoked, narrowed or widened, or the stored list replaced); each got
	// a catchup-required wake-up.
	Changed int
	// FailedClosed counts those that lost every registration because the
	// scope resolver failed for their actor or their client record could
	// not be read; each got a catchup-required wake-up too.
	FailedClosed int
}

// ErrHubNotStarted reports a RefreshScopes call before Start.
var ErrHubNotStarted = errors.New("realtime: the hub has no engine yet (Start)")

// RefreshScopes re-resolves, now, the registrations of this hub's open
// sockets of partition — of actorID's sockets only, when actorID is not
// empty — instead of waiting for each client's next sync round (SPEC
// §8.7, refreshScopes): a host calls it after it changed an actor's
// membership or grants, once its scope resolver answers the new way.
//
// For each socket it reads the client's record (the registered
// subscriptions) and resolves the actor's scopes again, as a connect does
// (one resolver call per actor), keeping the cursors the socket's deltas
// reached. Keys the socket no longer holds stop delivering deltas and
// presence at once (its presence there leaves, SPEC §8.6.3); a
// subscription left with no effective scope is revoked. It fails closed:
// a socket whose resolver call fails or whose client record cannot be
// read loses every registration, so it gets no further delta or presence
// until a round of its client registers it again. A socket whose
// registrations changed, or were dropped, gets a catchup-required
// wake-up, so that its client runs a round promptly (a revoked
// subscription's purge, SPEC §3.3, is driven by that round's answer). A
// socket that was connecting meanwhile registers nothing and is woken the
// same way.
//
// RefreshScopes returns when every matching socket was refreshed, or when
// ctx ends: the sockets not refreshed yet keep their registrations and
// the error is ctx's (call it again). A round of the client that resolved
// its scopes before the call but ends after it registers what it resolved
// (its own answer says the same); a later round, or a second call once
// the round ended, settles it. Only this hub's sockets are refreshed: on a
// cluster or several processes behind one database, call it on each
// process holding sockets of the partition.
func (h *Hub) RefreshScopes(ctx context.Context, partitionName, actorID string) (RefreshReport, error) {
	var rep RefreshReport
	eng := h.eng.Load()
	if eng == nil {
		return rep, ErrHubNotStarted
	}
	if partitionName == "" {
		return rep, fmt.Errorf("realtime: refresh scopes: empty partition name")
	}
	if verr := engine.ValidateIdentity(actorID, partitionName); verr != nil {
		return rep, fmt.Errorf("realtime: refresh scopes: %w", verr)
	}
	p := h.existing(partitionName)
	if p == nil {
		return rep, nil // no socket of the partition
	}
	type target struct {
		s   *session
		gen uint64
	}
	p.mu.Lock()
	p.refreshes++
	var targets []target
	for s := range p.sessions {
		if s.state == stateStarted && (actorID == "" || s.ident.ActorID == actorID) {
			targets = append(targets, target{s, s.gen})
		}
	}
	p.mu.Unlock()

	type resolution struct {
		allowed engine.Allowed
		ok      bool
	}
	resolved := map[string]resolution{} // by actor: one resolver call each
	type record struct {
		st  engine.ClientState
		err error
	}
	records := map[string]record{} // by client: one read for all its sockets
	for _, tg := range targets {
		s := tg.s
		res, done := resolved[s.ident.ActorID]
		if !done {
			res.allowed, res.ok = eng.Resolve(ctx, s.ident)
			if !res.ok && ctx.Err() != nil {
				return rep, fmt.Errorf("realtime: refresh scopes of %q: %w", partitionName, ctx.Err())
			}
			resolved[s.ident.ActorID] = res
		}
		var subs []sub
		failed := !res.ok
		if !failed {
			rec, read := records[s.clientID]
			if !read {
				rec.st, rec.err = eng.ClientState(ctx, s.ident, s.clientID)
				records[s.clientID] = rec
			}
			st, err := rec.st, rec.err
			switch {
			case err != nil && ctx.Err() != nil:
				return rep, fmt.Errorf("realtime: refresh scopes of %q: %w", partitionName, ctx.Err())
			case err != nil:
				h.log.Warn("realtime scope refresh: the client record could not be read; the socket loses its registrations",
					zap.String("partition", partitionName), zap.String("client_id", s.clientID), zap.Error(err))
				failed = true
			case st.ActorID != "" && st.ActorID != s.ident.ActorID:
				failed = true // rebound (only a rotation resets bindings): nothing of it is this socket's
			default:
				subs = refreshedSubs(st.Subscriptions, res.allowed, tg.s, p)
			}
		}
		p.mu.Lock()
		if s.state != stateStarted || s.gen != tg.gen {
			// Closed, or a round re-registered it meanwhile (with a
			// resolution of its own, newer than this one's start).
			p.mu.Unlock()
			continue
		}
		rep.Sessions++
		changed := failed || !sameRegistration(s.subs, subs)
		s.gen++
		p.register(s, subs)
		if changed {
			if failed {
				rep.FailedClosed++
			} else {
				rep.Changed++
			}
			if s.inRound {
				s.owe(max(s.highest, p.latest))
			} else {
				s.wake(ssp2.WakeCatchupRequired, max(s.highest, p.latest))
			}
		}
		p.mu.Unlock()
	}
	if rep.Changed > 0 || rep.FailedClosed > 0 {
		h.log.Info("realtime scopes refreshed", zap.String("partition", partitionName), zap.String("actor_id", actorID),
			zap.Int("sockets", rep.Sessions), zap.Int("changed", rep.Changed), zap.Int("failed_closed", rep.FailedClosed))
	}
	return rep, nil
}

// refreshedSubs derives a socket's registrations from its client's stored
// subscriptions and a fresh resolution, as a connect does, keeping the
// cursor (and readiness) the socket's own deltas reached for each
// subscription it still holds.
func refreshedSubs(stored []engine.StoredSubscription, allowed engine.Allowed, s *session, p *part) []sub {
	p.mu.Lock()
	cur := make(map[string]sub, len(s.subs))
	for _, x := range s.subs {
		cur[x.id] = x
	}
	p.mu.Unlock()
	subs := make([]sub, 0, len(stored))
	for _, ss := range stored {
		eff, revoked := engine.Effective(ss.Scopes, allowed, true)
		x := sub{id: ss.ID, table: ss.Table, cursor: ss.Cursor, active: !revoked}
		if !revoked {
			x.eff = eff
			x.ready = !ss.Pending && ss.Cursor >= 0
			if c, ok := cur[ss.ID]; ok && c.table == ss.Table && c.active {
				x.cursor, x.ready = max(x.cursor, c.cursor), c.ready
			}
		}
		subs = append(subs, x)
	}
	return subs
}

// sameRegistration reports whether two registrations hold the same
// subscriptions with the same effective scopes (cursors aside).
func sameRegistration(a, b []sub) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.id != y.id || x.table != y.table || x.active != y.active || !maps.EqualFunc(x.eff, y.eff, slices.Equal[[]string]) {
			return false
		}
	}
	return true
}
