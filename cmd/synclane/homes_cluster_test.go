package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// A cluster of two members on two PostgreSQL databases: a partition the
// directory places in the second database is written through both
// members (the non-owner forwards to the owner); its log, rows and
// ownership row are in the second database only (fencing stays local to
// the data); after kill -9 of its owner the other member claims it there,
// at a higher ownership generation, and its log goes on densely.
func TestClusterSeveralDatabases(t *testing.T) {
	second := pgtest.NewDatabase(t, pgtest.URL(t))
	c := startCluster(t, clusterOptions{members: 2, leaseTTL: 2 * time.Second, args: []string{"--postgres-databases", "second=" + second.URL}})
	a, b := c.members[0], c.members[1]
	var p string
	for i := 0; p == ""; i++ {
		if i == 400 {
			t.Fatal("no partition of home second owned by b among 400")
		}
		cand := fmt.Sprint("hc-", i)
		if homes.Rendezvous([]string{homes.Main, "second"}, cand) == "second" && a.mustView(t, cand).Owner == b.base && b.mustView(t, cand).Owner == b.base {
			p = cand
		}
	}
	ctx := context.Background()
	cl := newClusterClient(nil, "ada", "hc-client", p)
	for k, via := range []*clusterMember{a, b, a} {
		res, ans, err := cl.push(ctx, via, todoCommit(fmt.Sprint("hc-commit-", k), fmt.Sprint("hc-todo-", k), "L"))
		if ans != answered || res.Status != ssp2.CommitApplied || res.CommitSeq == nil || *res.CommitSeq != int64(k+1) {
			t.Fatalf("push %d through %s: %s %+v %v, want applied as seq %d", k, via.name, ans, res, err, k+1)
		}
	}
	conn, err := pgx.Connect(ctx, second.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	row := func() (owner string, gen, maxSeq int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT owner, owner_generation, max_commit_seq FROM sync_partitions WHERE partition = $1`, p).Scan(&owner, &gen, &maxSeq); err != nil {
			t.Fatalf("%s's registry row in the second database: %v", p, err)
		}
		return owner, gen, maxSeq
	}
	owner, g1, maxSeq := row()
	if owner != b.base || g1 < 1 || maxSeq != 3 {
		t.Fatalf("%s in the second database: owner %q generation %d max seq %d, want %s, >= 1, 3", p, owner, g1, maxSeq, b.base)
	}
	if o, _, _ := c.ownerRow(t, p); o != "" {
		t.Fatalf("%s has an ownership row in main (owner %q): ownership must stay with the data", p, o)
	}

	b.kill(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, ans, err := cl.push(ctx, a, todoCommit("hc-commit-after", "hc-todo-after", "L"))
		if ans == answered && res.Status == ssp2.CommitApplied {
			if res.CommitSeq == nil || *res.CommitSeq != 4 {
				t.Fatalf("push after the kill: %+v, want seq 4", res)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("push after kill -9 of the owner: %s %+v %v", ans, res, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	owner, g2, maxSeq := row()
	if owner != a.base || g2 <= g1 || maxSeq != 4 {
		t.Fatalf("after the kill: owner %q generation %d max seq %d, want %s above %d, 4", owner, g2, maxSeq, a.base, g1)
	}
	var seqs []int64
	rows, err := conn.Query(ctx, `SELECT seq FROM sync_commits WHERE partition = $1 ORDER BY seq`, p)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || fmt.Sprint(seqs) != "[1 2 3 4]" {
		t.Fatalf("log of %s in the second database: %v %v, want [1 2 3 4]", p, seqs, err)
	}
}
