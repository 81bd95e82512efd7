package postgres_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/synclane/synclane/storage/postgres"
)

// Two stores (separate pools, as two processes) on one schema bind the
// same clientIDs concurrently, 16 goroutines each with its own actor: for
// every clientID all 32 calls return the same actor, which is the stored
// binding.
func TestTwoStoresBindClientOneWinner(t *testing.T) {
	a, b, _ := twoStores(t, 16)
	ctx := t.Context()
	for round := range 8 {
		clientID := fmt.Sprintf("client-%d", round)
		const racers = 32
		got := make([]string, racers)
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Go(func() {
				<-start
				got[i], errs[i] = s.BindClient(ctx, "p", clientID, fmt.Sprintf("actor-%d", i), int64(i))
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s: racer %d: %v", clientID, i, err)
			}
		}
		for i, actor := range got {
			if actor != got[0] {
				t.Fatalf("%s: racer %d bound to %q, racer 0 to %q", clientID, i, actor, got[0])
			}
		}
		for _, s := range []*postgres.Store{a, b} {
			rec, err := s.GetClient(ctx, "p", clientID)
			if err != nil || rec == nil || rec.ActorID != got[0] || rec.Cursor != -1 {
				t.Fatalf("%s: stored record %+v, %v; want actor %q, cursor -1", clientID, rec, err, got[0])
			}
		}
	}
}
