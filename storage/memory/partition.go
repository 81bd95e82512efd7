package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/synclane/synclane/storage"
)

// part is one partition. lock is its write lock (a one-slot semaphore so
// waiting honours context cancellation); mu guards the committed state.
type part struct {
	lock chan struct{}

	mu      sync.RWMutex
	info    storage.PartitionInfo
	rows    map[string]map[string]storage.RowRecord // table -> rowID -> row
	commits []storage.CommitRecord                  // commits[i].Seq == info.HorizonSeq+i+1
	// scopeIdx maps table -> "var\x00value" -> ascending seqs of commits
	// with at least one change of table carrying that scope value.
	scopeIdx map[string]map[string][]int64
	idem     map[idemKey]idemEntry
	clients  map[string]storage.ClientRecord
	// tombs holds the tombstones: table -> rowID -> seq of the deleting
	// commit (SPEC §2.2).
	tombs map[string]map[string]int64
}

func newPart(name string) *part {
	return &part{
		lock:     make(chan struct{}, 1),
		info:     storage.PartitionInfo{Partition: name},
		rows:     map[string]map[string]storage.RowRecord{},
		scopeIdx: map[string]map[string][]int64{},
		idem:     map[idemKey]idemEntry{},
		clients:  map[string]storage.ClientRecord{},
		tombs:    map[string]map[string]int64{},
	}
}

// create makes the partition exist with a fresh epoch; p.mu must be held.
func (p *part) create() {
	if p.info.Exists {
		return
	}
	p.info.Exists = true
	p.info.LogEpoch = storage.NewLogEpoch()
}

// TouchPartition returns the partition's entry, creating it on first
// contact with a fresh epoch (storage.NewLogEpoch). A name
// storage.CheckPartition refuses is not created.
func (s *Store) TouchPartition(ctx context.Context, partition string, nowMs int64) (storage.PartitionInfo, error) {
	if err := ctx.Err(); err != nil {
		return storage.PartitionInfo{}, err
	}
	if err := storage.CheckPartition(partition); err != nil {
		return storage.PartitionInfo{}, fmt.Errorf("memory: touch partition: %w", err)
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return storage.PartitionInfo{}, fmt.Errorf("memory: touch partition %q: %w", partition, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.create()
	return p.info, nil
}

// ReadPartition returns the committed entry; Exists is false if the
// partition was never created.
func (s *Store) ReadPartition(ctx context.Context, partition string) (storage.PartitionInfo, error) {
	if err := ctx.Err(); err != nil {
		return storage.PartitionInfo{}, err
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return storage.PartitionInfo{}, fmt.Errorf("memory: read partition %q: %w", partition, err)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.info, nil
}

// RotateLogEpoch takes the partition's write lock (honouring ctx while
// waiting), creates the partition if needed, sets a new epoch, marks it
// required and deletes the partition's client records (and with them the
// clientID bindings). A name storage.CheckPartition refuses is refused.
func (s *Store) RotateLogEpoch(ctx context.Context, partition string, nowMs int64) (string, error) {
	if err := storage.CheckPartition(partition); err != nil {
		return "", fmt.Errorf("memory: rotate epoch: %w", err)
	}
	_, p, err := s.schemaAndPart(partition)
	if err != nil {
		return "", fmt.Errorf("memory: rotate epoch of %q: %w", partition, err)
	}
	if err := p.acquire(ctx); err != nil {
		return "", fmt.Errorf("memory: rotate epoch of %q: %w", partition, err)
	}
	defer p.release()
	ep := storage.NewLogEpoch()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.info.Exists = true
	p.info.LogEpoch = ep
	p.info.EpochRequired = true
	p.clients = map[string]storage.ClientRecord{}
	return ep, nil
}

// acquire takes the partition's write lock, waiting until it is free or
// ctx ends.
func (p *part) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case p.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release releases the partition's write lock.
func (p *part) release() { <-p.lock }
