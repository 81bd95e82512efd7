package storagetest

import (
	"fmt"
	"slices"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// admin returns the backend's Admin role (the Admin cases run only on a
// backend that has it).
func (e *env) admin() storage.AdminReader { return e.b.Admin }

func partitionNames(ps []storage.PartitionOverview) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Partition)
	}
	return out
}

func clientIDs(cs []storage.ClientRecord) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ClientID)
	}
	return out
}

func commitSeqs(cs []storage.CommitRecord) []int64 {
	var out []int64
	for _, c := range cs {
		out = append(out, c.Seq)
	}
	return out
}

var adminTests = []test{
	{name: "PartitionsPagedWithActivity", fn: func(e *env) {
		a := e.admin()
		for _, p := range []string{"b", "a", "c"} {
			e.touch(p)
		}
		e.commitChanges("b", upsert("items", "i1", 1, sc("project", "x", "owner", "1")))
		e.commitChanges("b", upsert("notes", "n1", 1, sc("project", "x")))
		if err := e.b.Clients.PutClient(e.ctx, "b", storage.ClientRecord{ClientID: "c1", ActorID: "u", Cursor: 2, UpdatedAtMs: 50},
			storage.ClientRecord{ClientID: "c2", ActorID: "u", Cursor: 1, UpdatedAtMs: 70}); err != nil {
			e.t.Fatal(err)
		}
		// An admin read of an unknown partition creates nothing.
		if cs, err := a.AdminClients(e.ctx, "ghost", "", 10); err != nil || len(cs) != 0 {
			e.t.Fatalf("AdminClients(ghost) = %v, %v; want empty", cs, err)
		}
		page1, err := a.AdminPartitions(e.ctx, "", 2)
		if err != nil {
			e.t.Fatal(err)
		}
		if got := partitionNames(page1); !slices.Equal(got, []string{"a", "b"}) {
			e.t.Fatalf("page 1 = %v, want [a b]", got)
		}
		page2, err := a.AdminPartitions(e.ctx, "b", 2)
		if err != nil {
			e.t.Fatal(err)
		}
		if got := partitionNames(page2); !slices.Equal(got, []string{"c"}) {
			e.t.Fatalf("page 2 = %v, want [c] (ghost must not exist)", got)
		}
		b := page1[1]
		want := storage.PartitionOverview{PartitionInfo: e.readPartition("b"), Clients: 2, LastClientAtMs: 70,
			LastCommitAtMs: 1_700_000_000_000 + 2}
		if b != want {
			e.t.Fatalf("b = %+v, want %+v", b, want)
		}
		one, err := a.AdminPartition(e.ctx, "b")
		if err != nil || one != want {
			e.t.Fatalf("AdminPartition(b) = %+v, %v; want %+v", one, err, want)
		}
		if g, err := a.AdminPartition(e.ctx, "ghost"); err != nil || g.Exists || g.Partition != "ghost" || g.Clients != 0 {
			e.t.Fatalf("AdminPartition(ghost) = %+v, %v; want not existing", g, err)
		}
		if a0 := page1[0]; a0.Clients != 0 || a0.LastCommitAtMs != 0 || a0.MaxCommitSeq != 0 || !a0.Exists {
			e.t.Fatalf("a = %+v, want an existing empty partition", a0)
		}
	}},
	{name: "ClientsPaged", fn: func(e *env) {
		a := e.admin()
		e.touch("p")
		var recs []storage.ClientRecord
		for i := range 7 {
			recs = append(recs, storage.ClientRecord{ClientID: fmt.Sprintf("c%02d", 6-i), ActorID: "u", Cursor: int64(i),
				WireVersion: 2, UpdatedAtMs: int64(100 + i), Subscriptions: []byte(`[]`)})
		}
		if err := e.b.Clients.PutClient(e.ctx, "p", recs...); err != nil {
			e.t.Fatal(err)
		}
		var all []string
		after := ""
		for range 4 {
			page, err := a.AdminClients(e.ctx, "p", after, 3)
			if err != nil {
				e.t.Fatal(err)
			}
			if len(page) > 3 {
				e.t.Fatalf("page of %d > limit 3", len(page))
			}
			if len(page) == 0 {
				break
			}
			all = append(all, clientIDs(page)...)
			after = page[len(page)-1].ClientID
		}
		want := []string{"c00", "c01", "c02", "c03", "c04", "c05", "c06"}
		if !slices.Equal(all, want) {
			e.t.Fatalf("paged clients = %v, want %v", all, want)
		}
		one, err := a.AdminClients(e.ctx, "p", "c02", 1)
		if err != nil || len(one) != 1 || one[0].ClientID != "c03" || one[0].Cursor != 3 || one[0].UpdatedAtMs != 103 || one[0].WireVersion != 2 {
			e.t.Fatalf("client after c02 = %+v, %v", one, err)
		}
	}},
	{name: "CommitsNewestFirstWithChanges", fn: func(e *env) {
		a := e.admin()
		for i := range 5 {
			e.commitChanges("p", upsert("items", fmt.Sprintf("i%d", i), 1, sc("project", "x", "owner", "1")),
				del("notes", "n", sc("project", "y")))
		}
		e.commitChanges("q", upsert("items", "other", 1, sc("project", "x", "owner", "1")))
		page, err := a.AdminCommits(e.ctx, "p", 0, 2)
		if err != nil {
			e.t.Fatal(err)
		}
		if got := commitSeqs(page); !slices.Equal(got, []int64{5, 4}) {
			e.t.Fatalf("first page = %v, want [5 4]", got)
		}
		next, err := a.AdminCommits(e.ctx, "p", 4, 10)
		if err != nil {
			e.t.Fatal(err)
		}
		if got := commitSeqs(next); !slices.Equal(got, []int64{3, 2, 1}) {
			e.t.Fatalf("next page = %v, want [3 2 1]", got)
		}
		c := next[0]
		if c.ActorID != "actor-3" || c.ClientCommitID != "cc-3" || c.ClientID != "client" || c.CreatedAtMs != 1_700_000_000_003 {
			e.t.Fatalf("commit 3 = %+v", c)
		}
		if len(c.Changes) != 2 || c.Changes[0].Table != "items" || c.Changes[0].RowID != "i2" || c.Changes[0].Op != ssp2.OpUpsert ||
			c.Changes[0].Scopes["project"] != "x" || c.Changes[1].Table != "notes" || c.Changes[1].Op != ssp2.OpDelete {
			e.t.Fatalf("commit 3 changes = %+v", c.Changes)
		}
		if !changeEqual(c.Changes[0], upsert("items", "i2", 1, sc("project", "x", "owner", "1"))) {
			e.t.Fatalf("commit 3 change 0 = %+v", c.Changes[0])
		}
	}},
	{name: "RowReadOnly", fn: func(e *env) {
		a := e.admin()
		e.push("p", func(tx storage.PushTx) { e.put(tx, e.items, 3, item("i1", "x", 7)) })
		got, err := a.AdminRow(e.ctx, "p", e.items, "i1")
		if err != nil {
			e.t.Fatal(err)
		}
		e.wantRow("admin row", got, storage.RowRecord{RowID: "i1", Version: 3, Values: item("i1", "x", 7)})
		for _, q := range []struct{ part, id string }{{"p", "nope"}, {"q", "i1"}, {"p", "bad\x00id"}} {
			if r, err := a.AdminRow(e.ctx, q.part, e.items, q.id); err != nil || r != nil {
				e.t.Fatalf("AdminRow(%q, %q) = %+v, %v; want nil", q.part, q.id, r, err)
			}
		}
	}},
}
