package s3blob_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/blobstore/s3blob"
)

// BenchmarkS3ConcurrentPuts runs 20 concurrent uploads of a 20 MiB blob
// per iteration against gofakes3 on loopback, with the fake discarding
// every uploaded body (so the heap measured is the store's, not the
// fake's), and reports the peak heap above the baseline while they run
// (peak-MiB) and per upload (peak-MiB/upload). Run with
//
//	go test -run '^$' -bench S3ConcurrentPuts -benchtime 3x ./storage/blobstore/s3blob/
func BenchmarkS3ConcurrentPuts(b *testing.B) {
	const uploads, size = 20, 20 << 20
	data := make([]byte, size)
	_, _ = rand.Read(data)
	id := blobstore.IDOf(data)
	for _, buffers := range []int{s3blob.DefaultUploadBuffers, uploads} {
		b.Run(fmt.Sprintf("buffers=%d", buffers), func(b *testing.B) {
			be := s3mem.New()
			if err := be.CreateBucket("blobs"); err != nil {
				b.Fatal(err)
			}
			h := gofakes3.New(be).Server()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") == "" {
					_, _ = io.Copy(io.Discard, r.Body)                                // keep the fake's memory out of the figure
					r.Body, r.ContentLength = io.NopCloser(strings.NewReader("x")), 1 // gofakes3 refuses empty bodies
					r.Header.Set("Content-Length", "1")
				}
				h.ServeHTTP(w, r)
			}))
			defer srv.Close()
			s, err := s3blob.New(b.Context(), s3blob.Options{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: "blobs",
				Region: "us-east-1", AccessKey: "k", SecretKey: "s", Insecure: true, UploadBuffers: buffers})
			if err != nil {
				b.Fatal(err)
			}
			var peak uint64
			b.ResetTimer()
			for range b.N {
				runtime.GC()
				base := heapBytes()
				stop := make(chan struct{})
				sampled := make(chan uint64)
				go func() { // sampler: owned by this iteration, stopped below
					var max uint64
					t := time.NewTicker(time.Millisecond)
					defer t.Stop()
					for {
						if h := heapBytes(); h > max {
							max = h
						}
						select {
						case <-stop:
							sampled <- max
							return
						case <-t.C:
						}
					}
				}()
				var wg sync.WaitGroup
				errs := make(chan error, uploads)
				for range uploads {
					wg.Go(func() {
						if _, err := s.Put(b.Context(), id, bytes.NewReader(data), size); err != nil {
							errs <- err
						}
					})
				}
				wg.Wait()
				close(stop)
				if max := <-sampled; max > base && max-base > peak {
					peak = max - base
				}
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(peak)/(1<<20)/uploads, "peak-MiB/upload")
			b.SetBytes(uploads * size)
		})
	}
}

// heapBytes returns the bytes of live and not yet swept heap objects.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
