package main

import "github.com/synclane/synclane/actors"

// actorStats returns the engine's actor counters, or nil for a remote
// server.
func actorStats(t *Target) *actors.Stats {
	if t.Engine == nil {
		return nil
	}
	s := t.Engine.ActorStats()
	return &s
}
