package engine_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/storage/storagetest/legacydb"
)

// TestDatabaseFromBeforeWireV3 opens databases written by synclane before
// wire version 3 (legacydb: the SQLite data directory and the PostgreSQL
// schema main's `synclane serve` wrote) with today's engine: it serves
// them, a row written then reads as every column at its server_version (a
// patch at an older baseVersion conflicts on exactly the columns it
// presents; at the current one it applies, and from then on versions are
// per column), and a row deleted then has no tombstone (an unversioned
// full row inserts it again).
func TestDatabaseFromBeforeWireV3(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) backend
	}{
		{"sqlite", func(t *testing.T) backend { return legacydb.OpenSQLite(t, sqlite.DirOptions{}) }},
		{"postgres", func(t *testing.T) backend { return legacydb.OpenPostgres(t, postgres.Options{MaxConns: 4}) }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			sch := legacydb.Schema()
			b := st.open(t).Backend()
			eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: b, Resolver: engine.AllowAll(sch)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { eng.Close() })
			todos := sch.Table("todos")
			f := &fixture{t: t, eng: eng, store: b, schema: sch, codec: ssp2.NewRowCodec(todos.Columns)}
			c := &client{f: f, id: engine.Identity{ActorID: "upgrader", Partition: legacydb.Partitions[0]}, cid: "after-v3", wire: ssp2.WireV3, sv: sch.Version}
			rep, err := c.sync(&ssp2.PullHeader{Accept: 1})
			if err != nil || !rep.Header().ResetRequired {
				t.Fatalf("epoch handshake: %v %+v", err, rep)
			}
			c.epoch = &rep.Header().LogEpoch
			// The old rows are served as they were.
			s := c.pull(ssp2.PullHeader{Accept: 1}, &ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"L1"}}, Cursor: -1})["s"]
			if len(s.rows) != len(legacydb.Rows) {
				t.Fatalf("bootstrap served %d rows, want %d", len(s.rows), len(legacydb.Rows))
			}
			for i, r := range s.rows {
				if r.ServerVersion != legacydb.Rows[i].Version || r.Values[2] != legacydb.Rows[i].Title {
					t.Fatalf("row %d served as v%d %v, want %+v", i, r.ServerVersion, r.Values, legacydb.Rows[i])
				}
			}
			old := legacydb.Rows[0] // t1 at version 3
			patch := func(cols map[int]any) []byte {
				row := make(ssp2.Row, len(todos.Columns))
				present := ssp2.NewColumnSet(len(todos.Columns))
				row[0] = old.ID
				present.Add(0)
				for col, v := range cols {
					row[col] = v
					present.Add(col)
				}
				b, err := f.codec.AppendSparse(nil, row, present, todos.PK)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			// A patch at baseVersion 2 of a row at 3 with no column versions:
			// every column reads as 3, so both presented columns contend.
			pr := c.push("stale", ssp2.Operation{Table: "todos", RowID: old.ID, Op: ssp2.OpUpsert, BaseVersion: ver(old.Version - 1),
				Payload: patch(map[int]any{2: "stale title", 3: true})})
			r := wantRejected(t, pr, syncerr.VersionConflict)
			want := ssp2.NewColumnSet(len(todos.Columns))
			want.Add(2)
			want.Add(3)
			if r.ServerVersion != old.Version || !bytes.Equal(r.ConflictColumns, want) {
				t.Fatalf("conflict on the old row: %+v, want serverVersion %d conflictColumns %08b", r, old.Version, want)
			}
			// At the current version it applies; the done column moves to 4,
			// the title stays at 3, so a title patch at 3 applies too.
			wantApplied(t, c.push("done", ssp2.Operation{Table: "todos", RowID: old.ID, Op: ssp2.OpUpsert, BaseVersion: ver(old.Version),
				Payload: patch(map[int]any{3: true})}))
			wantApplied(t, c.push("title", ssp2.Operation{Table: "todos", RowID: old.ID, Op: ssp2.OpUpsert, BaseVersion: ver(old.Version),
				Payload: patch(map[int]any{2: "new title"})}))
			// The row deleted before tombstones existed has none.
			full := legacydb.Row{ID: legacydb.DeletedRow, Title: "back", Position: 3}.Values()
			payload, err := f.codec.AppendSparse(nil, full, nil, todos.PK)
			if err != nil {
				t.Fatal(err)
			}
			wantApplied(t, c.push("back", ssp2.Operation{Table: "todos", RowID: legacydb.DeletedRow, Op: ssp2.OpUpsert, Payload: payload}))
			info, err := b.Log.ReadPartition(context.Background(), legacydb.Partitions[0])
			if err != nil || info.MaxCommitSeq != legacydb.MaxCommitSeq+3 {
				t.Fatalf("partition after three commits: %+v %v", info, err)
			}
		})
	}
}
