package engine

import "github.com/synclane/synclane/engine/segments"

// The feature services the engine starts and stops. Transports and hosts
// call them directly; each is never nil (a feature that is off answers
// its own "not configured" error).

// Segments returns the segment service: downloads of the segments
// bootstraps hand out by reference, their counters and sweep.
func (e *Engine) Segments() *segments.Service { return e.segments }
