package engine_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
)

// firstPage bootstraps project P with one inline page of up to pageRows
// rows and returns the page's bytes and the section's pin.
func (c *client) firstPage(pageRows int32) ([]byte, int64) {
	c.f.t.Helper()
	rep, err := c.sync(&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: pageRows, MaxSnapshotPages: 1}, sub("s", -1, "P"))
	if err != nil {
		c.f.t.Fatalf("bootstrap: %v", err)
	}
	var page []byte
	var pin int64 = -1
	for _, fr := range rep.Frames {
		switch x := fr.(type) {
		case *ssp2.SegmentInline:
			if page != nil {
				c.f.t.Fatal("more than one inline page")
			}
			page = x.Payload
		case *ssp2.SubEnd:
			if x.BootstrapState != nil {
				c.f.t.Fatal("the bootstrap did not complete in one page")
			}
			pin = x.NextCursor
		}
	}
	if page == nil {
		c.f.t.Fatal("no inline page")
	}
	return page, pin
}

// TestPatchedFirstPageMatchesFreshBuild: after commits move a scope's pin,
// a table first page patched from the page kept for the older pin plus the
// changes since (partition/patch.go) is byte for byte the page a fresh
// build from the rows gives at the new pin — rows in key order with their
// server versions, for every mix of changes: whole-row and sparse updates
// (column versions move), deletes, a delete and a recreate over its
// tombstone (version 1 again), inserts before, between and after the
// page's rows, rows leaving and entering the scope, changes in other
// scopes only, several commits touching one row. It is patched, not
// encoded from rows.
func TestPatchedFirstPageMatchesFreshBuild(t *testing.T) {
	const pageRows = 100
	type mix func(f *fixture, w applied)
	title := func(f *fixture, id, project, title string) ssp2.Operation {
		return upsert("tasks", id, f.row(id, project, title), nil)
	}
	cases := []struct {
		name string
		mix  mix
	}{
		{"whole-row updates", func(f *fixture, w applied) {
			w.push("m1", title(f, "t03", "P", "three"), title(f, "t07", "P", "seven"))
			w.push("m2", title(f, "t07", "P", "seven again"))
		}},
		{"sparse updates", func(f *fixture, w applied) {
			w.push("m1", upsert("tasks", "t05", f.patch(ssp2.Row{"t05", nil, "five", nil}, 2), ver(1)))
			w.push("m2", upsert("tasks", "t05", f.patch(ssp2.Row{"t05", nil, nil, "C5"}, 3), ver(2)))
		}},
		{"deletes", func(f *fixture, w applied) {
			w.push("m1", del("t02"), del("t10"))
			w.push("m2", del("t00"), del("t19"))
		}},
		{"delete and recreate over the tombstone", func(f *fixture, w applied) {
			w.push("m1", title(f, "t04", "P", "four v2"))
			w.push("m2", del("t04"))
			w.push("m3", upsert("tasks", "t04", f.row("t04", "P", "four again"), ver(0)))
		}},
		{"inserts before, between and after", func(f *fixture, w applied) {
			w.push("m1", title(f, "a0", "P", "first"), title(f, "t025", "P", "between"))
			w.push("m2", title(f, "z9", "P", "last"))
		}},
		{"rows leaving and entering the scope", func(f *fixture, w applied) {
			// A scope column never changes on update (SPEC §3.4): a row
			// leaves a scope by a delete and enters one by an insert.
			w.push("m1", del("t06"), del("q1"))
			w.push("m2", upsert("tasks", "t06", f.row("t06", "Q", "moved out"), ver(0)), upsert("tasks", "q1", f.row("q1", "P", "moved in"), ver(0)))
		}},
		{"other scopes only", func(f *fixture, w applied) {
			w.push("m1", title(f, "q3", "Q", "elsewhere"), del("q4"))
		}},
		{"everything in one commit and across commits", func(f *fixture, w applied) {
			w.push("m1", title(f, "t01", "P", "one"), del("t11"), del("t12"), del("q0"),
				title(f, "t115", "P", "new"), upsert("tasks", "t13", f.patch(ssp2.Row{"t13", nil, "thirteen", nil}, 2), ver(1)))
			w.push("m2", del("t01"), upsert("tasks", "t11", f.row("t11", "P", "back"), ver(0)), upsert("tasks", "t12", f.row("t12", "Q", "out"), ver(0)),
				upsert("tasks", "q0", f.row("q0", "P", "in"), ver(0)))
			w.push("m3", upsert("tasks", "t01", f.row("t01", "P", "recreated"), ver(0)), del("q0"), title(f, "q3", "Q", "elsewhere"))
		}},
	}
	for sname, open := range stores(t) {
		for _, c := range cases {
			t.Run(sname+"/"+c.name, func(t *testing.T) {
				f := newFixture(t, open())
				w := f.client("writer", "cw")
				w.seedTitled(20, "task ")
				for i := range 5 {
					id := fmt.Sprintf("q%d", i)
					w.push("cq"+id, upsert("tasks", id, f.row(id, "Q", "other "+id), nil))
				}
				r := f.client("reader", "cr")
				stats := func() (uint64, uint64) { s := f.eng.Segments().Stats(); return s.Encoded, s.Patched }
				_, pin0 := r.firstPage(pageRows)
				c.mix(f, applied{w})
				e0, p0 := stats()
				patched, pin := r.firstPage(pageRows)
				if e, p := stats(); e != e0 || p != p0+1 {
					t.Fatalf("after the commits: %d pages encoded and %d patched, want 0 and 1", e-e0, p-p0)
				}
				if pin <= pin0 {
					t.Fatalf("pin %d did not move past %d", pin, pin0)
				}
				// A page size of its own: not kept, built from the rows.
				fresh, freshPin := r.firstPage(pageRows + 1)
				if e, _ := stats(); e != e0+1 {
					t.Fatal("the fresh page was not built from rows")
				}
				if freshPin != pin {
					t.Fatalf("fresh pin %d, patched pin %d", freshPin, pin)
				}
				wantSameRows(t, patched, fresh)
				if !bytes.Equal(patched, fresh) {
					t.Fatal("patched page bytes differ from the fresh build's")
				}
				// Served again at the same pin: the patched page, kept.
				again, _ := r.firstPage(pageRows)
				if e, p := stats(); e != e0+1 || p != p0+1 || !bytes.Equal(again, patched) {
					t.Fatalf("the patched page was not kept (encoded %d, patched %d)", e-e0, p-p0)
				}
				// Patched again from the patched page (its index kept with it).
				applied{w}.push("n1", title(f, "t08", "P", "again"), del("t09"), title(f, "t0", "P", "new first"))
				twice, _ := r.firstPage(pageRows)
				if _, p := stats(); p != p0+2 {
					t.Fatal("the second page was not patched")
				}
				fresh2, _ := r.firstPage(pageRows + 2)
				wantSameRows(t, twice, fresh2)
				if !bytes.Equal(twice, fresh2) {
					t.Fatal("twice-patched page bytes differ from the fresh build's")
				}
			})
		}
	}
}

