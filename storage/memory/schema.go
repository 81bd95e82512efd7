package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// EnsureSchema records sch as this handle's running schema. When the shared
// marker is below sch.Version it validates and installs every declaration
// (checkpoint row and fence) and raises the marker, all under the database
// lock, so a failed bump leaves nothing behind. At an equal marker a schema
// whose Fingerprint differs from the stored one fails with
// storage.ErrSchemaChanged. Rows written under an older
// schema read back padded with NULLs for columns added since.
func (s *Store) EnsureSchema(ctx context.Context, sch *schema.Schema, decls ...storage.CheckpointDeclaration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errClosed
	}
	d := s.d
	d.mu.Lock()
	if d.marker > sch.Version {
		m := d.marker
		d.mu.Unlock()
		return fmt.Errorf("memory: stored v%d, running v%d: %w", m, sch.Version, storage.ErrSchemaNewer)
	}
	if d.marker == sch.Version && d.fingerprint != "" && d.fingerprint != sch.Fingerprint() {
		d.mu.Unlock()
		return fmt.Errorf("memory: schema v%d: stored fingerprint %s, running %s: %w", sch.Version, d.fingerprint, sch.Fingerprint(), storage.ErrSchemaChanged)
	}
	if d.marker == sch.Version {
		d.fingerprint = sch.Fingerprint()
	}
	if d.marker < sch.Version {
		for _, dc := range decls {
			if err := dc.Validate(); err != nil {
				d.mu.Unlock()
				return fmt.Errorf("memory: ensure schema v%d: %w", sch.Version, err)
			}
		}
		now := time.Now().UnixMilli()
		for _, dc := range decls {
			d.declare(dc, now)
		}
		d.marker = sch.Version
		d.fingerprint = sch.Fingerprint()
	}
	pending := d.pending(sch.Version)
	d.mu.Unlock()

	s.mu.Lock()
	s.sch = sch
	s.mu.Unlock()
	if err := storage.CheckIncomplete(pending, decls); err != nil {
		return fmt.Errorf("memory: ensure schema v%d: %w", sch.Version, err)
	}
	return nil
}
