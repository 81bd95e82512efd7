package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/protocol/yjs"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/sqlite"
)

// crdtSchemaJSON has a notes table whose doc column merges with the "lines"
// merger, and a table whose crdt column merges with "refusing", a merger
// that fails every merge.
const crdtSchemaJSON = `{"version":1,"tables":[
 {"name":"notes","columns":[
   {"name":"id","type":"string"},{"name":"project_id","type":"string"},
   {"name":"title","type":"string"},{"name":"doc","type":"crdt","nullable":true,"crdtType":"lines"}],
  "primaryKey":"id","scopes":["project:{project_id}"]},
 {"name":"orphans","columns":[
   {"name":"id","type":"string"},{"name":"project_id","type":"string"},
   {"name":"doc","type":"crdt","crdtType":"refusing"}],
  "primaryKey":"id","scopes":["project:{project_id}"]}]}`

// linesMerge is a test merger: the set of newline-separated lines, sorted
// (commutative, associative and idempotent by construction).
func linesMerge(stored, incoming []byte) ([]byte, error) {
	set := map[string]bool{}
	for _, b := range [][]byte{stored, incoming} {
		for l := range strings.SplitSeq(string(b), "\n") {
			if l != "" {
				set[l] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	slices.Sort(out)
	return []byte(strings.Join(out, "\n")), nil
}

const mergerSecret = "s3cret-merger-detail"

// refusing is the merger of the orphans table: every merge fails.
var refusing = partition.MergerFunc(func([]byte, []byte) ([]byte, error) { return nil, errors.New(mergerSecret) })

// crdtStores opens each backend the CRDT end-to-end tests run on.
func crdtStores() []struct {
	name string
	open func(t *testing.T) backend
} {
	return []struct {
		name string
		open func(t *testing.T) backend
	}{
		{"memory", func(*testing.T) backend { return memory.New() }},
		{"sqlite", func(t *testing.T) backend {
			st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
		{"postgres", func(t *testing.T) backend {
			return pgtest.OpenSchema(t, pgtest.NewSchema(t), postgres.Options{MaxConns: 4})
		}},
	}
}

type crdtFixture struct {
	*fixture
	notes *ssp2.RowCodec
}

func newCRDTFixture(t *testing.T, st backend, mergers map[string]partition.Merger) *crdtFixture {
	t.Helper()
	sch, err := schema.ParseWith([]byte(crdtSchemaJSON), schema.Options{CRDTTypes: []string{"lines", "refusing"}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, st, func(c *engine.Config) { c.Schema, c.Mergers = sch, mergers })
	return &crdtFixture{fixture: f, notes: ssp2.NewRowCodec(sch.Table("notes").Columns)}
}

func (f *crdtFixture) note(id, title string, doc []byte) []byte {
	var d any
	if doc != nil {
		d = doc
	}
	b, err := f.notes.AppendSparse(nil, ssp2.Row{id, "P", title, d}, nil, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// stored bootstraps the notes of project P for a fresh client and returns
// them by id.
func (f *crdtFixture) stored(cid string) map[string]ssp2.SegmentRow {
	f.t.Helper()
	c := f.client("reader", cid)
	s := c.pull(ssp2.PullHeader{Accept: 1}, &ssp2.Subscription{ID: "n", Table: "notes", Scopes: map[string][]string{"project_id": {"P"}}, Cursor: -1})["n"]
	out := map[string]ssp2.SegmentRow{}
	for _, r := range s.rows {
		out[r.Values[0].(string)] = r
	}
	return out
}

// crdtState is what the store holds: the partition's last commit and every
// notes row of project P (version and values), read from storage directly.
type crdtState struct {
	maxSeq int64
	rows   map[string]storage.RowRecord
}

func (f *crdtFixture) state() crdtState {
	f.t.Helper()
	ctx := context.Background()
	info, err := f.store.Log.ReadPartition(ctx, "p1")
	if err != nil {
		f.t.Fatal(err)
	}
	rows, err := f.store.Rows.ScanRows(ctx, "p1", storage.RowQuery{Table: f.eng.Schema().Table("notes"), Scopes: map[string][]string{"project_id": {"P"}}, Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	st := crdtState{maxSeq: info.MaxCommitSeq, rows: map[string]storage.RowRecord{}}
	for _, r := range rows {
		st.rows[r.RowID] = r
	}
	return st
}

// wantSameState fails unless the store holds exactly what it held at before.
func (f *crdtFixture) wantSameState(step string, before crdtState) {
	f.t.Helper()
	after := f.state()
	if after.maxSeq != before.maxSeq {
		f.t.Fatalf("%s: the log moved from seq %d to %d", step, before.maxSeq, after.maxSeq)
	}
	if len(after.rows) != len(before.rows) {
		f.t.Fatalf("%s: %d notes rows, want %d", step, len(after.rows), len(before.rows))
	}
	for id, b := range before.rows {
		a, ok := after.rows[id]
		if !ok || a.Version != b.Version || !reflect.DeepEqual(a.Values, b.Values) {
			f.t.Fatalf("%s: row %s is v%d %q, want v%d %q", step, id, a.Version, a.Values, b.Version, b.Values)
		}
	}
}

// wantConflict fails unless pr is a rejected commit whose one result is a
// sync.version_conflict at op opIndex showing serverVersion and a serverRow
// with title and doc.
func (f *crdtFixture) wantConflict(pr *ssp2.PushResult, opIndex int32, serverVersion int64, title string, doc []byte, contended ...int) {
	f.t.Helper()
	if pr.Status != ssp2.CommitRejected || pr.CommitSeq != nil || len(pr.Results) != 1 {
		f.t.Fatalf("push %s = %+v, want a rejected commit with one result", pr.ClientCommitID, pr)
	}
	r := pr.Results[0]
	if r.OpIndex != opIndex || r.Status != ssp2.OpConflict || r.Code != string(syncerr.VersionConflict) || r.ServerVersion != serverVersion {
		f.t.Fatalf("push %s: result %+v, want %s at op %d with serverVersion %d", pr.ClientCommitID, r, syncerr.VersionConflict, opIndex, serverVersion)
	}
	sr, err := f.notes.Decode(r.ServerRow)
	if err != nil {
		f.t.Fatalf("serverRow: %v", err)
	}
	if sr[2] != title || !bytes.Equal(sr[3].([]byte), doc) {
		f.t.Fatalf("serverRow = %q, want title %q doc %q", sr, title, doc)
	}
	want := ssp2.NewColumnSet(4)
	for _, c := range contended {
		want.Add(c)
	}
	if !bytes.Equal(r.ConflictColumns, want) {
		f.t.Fatalf("conflictColumns = %08b, want %08b", r.ConflictColumns, want)
	}
}

func wantApplied(t *testing.T, pr *ssp2.PushResult) {
	t.Helper()
	if pr.Status != ssp2.CommitApplied {
		t.Fatalf("push %s: status %d results %+v, want applied", pr.ClientCommitID, pr.Status, pr.Results)
	}
}

// TestCRDTPushRules runs the SPEC §5.10.3 rules under wire version 3 end to
// end on every backend: clean applies merge the present crdt column and bump
// the version, an absent crdt column is kept and a present NULL clears it, a
// conflict (through a present non-crdt column) merges nothing, marks that
// column and shows the merged state in serverRow, a replay is cached and not
// re-merged, and a failing merger rolls the commit back with
// sync.crdt_merge_failed without leaking the merger's error.
func TestCRDTPushRules(t *testing.T) {
	for _, be := range crdtStores() {
		t.Run(be.name, func(t *testing.T) {
			calls := 0
			counting := partition.MergerFunc(func(s, in []byte) ([]byte, error) {
				calls++
				return linesMerge(s, in)
			})
			f := newCRDTFixture(t, be.open(t), map[string]partition.Merger{"lines": counting, "refusing": refusing})
			a, b := f.client("alice", "ca"), f.client("bob", "cb")
			title := func(s string) *string { return &s }

			wantApplied(t, a.push("a1", upsert("notes", "n1", f.note("n1", "T", []byte("x\na")), ver(0))))
			wantApplied(t, b.push("b1", upsert("notes", "n1", f.notePatch("n1", nil, []byte("b"), true), ver(1))))
			// Last-write-wins pushes merge too; a patch without the doc
			// leaves it alone.
			wantApplied(t, a.push("a2", upsert("notes", "n1", f.notePatch("n1", nil, []byte("c"), true), nil)))
			wantApplied(t, b.push("b2", upsert("notes", "n1", f.notePatch("n1", title("T"), nil, false), nil)))
			row := f.stored("r1")["n1"]
			if row.ServerVersion != 4 || !bytes.Equal(row.Values[3].([]byte), []byte("a\nb\nc\nx")) {
				t.Fatalf("merged row = v%d %q, want v4 %q", row.ServerVersion, row.Values[3], "a\nb\nc\nx")
			}

			// A stale push presenting the title (written at v4) conflicts on
			// the title alone; serverRow carries the merged doc and nothing of
			// this push is merged.
			f.wantConflict(a.push("a3", upsert("notes", "n1", f.notePatch("n1", title("T2"), []byte("lost"), true), ver(2))), 0, 4, "T", []byte("a\nb\nc\nx"), 2)

			// A replay is answered from the idempotency record: cached, the
			// same seq, no merge.
			before := calls
			first := a.push("a2-again", upsert("notes", "n1", f.notePatch("n1", nil, []byte("d"), true), nil))
			wantApplied(t, first)
			replayed := a.push("a2-again", upsert("notes", "n1", f.notePatch("n1", nil, []byte("d"), true), nil))
			if replayed.Status != ssp2.CommitCached || *replayed.CommitSeq != *first.CommitSeq || calls != before+1 {
				t.Fatalf("replay = %+v after %d merges, want cached seq %d after 1", replayed, calls-before, *first.CommitSeq)
			}

			// A present NULL clears the doc (it is not a merge).
			wantApplied(t, b.push("b-clear", upsert("notes", "n1", f.notePatch("n1", nil, nil, true), nil)))
			if row := f.stored("r-clear")["n1"]; row.Values[3] != nil || row.ServerVersion != 6 {
				t.Fatalf("after a NULL doc: v%d doc %q, want v6 NULL", row.ServerVersion, row.Values[3])
			}

			// A failing merger: the whole commit rolls back.
			pr := a.push("a4",
				upsert("notes", "n2", f.note("n2", "T", []byte("kept?")), nil),
				upsert("orphans", "o1", orphan(t, f, "o1"), nil))
			if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.CRDTMergeFailed) || pr.Results[0].OpIndex != 1 || pr.Results[0].Retryable {
				t.Fatalf("failing merger = %+v, want rejected %s at op 1", pr, syncerr.CRDTMergeFailed)
			}
			if pr.Results[0].Message != "CRDT merger failed" {
				t.Fatalf("failing merger message %q, want the fixed %q (SPEC §6.7)", pr.Results[0].Message, "CRDT merger failed")
			}
			if _, ok := f.stored("r2")["n2"]; ok {
				t.Fatal("the sibling op of a failed merge was applied")
			}
			// A replay of the rejected commit answers the same rejection.
			if again := a.push("a4", upsert("notes", "n2", f.note("n2", "T", nil), nil)); again.Status != ssp2.CommitRejected || again.Results[0].Code != string(syncerr.CRDTMergeFailed) {
				t.Fatalf("replayed rejection = %+v", again)
			}
			// The server keeps serving: the next push applies.
			wantApplied(t, b.push("b3", upsert("notes", "n1", f.notePatch("n1", nil, []byte("e"), true), ver(6))))
		})
	}
}

// TestCRDTPatchesAndStaleBaseVersions (SPEC §5.10.3, §6.2, Appendix B.14
// and B.21d): a patch presenting only the key and the crdt column never
// conflicts, whatever its baseVersion, and merges; a stale patch that also
// presents a non-crdt column that moved conflicts with that column marked,
// changes no row and appends nothing (its sibling operation rolled back
// too), and its replay answers the recorded conflict without merging; a
// baseVersion 0 on an existing row is a lost insert race (a conflict even
// with nothing contended); a baseVersion never issued is
// sync.invalid_request. On every backend.
func TestCRDTPatchesAndStaleBaseVersions(t *testing.T) {
	for _, be := range crdtStores() {
		t.Run(be.name, func(t *testing.T) {
			calls := 0
			counting := partition.MergerFunc(func(s, in []byte) ([]byte, error) {
				calls++
				return linesMerge(s, in)
			})
			f := newCRDTFixture(t, be.open(t), map[string]partition.Merger{"lines": counting, "refusing": refusing})
			a, b := f.client("alice", "ca"), f.client("bob", "cb")
			title := func(s string) *string { return &s }
			wantApplied(t, a.push("create", upsert("notes", "n1", f.note("n1", "T", []byte("x")), ver(0))))
			// The title moves at v2; the doc merges at v3.
			wantApplied(t, b.push("b-title", upsert("notes", "n1", f.notePatch("n1", title("T"), nil, false), ver(1))))
			wantApplied(t, a.push("a-doc", upsert("notes", "n1", f.notePatch("n1", nil, []byte("c"), true), nil)))
			merged := []byte("c\nx")
			before := f.state()
			if row := before.rows["n1"]; row.Version != 3 || !bytes.Equal(row.Values[3].([]byte), merged) {
				t.Fatalf("merged row = v%d %q, want v3 %q", row.Version, row.Values[3], merged)
			}

			// crdt-only patches at any base apply and merge.
			for i, base := range []int64{1, 2, 3} {
				ccid := fmt.Sprintf("crdt-only-%d", i)
				wantApplied(t, a.push(ccid, upsert("notes", "n1", f.notePatch("n1", nil, []byte(fmt.Sprintf("m%d", i)), true), ver(base))))
			}
			merged = []byte("c\nm0\nm1\nm2\nx")
			before = f.state()
			if row := before.rows["n1"]; row.Version != 6 || !bytes.Equal(row.Values[3].([]byte), merged) {
				t.Fatalf("after crdt-only patches: v%d %q, want v6 %q", row.Version, row.Values[3], merged)
			}

			stale := []struct {
				name      string
				title     *string
				base      int64
				contended []int
			}{
				{"title at a version before its write", title("T2"), 1, []int{2}},
				{"lost insert race, title present", title("T2"), 0, []int{2}},
				{"lost insert race, crdt only", nil, 0, nil},
			}
			for i, c := range stale {
				ccid := fmt.Sprintf("stale-%d", i)
				// A sibling insert that would merge on its own rides along:
				// the conflict rolls it back too.
				pr := a.push(ccid,
					upsert("notes", "n2", f.note("n2", "T", []byte("sibling")), nil),
					upsert("notes", "n1", f.notePatch("n1", c.title, []byte("lost"), true), ver(c.base)))
				f.wantConflict(pr, 1, 6, "T", merged, c.contended...)
				f.wantSameState(c.name, before)
				// Replayed, the commit answers the recorded conflict and
				// merges nothing.
				n := calls
				f.wantConflict(a.push(ccid, upsert("notes", "n1", f.note("n1", "T", []byte("other")), nil)), 1, 6, "T", merged, c.contended...)
				if calls != n {
					t.Fatalf("%s: the replay merged %d times", c.name, calls-n)
				}
				f.wantSameState(c.name+" replayed", before)
			}
			// A baseVersion the server never issued.
			pr := a.push("ahead", upsert("notes", "n1", f.notePatch("n1", nil, []byte("z"), true), ver(9)))
			if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.InvalidRequest) {
				t.Fatalf("baseVersion 9 of a v6 row = %+v, want sync.invalid_request", pr)
			}
			f.wantSameState("base ahead", before)

			// The client rebases on serverVersion: it applies once, merged.
			wantApplied(t, a.push("rebased", upsert("notes", "n1", f.notePatch("n1", title("T2"), []byte("lost"), true), ver(6))))
			after := f.state()
			if row := after.rows["n1"]; row.Version != 7 || row.Values[2] != "T2" || !bytes.Equal(row.Values[3].([]byte), []byte("c\nlost\nm0\nm1\nm2\nx")) {
				t.Fatalf("rebased row = v%d %q %q", row.Version, row.Values[2], row.Values[3])
			}
			if after.maxSeq != before.maxSeq+1 {
				t.Fatalf("log at seq %d after the rebase, want %d", after.maxSeq, before.maxSeq+1)
			}
			if _, ok := after.rows["n2"]; ok {
				t.Fatal("the sibling insert of a conflicting commit was stored")
			}
		})
	}
}

// TestCRDTFailingMerger: a merger error rejects with sync.crdt_merge_failed
// and its text never reaches the client.
func TestCRDTFailingMerger(t *testing.T) {
	f := newCRDTFixture(t, memory.New(), map[string]partition.Merger{"lines": refusing, "refusing": refusing})
	a := f.client("alice", "ca")
	pr := a.push("a1", upsert("notes", "n1", f.note("n1", "T", []byte("x")), nil))
	if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.CRDTMergeFailed) {
		t.Fatalf("failing merger = %+v", pr)
	}
	if strings.Contains(pr.Results[0].Message, mergerSecret) {
		t.Fatalf("merger error leaked to the client: %q", pr.Results[0].Message)
	}
	// A row without a doc update needs no merger.
	wantApplied(t, a.push("a2", upsert("notes", "n1", f.note("n1", "T", nil), nil)))
}

// notePatch is a sparse payload of note id presenting only the key and
// the named columns: title when title is non-nil, doc when withDoc.
func (f *crdtFixture) notePatch(id string, title *string, doc []byte, withDoc bool) []byte {
	row := ssp2.Row{id, nil, nil, nil}
	present := ssp2.NewColumnSet(4)
	present.Add(0)
	if title != nil {
		row[2] = *title
		present.Add(2)
	}
	if withDoc {
		if doc != nil {
			row[3] = doc
		}
		present.Add(3)
	}
	b, err := f.notes.AppendSparse(nil, row, present, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func orphan(t *testing.T, f *crdtFixture, id string) []byte {
	t.Helper()
	b, err := ssp2.NewRowCodec(f.eng.Schema().Table("orphans").Columns).AppendSparse(nil, ssp2.Row{id, "P", []byte("u")}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// yjsVectorUpdates returns the updates of the first n histories of the
// yjs-doc merger's vectors (generated with the yjs npm package).
func yjsVectorUpdates(t *testing.T, n int) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "protocol", "yjs", "testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []struct {
			Updates [][]byte `json:"updates"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, v := range f.Vectors[:n] {
		out = append(out, v.Updates...)
	}
	return out
}

// TestCRDTYjsConvergence: three clients push the Yjs updates of concurrent
// edit histories to the doc column of two rows, without baseVersion
// (crdt-only edits, SPEC §5.10.3), each row getting them in another order.
// Every push applies, both stored documents are byte-identical to merging
// all the updates at once (so independent of arrival order), a crdt-only
// patch at a stale baseVersion still merges (B.14), a stale edit of the
// title (moved meanwhile) is a conflict showing that merged state, and an
// offline outbox replayed in full is answered cached without a new merge or
// version. On every backend.
func TestCRDTYjsConvergence(t *testing.T) {
	updates := yjsVectorUpdates(t, 3)
	want, err := yjs.MergeUpdates(updates...)
	if err != nil {
		t.Fatal(err)
	}
	for _, be := range crdtStores() {
		t.Run(be.name, func(t *testing.T) {
			f := newCRDTFixture(t, be.open(t), map[string]partition.Merger{"lines": yjs.Merger{}, "refusing": refusing}) // the doc column, merged as a Yjs document
			clients := []*client{f.client("alice", "ca"), f.client("bob", "cb"), f.client("carol", "cc")}
			rows := []string{"n1", "n2"}
			for _, id := range rows {
				wantApplied(t, clients[0].push("create-"+id, upsert("notes", id, f.note(id, "T", nil), ver(0))))
			}
			type sent struct {
				c    *client
				ccid string
				op   ssp2.Operation
			}
			var outbox []sent
			for i := range updates {
				for r, id := range rows {
					u := updates[i]
					if r == 1 {
						u = updates[len(updates)-1-i] // n2 gets them in reverse order
					}
					s := sent{clients[(i+r)%len(clients)], fmt.Sprintf("u%d-%s", i, id), upsert("notes", id, f.notePatch(id, nil, u, true), nil)}
					wantApplied(t, s.c.push(s.ccid, s.op))
					outbox = append(outbox, s)
				}
			}
			stored := f.stored("r1")
			for _, id := range rows {
				row := stored[id]
				if row.ServerVersion != int64(1+len(updates)) || !bytes.Equal(row.Values[3].([]byte), want) {
					t.Fatalf("%s: stored doc v%d (%d bytes) differs from merging all %d updates (%d bytes)", id, row.ServerVersion, len(row.Values[3].([]byte)), len(updates), len(want))
				}
			}
			// A crdt-only patch with the baseVersion read before the others'
			// edits merges (a no-op here: the update is in already)...
			wantApplied(t, clients[1].push("stale-doc", upsert("notes", "n1", f.notePatch("n1", nil, updates[0], true), ver(1))))
			// ...while one that also edits the title, which carol moved
			// meanwhile, conflicts on the title and sees the merged doc.
			t2 := "T2"
			wantApplied(t, clients[2].push("title", upsert("notes", "n1", f.notePatch("n1", &t2, nil, false), nil)))
			version := int64(3 + len(updates))
			t3 := "T3"
			stale := clients[1].push("stale", upsert("notes", "n1", f.notePatch("n1", &t3, updates[0], true), ver(1)))
			f.wantConflict(stale, 0, version, "T2", want, 2)
			for _, s := range outbox {
				if pr := s.c.push(s.ccid, s.op); pr.Status != ssp2.CommitCached {
					t.Fatalf("replay of %s = %+v, want cached", s.ccid, pr)
				}
			}
			// A client bypassing idempotency re-pushes an old update under a
			// new id: the merge is a no-op on the document.
			wantApplied(t, clients[0].push("u0-again", outbox[0].op))
			again := f.stored("r2")
			if a := again["n1"]; a.ServerVersion != version+1 || !bytes.Equal(a.Values[3].([]byte), want) {
				t.Fatalf("after replays: v%d, doc changed %v", a.ServerVersion, !bytes.Equal(a.Values[3].([]byte), want))
			}
			if a := again["n2"]; a.ServerVersion != int64(1+len(updates)) || !bytes.Equal(a.Values[3].([]byte), want) {
				t.Fatalf("n2 after replays: v%d, doc changed %v", a.ServerVersion, !bytes.Equal(a.Values[3].([]byte), want))
			}
		})
	}
}

// TestNewRefusesUnmergeableCRDTType (SPEC §5.10.1): an engine whose schema
// has a crdt column with no merger for its crdtType does not start, and the
// error names the table, the column and the crdtType.
func TestNewRefusesUnmergeableCRDTType(t *testing.T) {
	sch, err := schema.ParseWith([]byte(crdtSchemaJSON), schema.Options{CRDTTypes: []string{"lines", "refusing"}})
	if err != nil {
		t.Fatal(err)
	}
	lines := partition.MergerFunc(linesMerge)
	cases := []struct {
		name    string
		mergers map[string]partition.Merger
		want    string
	}{
		{"no registry", nil, `table "notes" column "doc": crdtType "lines" has no registered merger`},
		{"one type missing", map[string]partition.Merger{"lines": lines}, `table "orphans" column "doc": crdtType "refusing" has no registered merger`},
		{"nil merger", map[string]partition.Merger{"lines": nil, "refusing": refusing}, `table "notes" column "doc": crdtType "lines"`},
		{"only other types", map[string]partition.Merger{yjs.CRDTType: yjs.Merger{}}, `crdtType "lines"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(), Resolver: engine.AllowAll(sch), Mergers: c.mergers})
			if err == nil {
				eng.Close()
				t.Fatal("engine.New accepted a crdtType without a merger")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to contain %q", err, c.want)
			}
		})
	}
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(), Resolver: engine.AllowAll(sch),
		Mergers: map[string]partition.Merger{"lines": lines, "refusing": refusing}})
	if err != nil {
		t.Fatalf("every crdtType registered: %v", err)
	}
	eng.Close()
}
