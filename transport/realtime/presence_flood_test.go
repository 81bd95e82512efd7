package realtime_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/realtime"
)

// TestPresenceFloodCoalesces: one socket publishing updates on a key as
// fast as it can does not close the sockets reading that key (their send
// buffers used to fill with one message per update): queued updates of
// one document coalesce, and every reader ends with the newest one.
func TestPresenceFloodCoalesces(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := ctxT(t)
	const victims, updates = 10, 2000
	var cs []*realtime.Client
	for i := range victims + 1 {
		cs = append(cs, f.follow(ctx, fmt.Sprintf("u%d", i), "l1"))
	}
	var wg sync.WaitGroup
	errs := make([]error, victims)
	last := fmt.Sprintf(`{"i":%d}`, updates-1)
	for i, c := range cs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ev, err := c.Next(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				if p, ok := ev.(*ssp2.PresenceFanout); ok && p.ClientID == "u0" && string(p.Doc) == last {
					return
				}
			}
		}()
	}
	for i := range updates {
		if err := cs[0].Publish(ctx, "list:l1", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("reader u%d did not get the newest document: %v", i+1, err)
		}
	}
	if n := f.hub.Stats().Closed["slow"]; n != 0 {
		t.Errorf("%d sockets closed as not reading", n)
	}
}
