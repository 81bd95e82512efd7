package events

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

func seqs(evs []Event) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func TestRingKeepsTheLastSizeEvents(t *testing.T) {
	cases := []struct {
		name         string
		size, emit   int
		after        uint64
		limit        int
		wantFirst    uint64
		wantCount    int
		wantRetained int
	}{
		{"not full", 4, 3, 0, 0, 1, 3, 3},
		{"wrapped", 4, 10, 0, 0, 7, 4, 4},
		{"after inside", 4, 10, 8, 0, 9, 2, 4},
		{"after before oldest", 4, 10, 2, 0, 7, 4, 4},
		{"limit", 4, 10, 0, 2, 7, 2, 4},
		{"after newest", 4, 10, 10, 0, 0, 0, 4},
		{"default size", 0, 5, 0, 0, 1, 5, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewRing(c.size, nil)
			for i := range c.emit {
				r.Emit(Event{Kind: PushRejected, Message: fmt.Sprint(i + 1)})
			}
			got := r.Recent(c.after, c.limit)
			if len(got) != c.wantCount {
				t.Fatalf("Recent = %v, want %d events", seqs(got), c.wantCount)
			}
			for i, e := range got {
				if e.Seq != c.wantFirst+uint64(i) || e.Message != fmt.Sprint(e.Seq) || e.At.IsZero() {
					t.Fatalf("event %d = %+v, want seq %d with its own message", i, e, c.wantFirst+uint64(i))
				}
			}
			st := r.Stats()
			if st.Retained != c.wantRetained || st.Emitted != uint64(c.emit) || st.LastSeq != uint64(c.emit) {
				t.Fatalf("stats = %+v", st)
			}
		})
	}
}

func TestSizeAndMessageBounds(t *testing.T) {
	if got := NewRing(MaxSize*2, nil).Stats().Size; got != MaxSize {
		t.Fatalf("size = %d, want %d", got, MaxSize)
	}
	r := NewRing(1, nil)
	r.Emit(Event{Message: strings.Repeat("é", MaxMessageBytes)})
	m := r.Recent(0, 0)[0].Message
	if len(m) > MaxMessageBytes || !utf8.ValidString(m) || len(m) < MaxMessageBytes-1 {
		t.Fatalf("message of %d bytes (valid %v), want at most %d valid", len(m), utf8.ValidString(m), MaxMessageBytes)
	}
}

func TestNilRingIsANoOp(t *testing.T) {
	var r *Ring
	r.Emit(Event{Kind: AuthFailed})
	if r.Recent(0, 0) != nil || r.Subscribe(1) != nil || r.Stats() != (Stats{}) {
		t.Fatal("a nil ring must read empty")
	}
}

func TestSubscriberGetsEventsInOrder(t *testing.T) {
	r := NewRing(8, nil)
	s := r.Subscribe(16)
	for i := range 5 {
		r.Emit(Event{Kind: SlowRequest, Message: fmt.Sprint(i)})
	}
	for want := uint64(1); want <= 5; want++ {
		if e := <-s.C(); e.Seq != want {
			t.Fatalf("got seq %d, want %d", e.Seq, want)
		}
	}
	s.Close()
	s.Close() // idempotent
	if _, ok := <-s.C(); ok {
		t.Fatal("channel open after Close")
	}
	if s.Dropped() || r.Stats().Subscribers != 0 {
		t.Fatalf("closed subscription: dropped %v, stats %+v", s.Dropped(), r.Stats())
	}
}

// A subscriber that does not read is dropped when its buffer is full;
// Emit never waits for it and the others keep receiving.
func TestSlowSubscriberIsDroppedNotWaitedFor(t *testing.T) {
	r := NewRing(64, nil)
	slow := r.Subscribe(2)
	fast := r.Subscribe(64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10 {
			r.Emit(Event{Kind: PushRejected, Message: fmt.Sprint(i)})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Emit blocked on a slow subscriber")
	}
	var got []uint64
	for e := range slow.C() {
		got = append(got, e.Seq)
	}
	if len(got) != 2 || !slow.Dropped() {
		t.Fatalf("slow subscriber got %v (dropped %v), want the first 2 then a drop", got, slow.Dropped())
	}
	for want := uint64(1); want <= 10; want++ {
		if e := <-fast.C(); e.Seq != want {
			t.Fatalf("fast got %d, want %d", e.Seq, want)
		}
	}
	if st := r.Stats(); st.DroppedSubscribers != 1 || st.Subscribers != 1 {
		t.Fatalf("stats = %+v, want 1 dropped and 1 live", st)
	}
	slow.Close() // a no-op after the drop
}

func TestSubscriberLimit(t *testing.T) {
	r := NewRing(4, nil)
	var subs []*Subscription
	for range MaxSubscribers {
		s := r.Subscribe(1)
		if s == nil {
			t.Fatal("Subscribe refused below the limit")
		}
		subs = append(subs, s)
	}
	if r.Subscribe(1) != nil {
		t.Fatal("Subscribe accepted beyond MaxSubscribers")
	}
	subs[0].Close()
	if r.Subscribe(1) == nil {
		t.Fatal("Subscribe refused after one closed")
	}
}

func TestConcurrentEmitAndRead(t *testing.T) {
	r := NewRing(32, nil)
	s := r.Subscribe(MaxSubscriberBuffer)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 250 {
				r.Emit(Event{Kind: SlowRequest, Partition: fmt.Sprint(w, i)})
				_ = r.Recent(0, 5)
			}
		}()
	}
	wg.Wait()
	s.Close()
	var last uint64
	n := 0
	for e := range s.C() {
		if e.Seq != last+1 {
			t.Fatalf("subscriber saw seq %d after %d", e.Seq, last)
		}
		last = e.Seq
		n++
	}
	if n != 1000 || r.Stats().Emitted != 1000 {
		t.Fatalf("subscriber saw %d events, ring emitted %d; want 1000", n, r.Stats().Emitted)
	}
}
