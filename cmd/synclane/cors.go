package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/synclane/synclane/transport/cors"
)

// corsConfig holds the CORS flags of serve: browser pages on the listed
// origins may call the protocol routes (see transport/cors).
type corsConfig struct {
	origins     originFlags
	credentials bool
	maxAge      time.Duration
	// policy is built by validate; nil when no --cors-origin is given.
	policy *cors.Policy
}

// originFlags collects repeatable --cors-origin flags.
type originFlags []string

func (o *originFlags) String() string { return strings.Join(*o, ",") }

// Set adds one origin, or several separated by commas (the form
// SYNCLANE_CORS_ORIGIN takes).
func (o *originFlags) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*o = append(*o, part)
		}
	}
	return nil
}

func corsFlags(fs *flag.FlagSet, c *corsConfig) {
	fs.Var(&c.origins, "cors-origin", `origin of browser pages allowed to call the sync, operations, realtime, segment and blob routes, exactly as browsers send it (https://app.example.com; repeatable, or comma-separated), or "*" for any origin without credentials; other origins get no CORS headers and their preflights and WebSocket upgrades 403 (off when unset: no CORS headers at all)`)
	fs.BoolVar(&c.credentials, "cors-credentials", false, "with --cors-origin: answer Access-Control-Allow-Credentials: true, so pages may send cookies (only a custom auth reading cookies needs it; not with \"*\")")
	fs.DurationVar(&c.maxAge, "cors-max-age", cors.DefaultMaxAge, "with --cors-origin: how long browsers may cache a preflight answer (Access-Control-Max-Age, whole seconds, 1s-24h; Chromium caps it at 2h)")
}

// validate builds the policy from the flags; given holds the flags set.
func (c *corsConfig) validate(given map[string]bool) error {
	if len(c.origins) == 0 {
		if given["cors-origin"] {
			return fmt.Errorf("--cors-origin is set but empty: name an origin such as https://app.example.com, or leave it unset")
		}
		if c.credentials || given["cors-max-age"] {
			return fmt.Errorf("--cors-credentials and --cors-max-age need --cors-origin")
		}
		return nil
	}
	p, err := cors.New(cors.Options{Origins: c.origins, AllowCredentials: c.credentials, MaxAge: c.maxAge})
	if err != nil {
		return fmt.Errorf("--cors-origin: %w", err)
	}
	c.policy = p
	return nil
}
