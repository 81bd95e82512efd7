package s3blob

import (
	"context"
	"sync"
)

// partPool hands out part buffers: at most max of size bytes exist at
// once, so the uploads of one Store hold at most max*size bytes of blob
// bodies. A buffer is allocated the first time it is needed and reused
// after that; an upload that finds every buffer taken waits for one (or
// for its context to end).
type partPool struct {
	size int
	free chan []byte
	mu   sync.Mutex
	made int // buffers allocated so far, at most cap(free)
	wait int // uploads waiting for a buffer (tests and metrics)
}

func newPartPool(size, max int) *partPool {
	return &partPool{size: size, free: make(chan []byte, max)}
}

// get returns a buffer of p.size bytes; the caller returns it with put.
func (p *partPool) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.free:
		return b, nil
	default:
	}
	p.mu.Lock()
	if p.made < cap(p.free) {
		p.made++
		p.mu.Unlock()
		return make([]byte, p.size), nil
	}
	p.wait++
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.wait--; p.mu.Unlock() }()
	select {
	case b := <-p.free:
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// put returns a buffer taken with get.
func (p *partPool) put(b []byte) { p.free <- b }

// waiting returns the number of uploads waiting for a buffer.
func (p *partPool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wait
}
