package main

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// heapAfterGC returns the live heap after two full collections.
func heapAfterGC() uint64 {
	// Objects with finalizers (closed connections, files) need a cycle to
	// queue the finalizer, a moment for it to run and another cycle.
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heapSampler tracks the peak of the heap's object bytes (live and not yet
// swept) by sampling runtime/metrics, which does not stop the world.
type heapSampler struct {
	stop chan struct{}
	done sync.WaitGroup
	peak uint64
}

const heapObjectsMetric = "/memory/classes/heap/objects:bytes"

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: heapObjectsMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler(every time.Duration) *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), peak: heapObjects()}
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				h.peak = max(h.peak, heapObjects())
			}
		}
	}()
	return h
}

// Stop ends sampling and returns the peak heap object bytes seen.
func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	h.done.Wait()
	return max(h.peak, heapObjects())
}
