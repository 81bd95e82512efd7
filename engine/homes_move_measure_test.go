package engine_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/postgres/homes"
)

// TestMeasureMove measures a move of a partition of
// SYNCLANE_MEASURE_MOVE_ROWS rows (skipped when unset) between two homes
// while one writer commits to it without pause: the move's duration, its
// write pause (fence to switch), the writer's longest commit (its retries
// after 503 partition_moving included, 2 ms back-off) and its commits/s
// before and during the move. A measurement, not a unit test: it asserts
// only that nothing was lost.
func TestMeasureMove(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SYNCLANE_MEASURE_MOVE_ROWS"))
	if n <= 0 {
		t.Skip("set SYNCLANE_MEASURE_MOVE_ROWS to measure")
	}
	ctx := context.Background()
	m := newMoveFixture(t)
	filler := &client{f: m.f, id: engine.Identity{ActorID: "alice", Partition: m.part}, cid: "filler", wire: ssp2.WireV3, sv: 1, epoch: &m.epoch}
	filled := time.Now()
	for i := 0; i < n; i += 500 {
		var ops []ssp2.Operation
		for j := i; j < min(n, i+500); j++ {
			id := fmt.Sprint("r-", j)
			ops = append(ops, upsert("tasks", id, m.f.row(id, "P", "some title of a task"), nil))
		}
		if pr := filler.push(fmt.Sprint("fill-", i), ops...); pr.Status != ssp2.CommitApplied {
			t.Fatalf("fill: %+v", pr)
		}
	}
	t.Logf("filled %d rows in %v", n, time.Since(filled).Round(time.Millisecond))

	w := &client{f: m.f, id: engine.Identity{ActorID: "alice", Partition: m.part}, cid: "writer", wire: ssp2.WireV3, sv: 1, epoch: &m.epoch}
	type ack struct{ start, end time.Time }
	var mu sync.Mutex
	var acks []ack
	stop := make(chan struct{})
	warm := make(chan struct{})
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s := time.Now()
			st, _, err := m.pushRetrying(ctx, w, fmt.Sprint("w-", i))
			if err != nil || st != ssp2.CommitApplied {
				werr = fmt.Errorf("writer: %v %v", st, err)
				return
			}
			mu.Lock()
			acks = append(acks, ack{s, time.Now()})
			if len(acks) == 300 {
				close(warm)
			}
			mu.Unlock()
		}
	}()
	<-warm
	moveStart := time.Now()
	res, err := m.h.Move(ctx, m.part, "b", homes.MoveOptions{})
	moveEnd := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	var before, during int
	var lat []time.Duration
	var beforeStart time.Time
	for i, a := range acks {
		switch {
		case a.end.Before(moveStart):
			before++
			if i == 0 {
				beforeStart = a.start
			}
		case a.end.Before(moveEnd):
			during++
			lat = append(lat, a.end.Sub(a.start))
		}
	}
	slices.Sort(lat)
	maxLat := time.Duration(0)
	if len(lat) > 0 {
		maxLat = lat[len(lat)-1]
	}
	rate := func(k int, d time.Duration) float64 { return float64(k) / d.Seconds() }
	all, _ := pullAll(t, m.first, 0)
	if want := 20 + (n+499)/500 + len(acks); len(all) != want {
		t.Fatalf("pulled %d commits, want %d", len(all), want)
	}
	fmt.Printf("MOVE rows=%d copied_rows=%d duration_ms=%.1f pause_ms=%.1f writer_max_commit_ms=%.1f commits_per_s_before=%.0f during=%.0f commits_during=%d\n",
		n, res.Rows, float64(res.Duration.Microseconds())/1000, float64(res.Pause.Microseconds())/1000, float64(maxLat.Microseconds())/1000,
		rate(before, moveStart.Sub(beforeStart)), rate(during, moveEnd.Sub(moveStart)), during)
}
