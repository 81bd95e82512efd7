package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkLogLayout runs each log layout's bare loop (layout.go: the
// push workload's rows, 64 writers, 32 commits per fsync'd transaction,
// the sqlite store's settings) for b.N commits and reports commits/s:
//
//	go test -run='^$' -bench=LogLayout -benchtime=60000x ./bench/
func BenchmarkLogLayout(b *testing.B) {
	const writers, batch = 64, 32
	for _, l := range logLayouts() {
		b.Run(l.name, func(b *testing.B) {
			left := int64(b.N)
			more := func() bool {
				left -= batch
				return left > -batch
			}
			b.ResetTimer()
			err := runLayout(context.Background(), filepath.Join(b.TempDir(), "layout.db"), l, writers, batch, more, func(int, time.Time) {})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}

// TestLogLayoutsRun runs every layout's loop for a few transactions and
// checks that each commits them all: the statements of every layout are
// valid and the idempotency lookups miss as they must.
func TestLogLayoutsRun(t *testing.T) {
	for _, l := range logLayouts() {
		t.Run(l.name, func(t *testing.T) {
			txs, commits := 0, 0
			more := func() bool { txs++; return txs <= 3 }
			err := runLayout(context.Background(), filepath.Join(t.TempDir(), "layout.db"), l, 4, 5, more,
				func(n int, _ time.Time) { commits += n })
			if err != nil {
				t.Fatal(err)
			}
			if commits != 15 {
				t.Errorf("%d commits, want 15", commits)
			}
		})
	}
}
