package segstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
)

// Memory is an in-process Store (tests, the memory storage backend): one
// record per segment id holding the bytes and the publications, under one
// mutex (so a publication merges into the record it read: none is lost).
type Memory struct {
	mu   sync.Mutex
	segs map[string]*memSegment // id → record
	keys map[[2]string]string   // (partition, key) → id of its publication
}

// memSegment is the record of one segment id.
type memSegment struct {
	data  []byte            // nil once the bytes were dropped (swept, evicted)
	forms map[string][]byte // encoding → encoded form; dropped with data
	pubs  map[[2]string]*Meta
}

// drop drops the segment's bytes and forms.
func (g *memSegment) drop() { g.data, g.forms = nil, nil }

// formBytes is the size of the segment's forms.
func (g *memSegment) formBytes() int64 {
	var n int64
	for _, f := range g.forms {
		n += int64(len(f))
	}
	return n
}

// NewMemory returns an empty in-memory Store.
func NewMemory() *Memory {
	return &Memory{segs: map[string]*memSegment{}, keys: map[[2]string]string{}}
}

func (g *memSegment) live(m *Meta, nowMs int64) bool { return g.data != nil && m.ExpiresAtMs > nowMs }

// Lookup implements Store.
func (s *Memory) Lookup(_ context.Context, partition, key string, nowMs int64) (Meta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{partition, key}
	g := s.segs[s.keys[k]]
	if g == nil || g.pubs[k] == nil || !g.live(g.pubs[k], nowMs) {
		return Meta{}, ErrNotFound
	}
	return *g.pubs[k], nil
}

// Put implements Store.
func (s *Memory) Put(_ context.Context, m Meta, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{m.Partition, m.Key}
	if id, ok := s.keys[k]; ok {
		old := s.segs[id]
		if old.live(old.pubs[k], m.CreatedAtMs) {
			return nil
		}
		s.unpublish(k, id)
	}
	g := s.segs[m.ID]
	switch {
	case g == nil:
		g = &memSegment{pubs: map[[2]string]*Meta{}}
		s.segs[m.ID] = g
	case g.data != nil && !bytes.Equal(g.data, data):
		return fmt.Errorf("segstore: put %s: %w", m.ID, ErrCollision)
	}
	if g.data == nil {
		g.data = bytes.Clone(data) // Put keeps no reference to data
	}
	g.pubs[k] = &m
	s.keys[k] = m.ID
	return nil
}

// unpublish removes the publication k of segment id, and the segment's
// record with its last publication.
func (s *Memory) unpublish(k [2]string, id string) {
	delete(s.keys, k)
	g := s.segs[id]
	delete(g.pubs, k)
	if len(g.pubs) == 0 {
		delete(s.segs, id)
	}
}

// Held implements Evicter.
func (s *Memory) Held(context.Context) ([]Held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Held
	for id, g := range s.segs {
		if g.data == nil {
			continue
		}
		h := Held{ID: id, Bytes: int64(len(g.data)) + g.formBytes()}
		for _, m := range g.pubs {
			h.CreatedAtMs = max(h.CreatedAtMs, m.CreatedAtMs)
			h.ExpiresAtMs = max(h.ExpiresAtMs, m.ExpiresAtMs)
		}
		out = append(out, h)
	}
	return out, nil
}

// Evict implements Evicter.
func (s *Memory) Evict(_ context.Context, ids []string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, id := range ids {
		if g := s.segs[id]; g != nil && g.data != nil {
			g.drop()
			n++
		}
	}
	return n, nil
}

// Get implements Store.
func (s *Memory) Get(_ context.Context, partition, id string, nowMs int64) ([]Publication, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.segs[id]
	if g == nil {
		return nil, nil, ErrNotFound
	}
	var pubs []Publication
	live := false
	for k, m := range g.pubs {
		if partition != "" && k[0] != partition {
			continue
		}
		p := Publication{Meta: *m, Live: g.live(m, nowMs)}
		live = live || p.Live
		pubs = append(pubs, p)
	}
	switch {
	case len(pubs) == 0:
		return nil, nil, ErrNotFound
	case live:
		return pubs, g.data, nil
	}
	return pubs, nil, nil
}

// Sweep implements Store.
func (s *Memory) Sweep(_ context.Context, nowMs, forgetBeforeMs int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, g := range s.segs {
		live := false
		for k, m := range g.pubs {
			live = live || m.ExpiresAtMs > nowMs
			if m.ExpiresAtMs < forgetBeforeMs {
				s.unpublish(k, id)
			}
		}
		if !live && g.data != nil {
			g.drop()
			n++
		}
	}
	return n, nil
}

// PutForm implements FormStore; it keeps data itself.
func (s *Memory) PutForm(_ context.Context, id, enc string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.segs[id]
	if g == nil || g.data == nil {
		return ErrNotFound
	}
	if _, ok := g.forms[enc]; ok {
		return nil
	}
	if g.forms == nil {
		g.forms = map[string][]byte{}
	}
	g.forms[enc] = data
	return nil
}

// OpenForm implements FormStore: the form in memory, never a file.
func (s *Memory) OpenForm(_ context.Context, id, enc string) ([]byte, *os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.segs[id]
	if g == nil || g.forms[enc] == nil {
		return nil, nil, ErrNotFound
	}
	return g.forms[enc], nil, nil
}

// DropForm implements FormStore.
func (s *Memory) DropForm(_ context.Context, id, enc string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.segs[id]; g != nil {
		delete(g.forms, enc)
	}
	return nil
}

// Close implements Store.
func (s *Memory) Close() error { return nil }
