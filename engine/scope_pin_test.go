package engine_test

import (
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// TestImageLaneBootstrapPinsAtTheScopePin (SPEC §4.7, §5.3): a fresh
// bootstrap eligible for the SQLite lane (accept bit 2, no encrypted
// column) pins at the newest commit touching its first scope variable's
// values, raised to the horizon, not at the partition's max seq. Commits
// outside its scope then leave the pin, and so the stored image's key,
// where they were: a later client reuses the image; the next incremental
// pull replays an empty window. A client without bit 2 still pins at the
// max seq.
func TestImageLaneBootstrapPinsAtTheScopePin(t *testing.T) {
	images := ssp2.PullHeader{Accept: ssp2.AcceptInlineRows | ssp2.AcceptRefRows | ssp2.AcceptSQLite, LimitSnapshotRows: 10, MaxSnapshotPages: 4}
	rowsOnly := images
	rowsOnly.Accept = ssp2.AcceptInlineRows | ssp2.AcceptRefRows
	for sname, open := range stores(t) {
		t.Run(sname, func(t *testing.T) {
			f := newFixture(t, open())
			w := f.client("writer", "cw")
			w.seedTitled(30, "title ") // seqs 1..30 in project P
			for _, id := range []string{"q1", "q2", "q3", "q4", "q5"} {
				w.push("cq"+id, upsert("tasks", id, f.row(id, "Q", "other project"), nil)) // seqs 31..35
			}
			pinOf := func(what string, cid string, ph ssp2.PullHeader) int64 {
				t.Helper()
				sec := f.client("reader", cid).pull(ph, sub("s", -1, "P"))["s"]
				if sec == nil || sec.end == nil || !sec.start.Bootstrap || sec.end.BootstrapState != nil {
					t.Fatalf("%s: not a complete bootstrap: %+v", what, sec)
				}
				return sec.end.NextCursor
			}
			boot := func(what, cid string) *ssp2.SegmentRef {
				t.Helper()
				got := f.client("reader", cid).bootstrapOnce(images, "P")
				if !got.done || len(got.refs) != 1 || got.refs[0].MediaType != ssp2.MediaSQLite || got.refs[0].RowCount != 30 {
					t.Fatalf("%s: want one image of 30 rows, got %+v (done %v)", what, got.refs, got.done)
				}
				return got.refs[0]
			}

			if pin := pinOf("an image-eligible bootstrap", "r0", images); pin != 30 {
				t.Fatalf("an image-eligible bootstrap after 5 commits outside its scope pinned at %d, want the scope pin 30", pin)
			}
			if pin := pinOf("a client without accept bit 2", "r1", rowsOnly); pin != 35 {
				t.Fatalf("a client without accept bit 2 pinned at %d, want the max seq 35", pin)
			}
			first := boot("the first image", "r2")
			if first.AsOfCommitSeq != 30 {
				t.Fatalf("the image's asOfCommitSeq is %d, want the scope pin 30", first.AsOfCommitSeq)
			}
			w.push("cq6", upsert("tasks", "q6", f.row("q6", "Q", "still elsewhere"), nil)) // seq 36
			before := f.eng.Segments().Stats().Encoded
			again := boot("after another commit outside the scope", "r3")
			if again.SegmentID != first.SegmentID || again.AsOfCommitSeq != 30 {
				t.Fatalf("after a commit outside the scope: image %s at %d, want the stored %s at 30", again.SegmentID, again.AsOfCommitSeq, first.SegmentID)
			}
			if n := f.eng.Segments().Stats().Encoded - before; n != 0 {
				t.Fatalf("the second image-eligible bootstrap encoded %d pages or images, want the stored image reused", n)
			}
			// The next incremental pull from the scope pin replays nothing.
			inc := f.client("reader", "r3").pull(images, sub("s", 30, "P"))["s"]
			if inc.start.Bootstrap || len(inc.commits) != 0 || inc.end.NextCursor != 36 {
				t.Fatalf("the pull after the scope pin: bootstrap %v, %d commits, next %d; want no commit, next 36", inc.start.Bootstrap, len(inc.commits), inc.end.NextCursor)
			}
			// A commit in the scope moves the pin.
			w.push("cp", upsert("tasks", "t99", f.row("t99", "P", "in scope"), nil)) // seq 37
			if pin := pinOf("after a commit in the scope", "r4", images); pin != 37 {
				t.Fatalf("after a commit in the scope the pin is %d, want 37", pin)
			}
			// Pruning past the scope pin raises it to the horizon.
			for _, id := range []string{"q7", "q8", "q9", "q10"} {
				w.push("c"+id, upsert("tasks", id, f.row(id, "Q", "later"), nil)) // seqs 38..41
			}
			rep, err := f.eng.Retention().Prune(t.Context(), "p1", storage.RetentionPolicy{AgeForceMs: 1 << 50, MinRetainedCommits: 2}, false)
			if err != nil || rep.HorizonAfter != 39 {
				t.Fatalf("prune keeping the newest 2: %+v, %v; want horizon 39", rep, err)
			}
			if pin := pinOf("after pruning past the scope pin", "r5", images); pin != 39 {
				t.Fatalf("after pruning through 39 the pin is %d, want the horizon 39", pin)
			}
		})
	}
}
