package memory

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/synclane/synclane/storage"
)

// leaseTable holds the lease records of a database: partition → clientID
// → record. Its zero value is empty and ready.
type leaseTable struct {
	mu sync.Mutex
	m  map[string]map[string]storage.LeaseRecord
}

func cloneLease(r storage.LeaseRecord) *storage.LeaseRecord {
	r.AllowedScopes = bytes.Clone(r.AllowedScopes)
	r.MAC = bytes.Clone(r.MAC)
	return &r
}

// ready checks the handle is open and ensured.
func (s *Store) leaseReady(what string) error {
	s.mu.Lock()
	closed, sch := s.closed, s.sch
	s.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("memory: %s: %w", what, errClosed)
	case sch == nil:
		return fmt.Errorf("memory: %s: %w", what, storage.ErrSchemaNotEnsured)
	}
	return nil
}

// GetLease returns a copy of the lease record of clientID, or nil.
func (s *Store) GetLease(ctx context.Context, partition, clientID string) (*storage.LeaseRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.leaseReady("get lease"); err != nil {
		return nil, err
	}
	t := &s.d.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.m[partition][clientID]
	if !ok {
		return nil, nil
	}
	return cloneLease(r), nil
}

// FindLease returns a copy of the lease record with leaseID, or nil.
func (s *Store) FindLease(ctx context.Context, partition, leaseID string) (*storage.LeaseRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.leaseReady("find lease"); err != nil {
		return nil, err
	}
	t := &s.d.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.m[partition] {
		if r.LeaseID == leaseID {
			return cloneLease(r), nil
		}
	}
	return nil, nil
}

// SwapLease stores a copy of rec when the stored record's MAC is prevMAC
// (nil: none stored), under the table lock.
func (s *Store) SwapLease(ctx context.Context, partition string, rec storage.LeaseRecord, prevMAC []byte) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := s.leaseReady("swap lease"); err != nil {
		return false, err
	}
	if err := storage.CheckLease(partition, rec); err != nil {
		return false, fmt.Errorf("memory: swap lease: %w", err)
	}
	t := &s.d.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, ok := t.m[partition][rec.ClientID]
	if ok != (prevMAC != nil) || (ok && !bytes.Equal(cur.MAC, prevMAC)) {
		return false, nil
	}
	if t.m == nil {
		t.m = map[string]map[string]storage.LeaseRecord{}
	}
	if t.m[partition] == nil {
		t.m[partition] = map[string]storage.LeaseRecord{}
	}
	t.m[partition][rec.ClientID] = *cloneLease(rec)
	return true, nil
}
