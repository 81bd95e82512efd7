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

// checkTailInvariants checks that the tail's byte count is the sum of its
// commits' sizes, within budget, and that its commits are contiguous.
func checkTailInvariants(t *testing.T, tail *logTail) {
	t.Helper()
	sum := 0
	for i := range tail.commits {
		sum += tailBytes(&tail.commits[i])
		if tail.commits[i].Seq != tail.start+int64(i) {
			t.Fatalf("commit %d has seq %d, tail starts at %d", i, tail.commits[i].Seq, tail.start)
		}
	}
	if sum != tail.bytes || len(tail.sizes) != len(tail.commits) {
		t.Fatalf("tail counts %d bytes over %d sizes, its %d commits take %d", tail.bytes, len(tail.sizes), len(tail.commits), sum)
	}
	if tail.bytes > maxTailBytes || len(tail.commits) > maxTailCommits {
		t.Fatalf("tail holds %d commits, %d bytes: over its bounds (%d, %d)", len(tail.commits), tail.bytes, maxTailCommits, maxTailBytes)
	}
}

// TestLogTailByteBudget: large rows keep the tail under maxTailBytes (the
// newest commits stay, contiguous); a commit over the budget alone
// empties it; pruning keeps the byte count exact.
func TestLogTailByteBudget(t *testing.T) {
	row := func(seq int64, size int) storage.CommitRecord {
		return storage.CommitRecord{Seq: seq, ActorID: "a", ClientID: "c", ClientCommitID: fmt.Sprint(seq),
			Changes: []storage.ChangeRecord{{Table: "todos", RowID: fmt.Sprint(seq), Op: ssp2.OpUpsert, RowVersion: 1,
				Scopes: map[string]string{"list_id": "l"}, Row: make([]byte, size)}}}
	}
	var tail logTail
	for seq := int64(1); seq <= 200; seq++ {
		tail.append(row(seq, 10<<10))
		checkTailInvariants(t, &tail)
	}
	if tail.end() != 200 || !tail.covers(199, 200) {
		t.Fatalf("tail ends at %d, want the newest commit 200", tail.end())
	}
	if n := len(tail.commits); n < 20 || n > maxTailBytes/(10<<10) {
		t.Fatalf("tail keeps %d commits of 10 KiB, want about %d", n, maxTailBytes/(10<<10))
	}
	tail.dropThrough(tail.start + 3)
	checkTailInvariants(t, &tail)

	tail.append(row(201, maxTailBytes)) // over the budget on its own
	if len(tail.commits) != 0 || tail.bytes != 0 || tail.covers(200, 201) {
		t.Fatalf("a commit over the budget left the tail at %d commits, %d bytes", len(tail.commits), tail.bytes)
	}
	tail.append(row(202, 100))
	checkTailInvariants(t, &tail)
	if tail.start != 202 || !tail.covers(201, 202) {
		t.Fatalf("tail after the large commit: start %d, want 202", tail.start)
	}

	var small logTail
	for seq := int64(1); seq <= 3*maxTailCommits; seq++ {
		small.append(row(seq, 8))
	}
	checkTailInvariants(t, &small)
	if len(small.commits) != maxTailCommits || small.end() != 3*maxTailCommits {
		t.Fatalf("small commits: tail of %d ending at %d, want %d ending at %d", len(small.commits), small.end(), maxTailCommits, 3*maxTailCommits)
	}
}
