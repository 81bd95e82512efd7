package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/lease"
)

// validateLeases checks the lease options: a TTL within lease.MaxTTL; a
// key of at least lease.MinKeyBytes when given; with --postgres and a
// TTL, a key is required, because every process sharing the database
// must sign and verify with the same one (a per-process key would make
// each process refuse the others' leases).
func (c *serveConfig) validateLeases() error {
	if c.leaseTTL > lease.MaxTTL {
		return fmt.Errorf("--lease-ttl must be at most %s", lease.MaxTTL)
	}
	if c.leaseKey != "" && len(c.leaseKey) < lease.MinKeyBytes {
		return fmt.Errorf("--lease-key must be at least %d bytes", lease.MinKeyBytes)
	}
	if c.leaseTTL > 0 && c.leaseKey == "" && c.postgresURL != "" {
		return errors.New("--lease-ttl with --postgres needs --lease-key (or SYNCLANE_LEASE_KEY): every process sharing the database must sign leases with the same key")
	}
	return nil
}

// configureLeases turns auth leases on in cfg when --lease-ttl is set,
// with the --lease-key bytes or, on SQLite without one, the key kept in
// <data>/lease.key (created on first use, mode 0600).
func (c *serveConfig) configureLeases(cfg *engine.Config, log *zap.Logger) error {
	if c.leaseTTL == 0 {
		return nil
	}
	key := []byte(c.leaseKey)
	if len(key) == 0 {
		path := filepath.Join(c.data, lease.KeyFileName)
		k, created, err := lease.LoadOrCreateKeyFile(path)
		if err != nil {
			return err
		}
		if created {
			log.Info("created the lease signing key", zap.String("path", path))
		}
		key = k
	}
	cfg.Leases.TTL, cfg.Leases.Key = c.leaseTTL, key
	log.Info("auth leases on", zap.Duration("ttl", c.leaseTTL))
	return nil
}
