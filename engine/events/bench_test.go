package events

import "testing"

// BenchmarkEmit measures one Emit with no subscriber and with one that
// keeps up (the cost a rejected push or a failed request pays).
func BenchmarkEmit(b *testing.B) {
	for _, subs := range []int{0, 1} {
		b.Run(map[int]string{0: "subscribers=0", 1: "subscribers=1"}[subs], func(b *testing.B) {
			r := NewRing(DefaultSize, nil)
			done := make(chan struct{})
			if subs == 1 {
				s := r.Subscribe(MaxSubscriberBuffer)
				go func() {
					defer close(done)
					for range s.C() {
					}
				}()
				defer func() { s.Close(); <-done }()
			}
			ev := Event{Kind: PushRejected, Partition: "p", Actor: "a", Code: "sync.unknown_table", Message: "commit c rejected: operation 0: unknown table"}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				r.Emit(ev)
			}
			b.StopTimer()
			if subs == 1 && r.Stats().DroppedSubscribers != 0 {
				b.Log("the subscriber fell behind and was dropped")
			}
		})
	}
}
