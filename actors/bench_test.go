package actors

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

type noopJob struct{ done chan error }

func (j *noopJob) Batchable() bool { return false }
func (j *noopJob) Fail(err error)  { j.done <- err }

type noopWorker struct{}

func (noopWorker) Start(context.Context) error { return nil }
func (noopWorker) Stop(context.Context)        {}
func (noopWorker) Handle(_ context.Context, jobs []*noopJob) {
	for _, j := range jobs {
		j.done <- nil
	}
}

// BenchmarkRoute measures the runtime's own cost per job (routing, mailbox,
// reply channel) with a worker that does nothing: parallel callers submit
// to random partitions among P and wait for the answer.
//
//	go test -run='^$' -bench=Route -benchmem ./actors/
func BenchmarkRoute(b *testing.B) {
	for _, parts := range []int{1, 1000} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			r := New(func(string) Worker[*noopJob] { return noopWorker{} }, Options{IdleTimeout: -1})
			defer r.Stop()
			names := make([]string, parts)
			for i := range names {
				names[i] = fmt.Sprintf("p%d", i)
			}
			b.SetParallelism(32)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
				j := &noopJob{done: make(chan error, 1)}
				for pb.Next() {
					r.Submit(names[rng.IntN(parts)], j)
					<-j.done
				}
			})
		})
	}
}
