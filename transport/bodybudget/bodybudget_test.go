package bodybudget_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/bodybudget"
)

const mib = 1 << 20

// waitHook returns Options.OnWait sending on a channel the test reads.
func waitHook() (func(), chan struct{}) {
	ch := make(chan struct{}, 16)
	return func() { ch <- struct{}{} }, ch
}

func mustGrow(t *testing.T, c *bodybudget.Charge, n int64) {
	t.Helper()
	if err := c.Grow(context.Background(), n); err != nil {
		t.Fatalf("Grow(%d): %v", n, err)
	}
}

func TestGrowWithinLimitAndRelease(t *testing.T) {
	b := bodybudget.New(bodybudget.Options{Limit: 10 * mib})
	c := b.Charge()
	mustGrow(t, c, 4*mib)
	mustGrow(t, c, 4*mib)
	if st := b.Stats(); st.InUse != 8*mib || st.Waits != 0 || c.Held() != 8*mib {
		t.Fatalf("after 8 MiB: %+v, held %d", st, c.Held())
	}
	c.Return(3 * mib)
	if st := b.Stats(); st.InUse != 5*mib {
		t.Fatalf("after returning 3 MiB: %+v", st)
	}
	c.Release()
	c.Release() // a second release gives back nothing more
	if st := b.Stats(); st.InUse != 0 || c.Held() != 0 {
		t.Fatalf("after release: %+v", st)
	}
}

// A Grow that does not fit waits; it is refused with sync.rate_limited
// (wrapping ErrBusy) once the wait passes, holding nothing more.
func TestGrowOverLimitIsRefusedAfterTheWait(t *testing.T) {
	hook, waiting := waitHook()
	b := bodybudget.New(bodybudget.Options{Limit: 10 * mib, Wait: 20 * time.Millisecond, OnWait: hook})
	full := b.Charge()
	mustGrow(t, full, 9*mib)
	c := b.Charge()
	err := c.Grow(context.Background(), 2*mib)
	select {
	case <-waiting:
	default:
		t.Fatal("the refused Grow never waited")
	}
	var se *syncerr.Error
	if !errors.Is(err, bodybudget.ErrBusy) || !errors.As(err, &se) || se.Code != syncerr.RateLimited || !se.Spec().Retryable ||
		se.Spec().RecommendedAction != "retryLater" || len(se.Details) == 0 {
		t.Fatalf("over the limit: %v", err)
	}
	if st := b.Stats(); st.InUse != 9*mib || st.Refusals != 1 || st.Waits != 1 || st.Waiting != 0 || c.Held() != 0 {
		t.Fatalf("after the refusal: %+v, held %d", st, c.Held())
	}
}

// A waiting Grow gets its room when another charge is released, and
// waiters are served in arrival order.
func TestWaitersAreServedInOrderWhenRoomFrees(t *testing.T) {
	hook, waiting := waitHook()
	b := bodybudget.New(bodybudget.Options{Limit: 10 * mib, Wait: time.Minute, OnWait: hook})
	full := b.Charge()
	mustGrow(t, full, 10*mib)
	order := make(chan int, 2)
	errs := make(chan error, 2)
	for i, n := range []int64{6 * mib, 2 * mib} {
		go func() {
			c := b.Charge()
			err := c.Grow(context.Background(), n)
			if err == nil {
				order <- i
			}
			errs <- err
		}()
		<-waiting // the first is queued before the second starts
	}
	full.Return(6 * mib) // room for the first (6 MiB), not both
	if got := <-order; got != 0 {
		t.Fatalf("the second waiter (2 MiB) went before the first (6 MiB)")
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	full.Release()
	if got := <-order; got != 1 {
		t.Fatalf("second grant went to %d", got)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.InUse != 8*mib || st.Waiting != 0 || st.Refusals != 0 {
		t.Fatalf("after both grants: %+v", st)
	}
}

// A Grow whose context ends stops waiting with the context's error; a
// waiter refused this way no longer holds up the ones behind it.
func TestCancelledWaiterLeavesTheLine(t *testing.T) {
	hook, waiting := waitHook()
	b := bodybudget.New(bodybudget.Options{Limit: 10 * mib, Wait: time.Minute, OnWait: hook})
	full := b.Charge()
	mustGrow(t, full, 5*mib)
	ctx, cancel := context.WithCancel(context.Background())
	bigErr := make(chan error, 1)
	go func() { bigErr <- b.Charge().Grow(ctx, 8*mib) }()
	<-waiting
	small := make(chan error, 1)
	go func() { small <- b.Charge().Grow(context.Background(), 2*mib) }() // fits, but waits behind the big one
	<-waiting
	cancel()
	if err := <-bigErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if err := <-small; err != nil {
		t.Fatalf("the waiter behind a cancelled one: %v", err)
	}
	if st := b.Stats(); st.InUse != 7*mib || st.Waiting != 0 || st.Refusals != 0 {
		t.Fatalf("after the cancel: %+v", st)
	}
}

// The first FreeBytes of a request never wait, even with the budget
// full; a request larger than the whole budget is capped at it and runs
// once it is alone.
func TestFreeAllowanceAndOversizeRequest(t *testing.T) {
	hook, waiting := waitHook()
	b := bodybudget.New(bodybudget.Options{Limit: 10 * mib, Wait: time.Minute, OnWait: hook})
	full := b.Charge()
	mustGrow(t, full, 10*mib)
	small := b.Charge()
	mustGrow(t, small, bodybudget.FreeBytes)
	select {
	case <-waiting:
		t.Fatal("a request within the free allowance waited")
	default:
	}
	small.Release()

	huge := b.Charge()
	done := make(chan error, 1)
	go func() { done <- huge.Grow(context.Background(), 30*mib) }()
	<-waiting
	full.Release()
	if err := <-done; err != nil {
		t.Fatalf("a request larger than the budget, alone: %v", err)
	}
	if st := b.Stats(); st.InUse != 10*mib || huge.Held() != 10*mib {
		t.Fatalf("oversize request: %+v, held %d (want the whole budget)", st, huge.Held())
	}
	mustGrow(t, huge, mib) // already at the cap: nothing more to wait for
	huge.Release()
	if st := b.Stats(); st.InUse != 0 {
		t.Fatalf("after release: %+v", st)
	}
}

func TestNilBudgetChargesNothing(t *testing.T) {
	var b *bodybudget.Budget
	c := b.Charge()
	mustGrow(t, c, 1<<40)
	c.Release()
	if st := b.Stats(); st != (bodybudget.Stats{}) {
		t.Fatalf("nil budget stats %+v", st)
	}
}
