package main

import (
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"

	"go.uber.org/zap"

	"github.com/synclane/synclane/transport/connlimit"
	"github.com/synclane/synclane/transport/realtime"
)

// Connection caps of `synclane serve` (issue 31: one client must not take
// the connections and sockets meant for everyone).
const (
	// maxFDReserve is the most file descriptors kept out of the derived
	// --max-connections for everything that is not a client connection:
	// database files (SQLite's database, WAL and shared-memory files, per
	// pooled connection), the PostgreSQL pool, blob and segment files,
	// logs, cluster links, the admin and debug listeners. Under a limit of
	// 4,096 the reserve is a quarter of the limit.
	maxFDReserve = 1024
	// maxDerivedConnections caps the derived --max-connections however
	// high the descriptor limit is: each idle connection costs memory
	// (about 20 KiB), and every request may hold its first 64 KiB of body
	// outside the body budget.
	maxDerivedConnections = 65_536
)

// connLimitConfig holds the connection and socket caps.
type connLimitConfig struct {
	maxConnections      int // as given: 0 derives it, negative is none
	perClient, perActor int // realtime sockets per clientId and per actor

	// Resolved by validate.
	effective int    // the cap applied (0: none)
	source    string // "flag", "fd_limit", "none"
	fdLimit   uint64 // RLIMIT_NOFILE soft limit (0: unknown)
	reserve   int
	clampedWS int  // --max-websockets before it was clamped to the cap (0: not clamped)
	overLimit bool // --max-connections given above the descriptor limit minus the reserve
	// listener is set by wrap, before the server serves (and so before
	// a scrape can reach connCollector).
	listener *connlimit.Listener
	// fdLimitFn reads the descriptor limit (nil: raise it to what the cap
	// needs, then read it: raiseFDLimit, fdLimit); tests set it.
	fdLimitFn func() uint64
	// fdRaise is what validate did to the descriptor limit (logged by
	// wrap; nil when fdLimitFn was set).
	fdRaise *fdRaise
}

func connLimitFlags(fs *flag.FlagSet, c *connLimitConfig) {
	fs.IntVar(&c.maxConnections, "max-connections", 0, fmt.Sprintf("most open HTTP connections of the public listener, realtime sockets included; at the cap the oldest idle keep-alive connection is closed to admit a new one, else the new one gets 503 sync.rate_limited (0: the file-descriptor limit minus a reserve of up to %d, at most %d; negative: no cap)", maxFDReserve, maxDerivedConnections))
	fs.IntVar(&c.perClient, "max-websockets-per-client", realtime.DefaultMaxConnectionsPerClient, "most realtime sockets of one clientId; more upgrades get 429 sync.websocket_connection_limit (0: the default; negative: no cap)")
	fs.IntVar(&c.perActor, "max-websockets-per-actor", realtime.DefaultMaxConnectionsPerActor, "most realtime sockets of one authenticated actor; more upgrades get 429 sync.websocket_connection_limit (0: the default; negative: no cap)")
}

// fdReserve is the descriptors kept out of the derived cap under limit.
func fdReserve(limit uint64) int {
	if limit >= 4*maxFDReserve {
		return maxFDReserve
	}
	return int(limit / 4)
}

