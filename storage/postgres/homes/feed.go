package homes

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Subscribe implements the engine's commit feed over every home: each
// home's LISTEN/NOTIFY notifier (postgres.Store.Subscribe), run by a
// goroutine of this call that subscribes again, with backoff, when its
// home's notifier fails, so a home that cannot be reached never stops the
// others' reports. fn is called one call at a time. Subscribe returns
// ctx's error once ctx ends and every home's goroutine has returned.
func (h *Homes) Subscribe(ctx context.Context, fn func(partition string, maxSeq int64)) error {
	var mu sync.Mutex
	one := func(partition string, maxSeq int64) {
		mu.Lock()
		defer mu.Unlock()
		fn(partition, maxSeq)
	}
	var wg sync.WaitGroup
	for _, hm := range h.homes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			backoff := 100 * time.Millisecond
			for {
				err := hm.st.Subscribe(ctx, one)
				if ctx.Err() != nil {
					return
				}
				h.log.Warn("homes: commit feed of a home failed; subscribing again", zap.String("home", hm.name), zap.Error(err), zap.Duration("backoff", backoff))
				t := time.NewTimer(backoff)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				backoff = min(2*backoff, 5*time.Second)
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}
