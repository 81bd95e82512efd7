package main

import (
	"math/bits"
	"time"
)

// histSubBits is the log2 of the number of linear sub-buckets per power of
// two: 7 gives 128 sub-buckets, i.e. a relative error under 0.8%.
const histSubBits = 7

const histSub = 1 << histSubBits

// Hist is a log-linear (HDR-style) histogram of non-negative durations in
// nanoseconds. Values below 2^(histSubBits+1) ns are recorded exactly;
// larger ones land in buckets whose width is under 1% of their value. The
// zero value is ready to use; it is not safe for concurrent use (record per
// goroutine and Merge).
type Hist struct {
	counts []uint64
	n      uint64
	sum    float64
	max    int64
}

func histIndex(v int64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - histSubBits - 1
	return (shift+1)*histSub + int(uint64(v)>>uint(shift)) - histSub
}

// histUpper returns the largest value mapped to bucket i.
func histUpper(i int) int64 {
	if i < 2*histSub {
		return int64(i)
	}
	shift := i/histSub - 1
	mant := int64(i%histSub + histSub)
	return (mant+1)<<uint(shift) - 1
}

// Record adds one duration.
func (h *Hist) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	i := histIndex(v)
	if i >= len(h.counts) {
		n := make([]uint64, i+1+histSub)
		copy(n, h.counts)
		h.counts = n
	}
	h.counts[i]++
	h.n++
	h.sum += float64(v)
	if v > h.max {
		h.max = v
	}
}

// Merge adds every sample of o to h.
func (h *Hist) Merge(o *Hist) {
	if len(o.counts) > len(h.counts) {
		n := make([]uint64, len(o.counts))
		copy(n, h.counts)
		h.counts = n
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Count returns the number of samples.
func (h *Hist) Count() uint64 { return h.n }

// Mean returns the mean sample.
func (h *Hist) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Max returns the largest sample.
func (h *Hist) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the q-quantile (0 < q ≤ 1): the upper bound of the
// bucket holding the ceil(q·n)-th smallest sample, capped at the maximum.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(histUpper(i), h.max))
		}
	}
	return time.Duration(h.max)
}
