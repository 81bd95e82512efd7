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

// A cluster of two members on two databases: a partition of main, owned
// by b, is moved to the second database by synclane partitions move (a
// process of its own) while both members serve it; afterwards its log
// (dense, same seqs) and ownership row (same owner, same generation) are
// in the second database only, and pushes through either member go on
// at the next seqs (the owner's stale cached entry costs at most a
// retryable 503).
func TestClusterMovePartition(t *testing.T) {
	second := pgtest.NewDatabase(t, pgtest.URL(t))
	c := startCluster(t, clusterOptions{members: 2, leaseTTL: 2 * time.Second, args: []string{"--postgres-databases", "second=" + second.URL}})
	a, b := c.members[0], c.members[1]
	var p string
	for i := 0; p == ""; i++ {
		if i == 400 {
			t.Fatal("no partition of home main owned by b among 400")
		}
		cand := fmt.Sprint("cm-", i)
		if homes.Rendezvous([]string{homes.Main, "second"}, cand) == homes.Main && a.mustView(t, cand).Owner == b.base && b.mustView(t, cand).Owner == b.base {
			p = cand
		}
	}
	ctx := context.Background()
	cl := newClusterClient(nil, "ada", "cm-client", p)
	push := func(k int, via *clusterMember) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			res, ans, err := cl.push(ctx, via, todoCommit(fmt.Sprint("cm-commit-", k), fmt.Sprint("cm-todo-", k), "L"))
			if ans == answered && res.Status == ssp2.CommitApplied {
				if res.CommitSeq == nil || *res.CommitSeq != int64(k+1) {
					t.Fatalf("push %d through %s: %+v, want seq %d", k, via.name, res, k+1)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("push %d through %s: %s %+v %v", k, via.name, ans, res, err)
			}
			time.Sleep(50 * time.Millisecond) // the client's back-off after a 503
		}
	}
	for k, via := range []*clusterMember{a, b, a} {
		push(k, via)
	}
	conn := func(url string) *pgx.Conn {
		cn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cn.Close(ctx) })
		return cn
	}
	mainConn, secondConn := conn(c.memberURL("test")), conn(second.URL)
	var owner1 string
	var g1 int64
	if err := mainConn.QueryRow(ctx, `SELECT owner, owner_generation FROM sync_partitions WHERE partition = $1`, p).Scan(&owner1, &g1); err != nil || owner1 != b.base {
		t.Fatalf("%s's ownership row in main: %q %d %v", p, owner1, g1, err)
	}
	code, stdout, stderr := runCmd(t, "partitions", "move", p, "--to", "second", "--postgres", c.memberURL("mover"), "--postgres-databases", "second="+second.URL)
	if code != 0 {
		t.Fatalf("partitions move: exit %d %s %s", code, stdout, stderr)
	}
	for k, via := range []*clusterMember{a, b, a} {
		push(3+k, via)
	}
	var owner2 string
	var g2 int64
	if err := secondConn.QueryRow(ctx, `SELECT owner, owner_generation FROM sync_partitions WHERE partition = $1`, p).Scan(&owner2, &g2); err != nil || owner2 != owner1 || g2 != g1 {
		t.Fatalf("%s's ownership row in the second database: %q %d (%v), want %q %d", p, owner2, g2, err, owner1, g1)
	}
	rows, err := secondConn.Query(ctx, `SELECT seq FROM sync_commits WHERE partition = $1 ORDER BY seq`, p)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || fmt.Sprint(seqs) != "[1 2 3 4 5 6]" {
		t.Fatalf("log of %s in the second database: %v %v", p, seqs, err)
	}
	var inMain int
	if err := mainConn.QueryRow(ctx, `SELECT count(*) FROM sync_commits WHERE partition = $1`, p).Scan(&inMain); err != nil || inMain != 0 {
		t.Fatalf("main still holds %d commits of %s (%v)", inMain, p, err)
	}
}
