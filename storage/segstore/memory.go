package segstore

import (
	"bytes"
	"context"
	"sync"
)

// Memory is an in-process Store (tests, the memory storage backend).
type Memory struct {
	mu   sync.Mutex
	keys map[[2]string]*memEntry // (partition, key)
}

type memEntry struct {
	meta Meta
	data []byte // nil once swept
}

// NewMemory returns an empty in-memory Store.
func NewMemory() *Memory { return &Memory{keys: map[[2]string]*memEntry{}} }

// Lookup implements Store.
func (s *Memory) Lookup(_ context.Context, partition, key string, nowMs int64) (Meta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[[2]string{partition, key}]
	if e == nil || e.data == nil || e.meta.ExpiresAtMs <= nowMs {
		return Meta{}, ErrNotFound
	}
	return e.meta, nil
}

// Put implements Store.
func (s *Memory) Put(_ context.Context, m Meta, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{m.Partition, m.Key}
	if e := s.keys[k]; e != nil && e.data != nil && e.meta.ExpiresAtMs > m.CreatedAtMs {
		return nil
	}
	// Content-addressed: an entry of bytes already held shares them.
	for _, e := range s.keys {
		if e.data != nil && e.meta.ID == m.ID {
			s.keys[k] = &memEntry{meta: m, data: e.data}
			return nil
		}
	}
	s.keys[k] = &memEntry{meta: m, data: bytes.Clone(data)} // Put keeps no reference to data
	return nil
}

// Held implements Evicter.
func (s *Memory) Held(context.Context) ([]Held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	by := map[string]*Held{}
	var out []Held
	for _, e := range s.keys {
		if e.data == nil {
			continue
		}
		h := by[e.meta.ID]
		if h == nil {
			h = &Held{ID: e.meta.ID, Bytes: int64(len(e.data))}
			by[e.meta.ID] = h
		}
		h.CreatedAtMs = max(h.CreatedAtMs, e.meta.CreatedAtMs)
		h.ExpiresAtMs = max(h.ExpiresAtMs, e.meta.ExpiresAtMs)
	}
	for _, h := range by {
		out = append(out, *h)
	}
	return out, nil
}

// Evict implements Evicter.
func (s *Memory) Evict(_ context.Context, ids []string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	drop := map[string]bool{}
	for _, id := range ids {
		drop[id] = true
	}
	n := map[string]bool{}
	for _, e := range s.keys {
		if e.data != nil && drop[e.meta.ID] {
			e.data = nil
			n[e.meta.ID] = true
		}
	}
	return len(n), nil
}

// Get implements Store.
func (s *Memory) Get(_ context.Context, partition, id string, nowMs int64) ([]Meta, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var metas []Meta
	var data []byte
	known := false
	for k, e := range s.keys {
		if (partition != "" && k[0] != partition) || e.meta.ID != id {
			continue
		}
		known = true
		if e.data != nil && e.meta.ExpiresAtMs > nowMs {
			metas, data = append(metas, e.meta), e.data
		}
	}
	switch {
	case len(metas) > 0:
		return metas, data, nil
	case known:
		return nil, nil, ErrExpired
	}
	return nil, nil, ErrNotFound
}

// Sweep implements Store.
func (s *Memory) Sweep(_ context.Context, nowMs, forgetBeforeMs int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, e := range s.keys {
		if e.meta.ExpiresAtMs > nowMs {
			continue
		}
		if e.data != nil {
			e.data = nil
			n++
		}
		if e.meta.ExpiresAtMs < forgetBeforeMs {
			delete(s.keys, k)
		}
	}
	return n, nil
}

// Close implements Store.
func (s *Memory) Close() error { return nil }
