package peer

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// BenchmarkMemberCall measures one small member call (the member route,
// answered from memory) per protocol, caller and callee in this process:
// the cost of the hop alone. cpu-µs/op is the process's user+system CPU
// per call (the figure that survives a shared machine).
func BenchmarkMemberCall(b *testing.B) {
	secret, _ := NewSecret([]byte("cluster secret"))
	for _, proto := range []string{ProtocolFrames, ProtocolHTTP1, ProtocolH2} {
		b.Run(proto, func(b *testing.B) {
			_, srv, h := memberHandler(b, secret)
			b.Cleanup(func() { h.Close(context.Background()) })
			c, err := NewClient(ClientOptions{Self: "http://caller", Secret: secret, Protocol: proto})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if _, err := c.Member(ctx, srv.URL); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(4)
			cpu0 := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Member(ctx, srv.URL); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