// applied pushes commits that must apply.
type applied struct{ c *client }

func (a applied) push(ccid string, ops ...ssp2.Operation) {
	a.c.f.t.Helper()
	if pr := a.c.push(ccid, ops...); pr.Status != ssp2.CommitApplied {
		a.c.f.t.Fatalf("push %s: status %d %+v", ccid, pr.Status, pr.Results)
	}
}

// wantSameRows compares two pages row for row: values and server versions.
func wantSameRows(t *testing.T, got, want []byte) {
	t.Helper()
	g, err := ssp2.DecodeSegment(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ssp2.DecodeSegment(want)
	if err != nil {
		t.Fatal(err)
	}
	var gr, wr []ssp2.SegmentRow
	for _, b := range g.Blocks {
		gr = append(gr, b...)
	}
	for _, b := range w.Blocks {
		wr = append(wr, b...)
	}
	for i := range max(len(gr), len(wr)) {
		var a, b any = "(none)", "(none)"
		if i < len(gr) {
			a = fmt.Sprint(gr[i].ServerVersion, gr[i].Values)
		}
		if i < len(wr) {
			b = fmt.Sprint(wr[i].ServerVersion, wr[i].Values)
		}
		if a != b {
			t.Fatalf("row %d: patched %v, fresh %v", i, a, b)
		}
	}
}

// TestFirstPagePatchBounds: outside its bounds a first page is built from
// rows, not patched: the kept page's pin more than PatchMaxSeqs commits
// behind, or a patched page reaching limitSnapshotRows rows.
func TestFirstPagePatchBounds(t *testing.T) {
	cases := []struct {
		name     string
		pageRows int32
		seed     int
		commits  int // one-row updates after the first bootstrap
		inserts  int // new rows in scope after it
	}{
		{"within bounds (control)", 50, 20, 3, 0},
		{"too far behind", 50, 20, partition.PatchMaxSeqs + 1, 0},
		{"reaches the page size", 22, 20, 0, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, stores(t)["memory"]())
			w := f.client("writer", "cw")
			w.seedTitled(c.seed, "task ")
			r := f.client("reader", "cr")
			r.firstPage(c.pageRows)
			for i := range c.commits {
				w.push(fmt.Sprint("u", i), upsert("tasks", "t01", f.row("t01", "P", fmt.Sprint("v", i)), nil))
			}
			for i := range c.inserts {
				id := fmt.Sprintf("n%d", i)
				w.push("i"+id, upsert("tasks", id, f.row(id, "P", id), nil))
			}
			before := f.eng.Segments().Stats()
			page, _ := r.firstPage(c.pageRows)
			after := f.eng.Segments().Stats()
			wantPatched := c.name == "within bounds (control)"
			if got := after.Patched - before.Patched; got != map[bool]uint64{true: 1}[wantPatched] {
				t.Fatalf("patched %d pages, want patched=%v", got, wantPatched)
			}
			if got := after.Encoded - before.Encoded; got != map[bool]uint64{false: 1}[wantPatched] {
				t.Fatalf("encoded %d pages", got)
			}
			fresh, _ := r.firstPage(c.pageRows + 1)
			wantSameRows(t, page, fresh)
		})
	}
}