// validate raises the descriptor limit to what the connection cap needs
// (as far as the process may: raiseFDLimit), resolves the cap from the
// flags and the descriptor limit, and checks --max-websockets against it: every socket is a
// connection, so a --max-websockets given above the cap is refused; the
// default one is clamped to the cap (logged at start: a warning when the
// cap is the user's --max-connections, info when it is derived from the
// descriptor limit, as on most default starts).
func (c *connLimitConfig) validate(given map[string]bool, maxWebsockets *int) error {
	if c.fdLimitFn != nil {
		c.fdLimit = c.fdLimitFn()
	} else {
		r := raiseFDLimit(fdNeed(c.maxConnections))
		c.fdRaise = &r
		c.fdLimit = fdLimit()
	}
	c.reserve = fdReserve(c.fdLimit)
	switch {
	case c.maxConnections > 0:
		c.effective, c.source = c.maxConnections, "flag"
		c.overLimit = c.fdLimit > 0 && uint64(c.maxConnections) > c.fdLimit-uint64(c.reserve)
	case c.maxConnections < 0:
		c.effective, c.source = 0, "none"
	default:
		c.effective, c.source = maxDerivedConnections, "fd_limit"
		if c.fdLimit > 0 {
			c.effective = int(min(c.fdLimit-uint64(c.reserve), maxDerivedConnections, math.MaxInt32))
		}
		if c.effective < 1 {
			return fmt.Errorf("the file-descriptor limit (ulimit -n) is %d: too low to serve; raise it, or set --max-connections", c.fdLimit)
		}
	}
	if c.effective > 0 && *maxWebsockets > c.effective {
		if given["max-websockets"] {
			from := "--max-connections"
			if c.source == "fd_limit" {
				from = fmt.Sprintf("--max-connections (derived: file-descriptor limit %d minus a reserve of %d)", c.fdLimit, c.reserve)
			}
			return fmt.Errorf("--max-websockets %d exceeds %s %d: every realtime socket is an open connection; raise ulimit -n or --max-connections, or lower --max-websockets", *maxWebsockets, from, c.effective)
		}
		c.clampedWS, *maxWebsockets = *maxWebsockets, c.effective
	}
	return nil
}

// hubOptions sets the hub's per-client and per-actor caps.
func (c *connLimitConfig) hubOptions(o *realtime.Options) {
	o.MaxConnectionsPerClient, o.MaxConnectionsPerActor = c.perClient, c.perActor
}

// wrap caps ln's connections, tracks srv's idle connections for eviction,
// and logs the caps chosen (info, stable fields) and any clamp of the
// default --max-websockets: a warning only when the user's own
// --max-connections forced it; lowered to the cap derived from the
// descriptor limit (the default start) it is the info line's
// max_websockets_default field, nothing to act on.
func (c *connLimitConfig) wrap(ln net.Listener, srv *http.Server, maxWebsockets int, log *zap.Logger) net.Listener {
	cl := connlimit.New(ln, connlimit.Options{Max: c.effective, Logger: log.Named("connlimit")})
	prev := srv.ConnState
	srv.ConnState = func(nc net.Conn, st http.ConnState) {
		cl.ConnState(nc, st)
		if prev != nil {
			prev(nc, st)
		}
	}
	c.listener = cl
	if c.fdRaise != nil {
		c.fdRaise.log(log)
	}
	fields := []zap.Field{zap.Int("max_connections", c.effective), zap.String("max_connections_source", c.source),
		zap.Uint64("fd_limit", c.fdLimit), zap.Int("fd_reserve", c.reserve), zap.Int("max_websockets", maxWebsockets),
		zap.Int("max_websockets_per_client", c.perClient), zap.Int("max_websockets_per_actor", c.perActor),
		zap.Duration("http_idle_timeout", srv.IdleTimeout)}
	if c.clampedWS > 0 && c.source != "flag" {
		fields = append(fields, zap.Int("max_websockets_default", c.clampedWS))
	}
	log.Info("connection limits", fields...)
	if c.clampedWS > 0 && c.source == "flag" {
		log.Warn("--max-websockets lowered to --max-connections: every realtime socket is an open connection",
			zap.Int("max_websockets_default", c.clampedWS), zap.Int("max_websockets", maxWebsockets), zap.Int("max_connections", c.effective))
	}
	if c.overLimit {
		log.Warn("--max-connections is above the file-descriptor limit minus the reserve: at that many connections accept fails and the database and blob files may not open",
			zap.Int("max_connections", c.effective), zap.Uint64("fd_limit", c.fdLimit), zap.Int("fd_reserve", c.reserve))
	}
	return cl
}
