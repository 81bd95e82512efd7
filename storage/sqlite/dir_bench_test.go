package sqlite_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkDirReadServeGate measures the serve gate read of a partition
// with K files: its own file's gate and the pending checkpoints of the
// K-1 others.
func BenchmarkDirReadServeGate(b *testing.B) {
	for _, k := range []int{1, 2, 4, 8} {
		b.Run("files="+strconv.Itoa(k), func(b *testing.B) {
			_, be, _ := openDir(b, b.TempDir(), k)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := be.Checkpoints.ReadServeGate(ctx, "p", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDirPush measures durable commits/s of 48 concurrent writers
// (one single-row commit per push transaction, each partition's writes
// serialized as the partition actor serializes them) over P partitions
// of a K-file directory: the storage's side of the partitions bench.
func BenchmarkDirPush(b *testing.B) {
	for _, parts := range []int{1, 1000} {
		for _, k := range []int{1, 2, 4, 8} {
			b.Run("partitions="+strconv.Itoa(parts)+"/files="+strconv.Itoa(k), func(b *testing.B) {
				_, be, items := openDir(b, b.TempDir(), k)
				ctx := b.Context()
				const workers = 48
				locks := make([]sync.Mutex, parts)
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							n := next.Add(1) - 1
							if n >= int64(b.N) {
								return
							}
							pi := int(n) % parts
							locks[pi].Lock()
							_, err := pushOne(ctx, be, items, "part-"+strconv.Itoa(pi), "row-"+strconv.Itoa(w), "c-"+strconv.FormatInt(n, 10))
							locks[pi].Unlock()
							if err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
			})
		}
	}
}

// BenchmarkDirClaimBlob measures a push transaction that claims one blob,
// for a partition of the home file (the claim is a statement of the push)
// and of another file (the claim is a write transaction of the home file
// of its own), one push at a time.
func BenchmarkDirClaimBlob(b *testing.B) {
	for _, f := range []int{0, 1} {
		b.Run("file="+strconv.Itoa(f), func(b *testing.B) {
			_, be, _ := openDir(b, b.TempDir(), 2)
			ctx := b.Context()
			const blob = "sha256:00000000000000000000000000000000000000000000000000000000000000aa"
			if _, err := be.Blobs.BeginBlobUpload(ctx, blob, 1); err != nil {
				b.Fatal(err)
			}
			if err := be.Blobs.CompleteBlobUpload(ctx, blob, 10, "text/plain", 1); err != nil {
				b.Fatal(err)
			}
			p := partitionIn(f, 2, "claim")
			var n int64
			b.ReportAllocs()
			for b.Loop() {
				n++
				tx, err := be.Log.BeginPush(ctx, p)
				if err != nil {
					b.Fatal(err)
				}
				if ok, err := tx.ClaimBlob(ctx, blob, n); err != nil || !ok {
					b.Fatalf("ClaimBlob = %v, %v", ok, err)
				}
				if err := tx.SetRowBlobs(ctx, "items", "r", map[string]string{"project": "p1"}, []string{blob}); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
