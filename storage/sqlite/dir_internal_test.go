package sqlite

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage"
)

// openTestDir opens a files-file directory with the demo schema, closed
// when t ends.
func openTestDir(t *testing.T, files int, opts Options) *Dir {
	t.Helper()
	d, err := OpenDir(context.Background(), t.TempDir(), DirOptions{Files: files, FilesExplicit: true, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.EnsureSchema(context.Background(), schema.MustDemo()); err != nil {
		t.Fatal(err)
	}
	return d
}

// partitionOf returns a partition id with prefix that lives in file f of
// k.
func partitionOf(f, k int, prefix string) string {
	for i := 0; ; i++ {
		if p := prefix + strconv.Itoa(i); FileOf(p, k) == f {
			return p
		}
	}
}

// TestDirQueryHoldsNoReadConnWhileReadingOtherFiles: a query of a
// partition of file 0 that has to read the other files' pending
// checkpoints must not hold a read connection of file 0 while it waits
// for one of file 1. If it did, queries of file 0 waiting for file 1's
// pool and queries of file 1 waiting for file 0's (each holding its own
// file's connections) would deadlock: with ReadConns 1, two concurrent
// queries of partitions of different files are enough.
func TestDirQueryHoldsNoReadConnWhileReadingOtherFiles(t *testing.T) {
	ctx := t.Context()
	d := openTestDir(t, 2, Options{ReadConns: 1})
	p0 := partitionOf(0, 2, "q")
	// file 1's only read connection is busy (as a query of file 1 would
	// hold it)
	c1, err := d.files[1].rdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waits := d.files[1].rdb.Stats().WaitCount
	type result struct {
		res storage.QueryResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		qctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		res, err := d.Query(qctx, p0, 1, storage.Query{Parts: []storage.QueryPart{{Text: "SELECT 1 AS x"}}, MaxRows: 10},
			func(storage.ServeGate) error { return nil })
		done <- result{res, err}
	}()
	// the query waits for file 1's pool (its gate needs file 1's pending
	// checkpoints, never read yet)
	for d.files[1].rdb.Stats().WaitCount == waits {
		select {
		case r := <-done:
			t.Fatalf("query finished without file 1's read connection: %+v", r)
		case <-time.After(time.Millisecond):
		}
	}
	// meanwhile file 0's read connection is free for another reader
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	c0, err := d.files[0].rdb.Conn(cctx)
	cancel()
	if err != nil {
		_ = c1.Close()
		<-done
		t.Fatalf("a query waiting for file 1's read pool holds file 0's read connection (a cross-file deadlock): %v", err)
	}
	_ = c0.Close()
	_ = c1.Close()
	r := <-done
	if r.err != nil || len(r.res.Rows) != 1 {
		t.Fatalf("query = %+v, %v; want one row", r.res, r.err)
	}
}

// TestDirClaimBlobLeavesHomeDurable: a push of another file claims a blob
// in a home-file transaction that commits without an fsync of its own
// (synchronous NORMAL); afterwards the home file's writer is back at
// synchronous FULL, so the pushes that follow are fsynced, whether the
// claim found the blob or not.
func TestDirClaimBlobLeavesHomeDurable(t *testing.T) {
	ctx := t.Context()
	d := openTestDir(t, 2, Options{})
	const blob = "sha256:00000000000000000000000000000000000000000000000000000000000000bb"
	if _, err := d.BeginBlobUpload(ctx, blob, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.CompleteBlobUpload(ctx, blob, 10, "text/plain", 1); err != nil {
		t.Fatal(err)
	}
	home := d.home()
	synchronous := func() int {
		t.Helper()
		var v int
		if err := home.conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	const full = 2
	if v := synchronous(); v != full {
		t.Fatalf("home writer synchronous = %d before any claim, want %d (FULL)", v, full)
	}
	for _, tc := range []struct {
		id   string
		want bool
	}{{blob, true}, {"sha256:" + strings.Repeat("c", 64), false}} {
		tx, err := d.BeginPush(ctx, partitionOf(1, 2, "claim"))
		if err != nil {
			t.Fatal(err)
		}
		ok, err := tx.ClaimBlob(ctx, tc.id, 50)
		if err != nil || ok != tc.want {
			t.Fatalf("ClaimBlob(%s) = %v, %v; want %v", tc.id, ok, err, tc.want)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if v := synchronous(); v != full {
			t.Fatalf("home writer synchronous = %d after a claim from file 1, want %d (FULL)", v, full)
		}
	}
	info, err := d.GetBlob(ctx, blob)
	if err != nil || info == nil || info.TouchedAtMs != 50 {
		t.Fatalf("blob after the claim: %+v, %v; want touched at 50 (the claim's touch committed)", info, err)
	}
}
