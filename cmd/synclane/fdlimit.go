package main

import "go.uber.org/zap"

// fdRaise is what raiseFDLimit did to the open-file limit (RLIMIT_NOFILE).
type fdRaise struct {
	// Need is the limit serve asked for: the connection cap, the
	// descriptors the cap's refusals may hold, and the reserve.
	Need uint64
	// The soft and hard limits before and after (0: unknown).
	SoftBefore, HardBefore, SoftAfter, HardAfter uint64
	// Err is why a raise failed (EPERM raising the hard limit without
	// privilege); the limits after are still those the process has.
	Err error
}

// fdNeed is the open-file limit serve asks for when the connection cap is
// maxConnections (negative: no cap — the hard limit is asked for; 0: the
// largest cap it derives).
func fdNeed(maxConnections int) uint64 {
	switch {
	case maxConnections < 0:
		return 0 // raise the soft limit to the hard one only
	case maxConnections == 0:
		maxConnections = maxDerivedConnections
	}
	// connlimit: at most 64 refusals in progress beyond the cap, and the
	// listener's own descriptor.
	return uint64(maxConnections) + 65 + maxFDReserve
}

// log logs the limits once, at info (stable fields); a failed raise of the
// hard limit is a field, not a warning: the cap derived from the limit
// follows it, and a --max-connections above it is warned about by wrap.
func (r fdRaise) log(log *zap.Logger) {
	fields := []zap.Field{zap.Uint64("fd_soft_before", r.SoftBefore), zap.Uint64("fd_hard_before", r.HardBefore),
		zap.Uint64("fd_soft_after", r.SoftAfter), zap.Uint64("fd_hard_after", r.HardAfter), zap.Uint64("fd_needed", r.Need),
		zap.Bool("fd_raised", r.SoftAfter > r.SoftBefore)}
	if r.Err != nil {
		fields = append(fields, zap.String("fd_raise_error", r.Err.Error()))
	}
	log.Info("open-file limit", fields...)
}
