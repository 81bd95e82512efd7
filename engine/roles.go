package engine

import (
	"fmt"
	"strings"
)

// featureRoles lists, for each feature a Config can turn on, the storage
// role (a storage.Backend field) it runs on and whether cfg turns it on.
// New refuses a Config that turns on a feature whose role its Backend
// lacks, so a backend without a role fails at start, never with a
// fallback or a refusal at request time.
func featureRoles(cfg Config) []struct {
	feature, role string
	on            bool
} {
	queries := cfg.Operations.Registry != nil && len(cfg.Operations.Registry.QueryIDs()) > 0
	return []struct {
		feature, role string
		on            bool
	}{
		{"blobs (Config.Blobs.Store)", "Blobs", cfg.Blobs.Store != nil},
		{"registered remote queries (Config.Operations)", "Queries", queries},
		{"durable reactions (Config.Reactions.Handlers)", "Reactions", len(cfg.Reactions.Handlers) > 0},
		{"auth leases (Config.Leases.TTL)", "Leases", cfg.Leases.TTL != 0},
		{"the maintenance loop (Config.Retention.Interval)", "Retention", cfg.Retention.Interval > 0},
	}
}

// checkRoles returns an error naming every required role cfg.Backend
// lacks and every configured feature whose role it lacks, or nil.
func checkRoles(cfg Config) error {
	if err := cfg.Backend.CheckRequired(); err != nil {
		return fmt.Errorf("engine: Config.Backend: %w", err)
	}
	var missing []string
	for _, f := range featureRoles(cfg) {
		if f.on && !cfg.Backend.Has(f.role) {
			missing = append(missing, fmt.Sprintf("%s needs the storage role %s", f.feature, f.role))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("engine: the storage backend lacks a role a configured feature needs: %s", strings.Join(missing, "; "))
	}
	return nil
}
