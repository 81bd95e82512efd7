package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	open func(t *testing.T) storage.Store
} {
	return []struct {
		name string
		open func(t *testing.T) storage.Store
	}{
		{"memory", func(*testing.T) storage.Store { return memory.New() }},
		{"sqlite", func(t *testing.T) storage.Store {
			st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
		{"postgres", func(t *testing.T) storage.Store {
			return pgtest.OpenSchema(t, pgtest.NewSchema(t), postgres.Options{MaxConns: 4})
		}},
	}
}

type crdtFixture struct {
	*fixture
	notes *ssp2.RowCodec
}

func newCRDTFixture(t *testing.T, st storage.Store, mergers map[string]partition.Merger) *crdtFixture {
	t.Helper()
	sch, err := schema.Parse([]byte(crdtSchemaJSON))
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
	b, err := f.notes.Append(nil, ssp2.Row{id, "P", title, d})
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

func wantApplied(t *testing.T, pr *ssp2.PushResult) {
	t.Helper()
	if pr.Status != ssp2.CommitApplied {
		t.Fatalf("push %s: status %d results %+v, want applied", pr.ClientCommitID, pr.Status, pr.Results)
	}
}

// TestCRDTPushRules runs the SPEC §5.10.3 rules end to end on every backend:
// clean applies merge and bump the version, crdt-only edits never conflict
// whatever their baseVersion, a non-crdt conflict merges nothing and shows
// the merged state in serverRow, a replay is cached and not re-merged, and
// a failing merger rolls the commit back with
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

			wantApplied(t, a.push("a1", upsert("notes", "n1", f.note("n1", "T", []byte("x\na")), ver(0))))
			// Both clients edit the doc from version 1: neither conflicts.
			wantApplied(t, b.push("b1", upsert("notes", "n1", f.note("n1", "T", []byte("b")), ver(1))))
			wantApplied(t, a.push("a2", upsert("notes", "n1", f.note("n1", "T", []byte("c")), ver(1))))
			// Last-write-wins pushes merge too; NULL carries no update.
			wantApplied(t, b.push("b2", upsert("notes", "n1", f.note("n1", "T", nil), nil)))
			row := f.stored("r1")["n1"]
			if row.ServerVersion != 4 || !bytes.Equal(row.Values[3].([]byte), []byte("a\nb\nc\nx")) {
				t.Fatalf("merged row = v%d %q, want v4 %q", row.ServerVersion, row.Values[3], "a\nb\nc\nx")
			}

			// A stale push changing a non-crdt column conflicts; serverRow
			// carries the merged doc and nothing of this push is merged.
			pr := a.push("a3", upsert("notes", "n1", f.note("n1", "T2", []byte("lost")), ver(2)))
			if pr.Status != ssp2.CommitRejected || len(pr.Results) != 1 || pr.Results[0].Status != ssp2.OpConflict {
				t.Fatalf("stale title push = %+v, want a conflict", pr)
			}
			sr, err := f.notes.Decode(pr.Results[0].ServerRow)
			if err != nil {
				t.Fatal(err)
			}
			if pr.Results[0].ServerVersion != 4 || !bytes.Equal(sr[3].([]byte), []byte("a\nb\nc\nx")) || sr[2] != "T" {
				t.Fatalf("conflict serverRow = v%d %q", pr.Results[0].ServerVersion, sr)
			}

			// A replay is answered from the idempotency record: cached, the
			// same seq, no merge.
			before := calls
			first := a.push("a2-again", upsert("notes", "n1", f.note("n1", "T", []byte("d")), nil))
			wantApplied(t, first)
			replayed := a.push("a2-again", upsert("notes", "n1", f.note("n1", "T", []byte("d")), nil))
			if replayed.Status != ssp2.CommitCached || *replayed.CommitSeq != *first.CommitSeq || calls != before+1 {
				t.Fatalf("replay = %+v after %d merges, want cached seq %d after 1", replayed, calls-before, *first.CommitSeq)
			}

			// A failing merger: the whole commit rolls back.
			pr = a.push("a4",
				upsert("notes", "n2", f.note("n2", "T", []byte("kept?")), nil),
				upsert("orphans", "o1", orphan(t, f, "o1"), nil))
			if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.CRDTMergeFailed) || pr.Results[0].OpIndex != 1 || pr.Results[0].Retryable {
				t.Fatalf("failing merger = %+v, want rejected %s at op 1", pr, syncerr.CRDTMergeFailed)
			}
			if _, ok := f.stored("r2")["n2"]; ok {
				t.Fatal("the sibling op of a failed merge was applied")
			}
			// A replay of the rejected commit answers the same rejection.
			if again := a.push("a4", upsert("notes", "n2", f.note("n2", "T", nil), nil)); again.Status != ssp2.CommitRejected || again.Results[0].Code != string(syncerr.CRDTMergeFailed) {
				t.Fatalf("replayed rejection = %+v", again)
			}
			// The server keeps serving: the next push applies.
			wantApplied(t, b.push("b3", upsert("notes", "n1", f.note("n1", "T", []byte("e")), ver(5))))
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

func orphan(t *testing.T, f *crdtFixture, id string) []byte {
	t.Helper()
	b, err := ssp2.NewRowCodec(f.eng.Schema().Table("orphans").Columns).Append(nil, ssp2.Row{id, "P", []byte("u")})
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

// TestCRDTYjsConvergence: two clients push the Yjs updates of concurrent
// edit histories to one crdt column, in an interleaved order and with stale
// baseVersions. Every push applies (crdt edits never conflict among
// themselves), the stored document is byte-identical to merging all the
// updates at once (so independent of arrival order), and an offline
// outbox replayed in full is answered cached without a new merge or
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
			a, b := f.client("alice", "ca"), f.client("bob", "cb")
			wantApplied(t, a.push("a-create", upsert("notes", "n1", f.note("n1", "T", nil), ver(0))))
			type sent struct {
				c    *client
				ccid string
				op   ssp2.Operation
			}
			var outbox []sent
			for i, u := range updates {
				c, base := a, ver(1) // both clients edit from version 1
				if i%2 == 1 {
					c = b
				}
				if i%3 == 2 {
					base = nil
				}
				s := sent{c, fmt.Sprintf("u%d", i), upsert("notes", "n1", f.note("n1", "T", u), base)}
				wantApplied(t, c.push(s.ccid, s.op))
				outbox = append(outbox, s)
			}
			row := f.stored("r1")["n1"]
			if row.ServerVersion != int64(1+len(updates)) || !bytes.Equal(row.Values[3].([]byte), want) {
				t.Fatalf("stored doc v%d (%d bytes) differs from merging all %d updates (%d bytes)", row.ServerVersion, len(row.Values[3].([]byte)), len(updates), len(want))
			}
			for _, s := range outbox {
				if pr := s.c.push(s.ccid, s.op); pr.Status != ssp2.CommitCached {
					t.Fatalf("replay of %s = %+v, want cached", s.ccid, pr)
				}
			}
			// A client bypassing idempotency re-pushes an old update under a
			// new id: the merge is a no-op on the document.
			wantApplied(t, a.push("u0-again", outbox[0].op))
			again := f.stored("r2")["n1"]
			if again.ServerVersion != row.ServerVersion+1 || !bytes.Equal(again.Values[3].([]byte), want) {
				t.Fatalf("after replays: v%d, doc changed %v", again.ServerVersion, !bytes.Equal(again.Values[3].([]byte), want))
			}
		})
	}
}

// TestNewRefusesUnmergeableCRDTType (SPEC §5.10.1): an engine whose schema
// has a crdt column with no merger for its crdtType does not start, and the
// error names the table, the column and the crdtType.
func TestNewRefusesUnmergeableCRDTType(t *testing.T) {
	sch, err := schema.Parse([]byte(crdtSchemaJSON))
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
			eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Store: memory.New(), Resolver: engine.AllowAll(sch), Mergers: c.mergers})
			if err == nil {
				eng.Close()
				t.Fatal("engine.New accepted a crdtType without a merger")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to contain %q", err, c.want)
			}
		})
	}
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Store: memory.New(), Resolver: engine.AllowAll(sch),
		Mergers: map[string]partition.Merger{"lines": lines, "refusing": refusing}})
	if err != nil {
		t.Fatalf("every crdtType registered: %v", err)
	}
	eng.Close()
}
