package partition

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

// The in-memory tail answers incremental scans exactly as storage does.
func TestLogTailMatchesStorageScan(t *testing.T) {
	ctx := context.Background()
	s := schema.MustDemo()
	st := memory.New()
	if err := st.EnsureSchema(ctx, s); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var tail logTail
	lists := []string{"a", "b", "c"}
	for seq := int64(1); seq <= 300; seq++ {
		tx, err := st.BeginPush(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		var changes []storage.ChangeRecord
		for range rng.IntN(4) { // some commits have no change at all
			changes = append(changes, storage.ChangeRecord{Table: "todos", RowID: fmt.Sprint(rng.IntN(50)), Op: ssp2.OpDelete,
				Scopes: map[string]string{"list_id": lists[rng.IntN(3)]}})
		}
		c := storage.CommitRecord{Seq: seq, ActorID: "x", ClientID: "c", ClientCommitID: fmt.Sprint(seq), Changes: changes}
		if err := tx.AppendCommit(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		tail.append(c)
	}
	if tail.start != 300-maxTailCommits+1 && tail.start != 1 {
		t.Fatalf("tail start %d", tail.start)
	}
	for i := range 500 {
		q := storage.ChangeQuery{Table: "todos", Scopes: map[string][]string{"list_id": lists[:1+rng.IntN(3)]},
			AfterSeq: int64(rng.IntN(300)), UpToSeq: 300, LimitChanges: 1 + rng.IntN(40)}
		if !tail.covers(q.AfterSeq, q.UpToSeq) {
			t.Fatalf("query %d: tail does not cover (%d, %d]", i, q.AfterSeq, q.UpToSeq)
		}
		want, err := st.ScanChanges(ctx, "p", q)
		if err != nil {
			t.Fatal(err)
		}
		got := tail.scan(q)
		if !reflect.DeepEqual(got.Commits, want.Commits) && !(len(got.Commits) == 0 && len(want.Commits) == 0) {
			t.Fatalf("query %d %+v:\n tail %+v\n store %+v", i, q, got.Commits, want.Commits)
		}
		if want.Truncated && !got.Truncated {
			t.Fatalf("query %d: storage truncated but the tail did not (cursor would skip commits)", i)
		}
	}
	if tail.covers(0, 301) || (&logTail{}).covers(0, 0) {
		t.Fatal("tail claims a window it does not hold")
	}
	// A gap (another process committed) restarts the tail.
	tail.append(storage.CommitRecord{Seq: 305})
	if tail.start != 305 || len(tail.commits) != 1 {
		t.Fatalf("tail after a gap: start %d len %d", tail.start, len(tail.commits))
	}
}

// The tail never serves a range at or below the horizon.
func TestLogTailDropThroughHorizon(t *testing.T) {
	var tail logTail
	for seq := int64(5); seq <= 14; seq++ {
		tail.append(storage.CommitRecord{Seq: seq})
	}
	tail.dropThrough(3) // below the tail: nothing changes
	if tail.start != 5 || len(tail.commits) != 10 {
		t.Fatalf("after a horizon below the tail: start %d len %d", tail.start, len(tail.commits))
	}
	tail.dropThrough(8)
	if tail.start != 9 || len(tail.commits) != 6 || tail.commits[0].Seq != 9 || tail.end() != 14 {
		t.Fatalf("after horizon 8: start %d len %d", tail.start, len(tail.commits))
	}
	if tail.covers(7, 14) || !tail.covers(8, 14) {
		t.Fatal("the tail covers a window starting below the horizon, or not one starting at it")
	}
	tail.append(storage.CommitRecord{Seq: 15})
	if tail.end() != 15 || tail.commits[len(tail.commits)-1].Seq != 15 {
		t.Fatal("append after dropThrough")
	}
	tail.dropThrough(15)
	if len(tail.commits) != 0 || tail.covers(15, 15) {
		t.Fatalf("after a horizon at the tail's end: %d commits", len(tail.commits))
	}
}

// Incremental sections below the horizon read after the reply was built
// become resets; others are kept, in order.
func TestReplyExpireBelow(t *testing.T) {
	var rep Reply
	rep.Frames = []ssp2.Frame{&ssp2.RespHeader{}}
	for _, c := range []int64{3, 7, 5} {
		sub := &ssp2.Subscription{ID: fmt.Sprint("s", c), Cursor: c}
		start := len(rep.Frames)
		rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive}, &ssp2.Commit{CommitSeq: c + 1}, &ssp2.SubEnd{NextCursor: c + 1})
		rep.incremental = append(rep.incremental, incrementalSection{start: start, end: len(rep.Frames), sub: sub})
	}
	// A streamed bootstrap section after them keeps its SUB_END index.
	streamEnd := &ssp2.SubEnd{NextCursor: 99}
	rep.Frames = append(rep.Frames, &ssp2.SubStart{ID: "boot", Bootstrap: true}, &ssp2.SegmentInline{}, streamEnd)
	rep.streams = []*pageStream{{at: len(rep.Frames) - 1, end: streamEnd}}
	rep.expireBelow(5)
	if rep.Frames[rep.streams[0].at] != streamEnd {
		t.Fatalf("the streamed section's SUB_END index %d no longer points at it", rep.streams[0].at)
	}
	rep.Frames = rep.Frames[:len(rep.Frames)-3]
	var got []string
	for _, f := range rep.Frames {
		switch x := f.(type) {
		case *ssp2.SubStart:
			got = append(got, fmt.Sprintf("%s:%d", x.ID, x.Status))
		case *ssp2.Commit:
			got = append(got, fmt.Sprint("commit", x.CommitSeq))
		case *ssp2.SubEnd:
			got = append(got, fmt.Sprint("end", x.NextCursor))
		}
	}
	want := "[s3:3 end3 s7:1 commit8 end8 s5:1 commit6 end6]"
	if fmt.Sprint(got) != want {
		t.Fatalf("frames after expireBelow(5): %v, want %s", got, want)
	}
}
