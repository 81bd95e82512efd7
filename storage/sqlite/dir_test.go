package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/storage/storagetest"
)

// openDir opens a K-file directory with storagetest's schema v1, closed
// when t ends.
func openDir(t testing.TB, dir string, files int) (*sqlite.Dir, storage.Backend, *schema.Table) {
	t.Helper()
	d, err := sqlite.OpenDir(context.Background(), dir, sqlite.DirOptions{Files: files, FilesExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	sch := storagetest.MustParse(storagetest.SchemaV1)
	b := d.Backend()
	if err := b.Lifecycle.EnsureSchema(context.Background(), sch); err != nil {
		t.Fatal(err)
	}
	return d, b, sch.Table("items")
}

// putReaction commits one reaction "h" (commit seq 1, created at 1 ms,
// up to maxAttempts attempts) to partition p.
func putReaction(t testing.TB, b storage.Backend, p string, maxAttempts int) {
	t.Helper()
	tx, err := b.Log.BeginPush(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.PutReactions(t.Context(), []storage.NewReaction{{Name: "h", MaxAttempts: maxAttempts, CommitSeq: 1, CreatedAtMs: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// makeDir creates a directory of files database files (not explicit, as
// serve's default) and closes it.
func makeDir(t testing.TB, dir string, files int) {
	t.Helper()
	d, err := sqlite.OpenDir(t.Context(), dir, sqlite.DirOptions{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// pushOne commits one single-row commit (row id, seq next) to partition
// and returns its seq.
func pushOne(ctx context.Context, b storage.Backend, items *schema.Table, partition, rowID, cid string) (int64, error) {
	tx, err := b.Log.BeginPush(ctx, partition)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	cur, err := tx.GetRow(ctx, items, rowID)
	if err != nil {
		return 0, err
	}
	ver := int64(1)
	if cur != nil {
		ver = cur.Version + 1
	}
	row := ssp2.Row{rowID, "p1", int64(1), "title " + cid, int64(1), nil, true, nil, nil, nil, nil, nil}
	if err := tx.PutRow(ctx, items, storage.RowRecord{RowID: rowID, Version: ver, Values: row}); err != nil {
		return 0, err
	}
	seq := tx.Partition().MaxCommitSeq + 1
	if err := tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: 1, ActorID: "actor", ClientID: "client", ClientCommitID: cid,
		Changes: []storage.ChangeRecord{{Table: "items", RowID: rowID, Op: ssp2.OpUpsert, RowVersion: ver, Scopes: map[string]string{"project": "p1", "owner": "1"}, Row: []byte{1}}}}); err != nil {
		return 0, err
	}
	if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "client", ClientCommitID: cid, Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte{1}}); err != nil {
		return 0, err
	}
	if err := tx.PutClients(ctx, storage.ClientRecord{ClientID: "client", ActorID: "actor"}); err != nil {
		return 0, err
	}
	return seq, tx.Commit(ctx)
}

// fillPartition pushes three commits (rows r0-r2) to partition and
// gives it a lease.
func fillPartition(t *testing.T, b storage.Backend, items *schema.Table, p string) {
	t.Helper()
	ctx := t.Context()
	for j := range 3 {
		if _, err := pushOne(ctx, b, items, p, "r"+strconv.Itoa(j), p+"-c"+strconv.Itoa(j)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Leases.SwapLease(ctx, p, storage.LeaseRecord{ClientID: "client", LeaseID: "l-" + p, ActorID: "actor", AllowedScopes: []byte("{}"), IssuedAtMs: 1, ExpiresAtMs: 2, MAC: []byte{1}}, nil); err != nil {
		t.Fatal(err)
	}
}

// partitionsByTable reads, from the database file at path, the distinct
// partition ids of every table with a partition_id column.
func partitionsByTable(t *testing.T, path string) map[string][]string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c WHERE m.type = 'table' AND c.name = 'partition_id'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	if len(tables) < 5 {
		t.Fatalf("%s: only %d tables with partition_id: %v", path, len(tables), tables)
	}
	out := map[string][]string{}
	for _, tb := range tables {
		rs, err := db.Query(`SELECT DISTINCT partition_id FROM "` + tb + `"`)
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var p string
			if err := rs.Scan(&p); err != nil {
				t.Fatal(err)
			}
			out[tb] = append(out[tb], p)
		}
		rs.Close()
	}
	return out
}

// TestDirPartitionInOneFile pushes to 40 partitions of a four-file
// directory and reads every file back table by table: each row of every
// table with a partition id is in the file FileOf names, and every file
// got partitions.
func TestDirPartitionInOneFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d, b, items := openDir(t, dir, 4)
	for i := range 40 {
		fillPartition(t, b, items, "part-"+strconv.Itoa(i))
	}
	paths := d.Paths()
	if len(paths) != 4 {
		t.Fatalf("Paths() = %v", paths)
	}
	perFile := make([]int, 4)
	for i, path := range paths {
		for tb, ps := range partitionsByTable(t, path) {
			for _, p := range ps {
				if f := sqlite.FileOf(p, 4); f != i {
					t.Errorf("%s: table %s holds partition %q of file %d", filepath.Base(path), tb, p, f)
				}
			}
			if tb == "sync_partitions" {
				perFile[i] = len(ps)
			}
		}
	}
	sum := 0
	for i, n := range perFile {
		if n == 0 {
			t.Errorf("file %d got no partition of 40", i)
		}
		sum += n
	}
	if sum != 40 {
		t.Errorf("partitions over the files = %v, want 40 in all", perFile)
	}
	ps, err := b.Retention.ListPartitions(ctx)
	if err != nil || len(ps) != 40 {
		t.Fatalf("ListPartitions = %d, %v", len(ps), err)
	}
	for i := 1; i < len(ps); i++ {
		if ps[i-1].Partition >= ps[i].Partition {
			t.Fatalf("ListPartitions out of order at %d: %q, %q", i, ps[i-1].Partition, ps[i].Partition)
		}
	}
	// admin pages walk every file in id order
	var seen []string
	after := ""
	for {
		page, err := b.Admin.AdminPartitions(ctx, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, p := range page {
			seen = append(seen, p.Partition)
		}
		after = page[len(page)-1].Partition
	}
	if len(seen) != 40 {
		t.Fatalf("admin pages saw %d partitions, want 40", len(seen))
	}
}

// TestDirLayout: a directory keeps the number of files it was made with;
// a single-file directory (sqlite.Open) opens as one file; a missing or
// foreign file is refused.
func TestDirLayout(t *testing.T) {
	ctx := t.Context()
	t.Run("KeepsK", func(t *testing.T) {
		dir := t.TempDir()
		makeDir(t, dir, 3)
		d, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{Files: 5})
		if err != nil {
			t.Fatal(err)
		}
		if d.Files() != 3 {
			t.Fatalf("reopened with default 5: Files() = %d, want 3", d.Files())
		}
		_ = d.Close()
		if _, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{Files: 5, FilesExplicit: true}); !errors.Is(err, sqlite.ErrFileCount) {
			t.Fatalf("explicit 5 on a 3-file directory: err = %v, want ErrFileCount", err)
		}
	})
	t.Run("SingleFileStaysOne", func(t *testing.T) {
		dir := t.TempDir()
		st, err := sqlite.Open(ctx, filepath.Join(dir, sqlite.DirFileName), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1)); err != nil {
			t.Fatal(err)
		}
		_ = st.Close()
		d, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{Files: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if d.Files() != 1 {
			t.Fatalf("single-file directory opened with %d files", d.Files())
		}
		if _, err := os.Stat(filepath.Join(dir, "synclane-1.db")); !os.IsNotExist(err) {
			t.Fatalf("a second file was created: %v", err)
		}
	})
	t.Run("MissingFile", func(t *testing.T) {
		dir := t.TempDir()
		makeDir(t, dir, 3)
		removeDB(dir, "synclane-2.db")
		if _, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{}); !errors.Is(err, sqlite.ErrLayout) {
			t.Fatalf("missing file: err = %v, want ErrLayout", err)
		}
	})
	t.Run("ForeignFile", func(t *testing.T) {
		a, b := t.TempDir(), t.TempDir()
		makeDir(t, a, 2)
		makeDir(t, b, 2)
		data, err := os.ReadFile(filepath.Join(b, "synclane-1.db"))
		if err != nil {
			t.Fatal(err)
		}
		for _, suffix := range []string{"-wal", "-shm"} {
			_ = os.Remove(filepath.Join(a, "synclane-1.db"+suffix))
		}
		if err := os.WriteFile(filepath.Join(a, "synclane-1.db"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := sqlite.OpenDir(ctx, a, sqlite.DirOptions{}); !errors.Is(err, sqlite.ErrLayout) {
			t.Fatalf("file of another directory: err = %v, want ErrLayout", err)
		}
	})
	t.Run("StrayFilesWithoutHome", func(t *testing.T) {
		// A home file gone or new next to another layout's numbered files
		// holding data (a restore or respread interrupted at the home
		// file's rename): a new layout is not stamped over them, whatever
		// K is asked for.
		for _, k := range []int{1, 2, 4} {
			dir := t.TempDir()
			d0, b, items := openDir(t, dir, 2)
			p := partitionIn(1, 2, "stray")
			fillPartition(t, b, items, p)
			if err := d0.Close(); err != nil {
				t.Fatal(err)
			}
			removeDB(dir, sqlite.DirFileName)
			d, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{Files: k, FilesExplicit: true})
			if err == nil {
				_ = d.Close()
			}
			if !errors.Is(err, sqlite.ErrLayout) || !strings.Contains(err.Error(), "synclane-1.db") {
				t.Fatalf("K %d, no home file, synclane-1.db holding %s: err = %v, want ErrLayout naming synclane-1.db", k, p, err)
			}
		}
	})
	t.Run("InterruptedCreateIsRunAgain", func(t *testing.T) {
		// create stamps the other files before the home file's record: a
		// crash in between leaves stamped, empty files, and the next open
		// creates the directory again.
		dir := t.TempDir()
		makeDir(t, dir, 3)
		removeDB(dir, sqlite.DirFileName)
		d, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{Files: 3})
		if err != nil {
			t.Fatalf("reopening an interrupted create: %v", err)
		}
		defer d.Close()
		if d.Files() != 3 {
			t.Fatalf("Files() = %d, want 3", d.Files())
		}
	})
	t.Run("Bounds", func(t *testing.T) {
		for _, k := range []int{-1, sqlite.MaxDirFiles + 1} {
			if _, err := sqlite.OpenDir(ctx, t.TempDir(), sqlite.DirOptions{Files: k}); err == nil {
				t.Fatalf("Files %d accepted", k)
			}
		}
	})
}

// removeDB removes the database file name of dir with its -wal and -shm.
func removeDB(dir, name string) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(filepath.Join(dir, name+suffix))
	}
}

// TestFileOfStable pins the hash: it is part of the on-disk format.
func TestFileOfStable(t *testing.T) {
	for _, c := range []struct {
		p     string
		files int
		want  int
	}{{"p", 3, 0}, {"q", 3, 2}, {"s", 3, 1}, {"default", 4, sqlite.FileOf("default", 4)}, {"anything", 1, 0}} {
		if got := sqlite.FileOf(c.p, c.files); got != c.want {
			t.Errorf("FileOf(%q, %d) = %d, want %d", c.p, c.files, got, c.want)
		}
	}
	// FNV-1a 64 of "demo" is 0x0f1b4e6a7f3bd3a8... pinned through its value mod 8
	if got, want := sqlite.FileOf("demo", 8), int(fnv1a("demo")%8); got != want {
		t.Errorf("FileOf(demo, 8) = %d, want %d", got, want)
	}
}

// fnv1a is FNV-1a 64, written out.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// partitionIn returns a partition id of file f of k.
func partitionIn(f, k int, prefix string) string {
	for i := 0; ; i++ {
		p := prefix + strconv.Itoa(i)
		if sqlite.FileOf(p, k) == f {
			return p
		}
	}
}

// TestDirGatePendingAcrossFiles: a checkpoint pending in one file closes
// the gate of a partition of another file, inside a push too.
func TestDirGatePendingAcrossFiles(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d, b, _ := openDir(t, dir, 3)
	p0, p2 := partitionIn(0, 3, "a"), partitionIn(2, 3, "b")
	gate := func(p string) []storage.CheckpointRef {
		t.Helper()
		g, err := b.Checkpoints.ReadServeGate(ctx, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		return g.Pending
	}
	// read (and so remember) the other files' pending checkpoints first
	if ps := gate(p0); len(ps) != 0 {
		t.Fatalf("pending before any declaration: %v", ps)
	}
	if _, err := b.Checkpoints.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: p2, Name: "proj", SchemaVersion: 1}, 1); err != nil {
		t.Fatal(err)
	}
	want := []storage.CheckpointRef{{Partition: p2, Name: "proj"}}
	if ps := gate(p0); fmt.Sprint(ps) != fmt.Sprint(want) {
		t.Fatalf("gate of %s after the declaration: pending %v, want %v", p0, ps, want)
	}
	tx, err := b.Log.BeginPush(ctx, p0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := tx.ReadServeGate(ctx, 1)
	_ = tx.Rollback(ctx)
	if err != nil || fmt.Sprint(g.Pending) != fmt.Sprint(want) {
		t.Fatalf("gate in a push of %s: %+v, %v; want pending %v", p0, g, err, want)
	}
	if g, _ := b.Checkpoints.ReadServeGate(ctx, p0, 2); len(g.Pending) != 0 {
		t.Fatalf("gate at another version lists %v", g.Pending)
	}
	// another handle on the directory (another process) declares: seen
	// at once through the files' new checkpoint generation
	other, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ob := other.Backend()
	if err := ob.Lifecycle.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1)); err != nil && !errors.Is(err, storage.ErrCheckpointIncomplete) {
		t.Fatal(err)
	}
	p1 := partitionIn(1, 3, "c")
	if _, err := ob.Checkpoints.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: p1, Name: "x", SchemaVersion: 1}, 1); err != nil {
		t.Fatal(err)
	}
	want = []storage.CheckpointRef{{Partition: p2, Name: "proj"}, {Partition: p1, Name: "x"}}
	slices.SortFunc(want, func(a, b storage.CheckpointRef) int { return strings.Compare(a.Partition, b.Partition) })
	if ps := gate(p0); fmt.Sprint(ps) != fmt.Sprint(want) {
		t.Fatalf("gate of %s after another handle declared: %v, want %v", p0, ps, want)
	}
	// activation through the other handle opens it again everywhere
	if out, err := ob.Checkpoints.ActivateCheckpoint(ctx, p1, "x", 0, 0, nil, 2); err != nil || out != storage.Activated {
		t.Fatalf("ActivateCheckpoint = %v, %v", out, err)
	}
	want = []storage.CheckpointRef{{Partition: p2, Name: "proj"}}
	if ps := gate(p0); fmt.Sprint(ps) != fmt.Sprint(want) {
		t.Fatalf("gate of %s after the activation: %v, want %v", p0, ps, want)
	}
	// a change that gives no new generation (a process that died before
	// it did) still reaches the other files' gates within maxPendingAge
	if _, err := d.File(1).DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: p1, Name: "late", SchemaVersion: 1}, 3); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(gate(p0)) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("a declaration without a new generation not seen after 10 s: %v", gate(p0))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDirReactionIDs: reactions of partitions in different files get
// distinct ids that find their file again.
func TestDirReactionIDs(t *testing.T) {
	ctx := t.Context()
	_, b, _ := openDir(t, t.TempDir(), 3)
	var parts []string
	for f := range 3 {
		p := partitionIn(f, 3, "r")
		parts = append(parts, p)
		putReaction(t, b, p, 3)
	}
	rs, err := b.Reactions.ListReactions(ctx, storage.ReactionFilter{})
	if err != nil || len(rs) != 3 {
		t.Fatalf("ListReactions = %+v, %v", rs, err)
	}
	ids := map[int64]string{}
	for _, r := range rs {
		ids[r.ID] = r.Partition
	}
	if len(ids) != 3 {
		t.Fatalf("reaction ids not distinct: %+v", rs)
	}
	page, err := b.Reactions.ListReactions(ctx, storage.ReactionFilter{AfterID: rs[0].ID, Limit: 1})
	if err != nil || len(page) != 1 || page[0].ID != rs[1].ID {
		t.Fatalf("page after %d = %+v, %v; want id %d", rs[0].ID, page, err, rs[1].ID)
	}
	claimed, err := b.Reactions.ClaimReactions(ctx, 10, 1000, 2)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("ClaimReactions(limit 2) = %+v, %v", claimed, err)
	}
	more, err := b.Reactions.ClaimReactions(ctx, 10, 1000, 10)
	if err != nil || len(more) != 1 {
		t.Fatalf("second ClaimReactions = %+v, %v; want the third", more, err)
	}
	all := append(claimed, more...)
	done := make([]storage.ReactionClaim, len(all))
	for i, r := range all {
		done[i] = storage.ReactionClaim{ID: r.ID, Attempt: r.Attempts}
	}
	if n, err := b.Reactions.CompleteReactions(ctx, done); err != nil || n != 3 {
		t.Fatalf("CompleteReactions = %d, %v; want 3", n, err)
	}
	if c, err := b.Reactions.CountReactions(ctx); err != nil || c.Pending != 0 {
		t.Fatalf("CountReactions after completing = %+v, %v", c, err)
	}
	_ = parts
}

// TestDirBlobsAcrossFiles: a push of a file other than the home file
// claims a blob whose metadata is in the home file; its reference keeps
// the orphan sweep away, and once it is gone the sweep takes the blob.
func TestDirBlobsAcrossFiles(t *testing.T) {
	ctx := t.Context()
	_, b, _ := openDir(t, t.TempDir(), 3)
	p := partitionIn(1, 3, "blob")
	id := "sha256:" + fmt.Sprintf("%064x", 7)
	if _, err := b.Blobs.BeginBlobUpload(ctx, id, 100); err != nil {
		t.Fatal(err)
	}
	if err := b.Blobs.CompleteBlobUpload(ctx, id, 10, "text/plain", 100); err != nil {
		t.Fatal(err)
	}
	tx, err := b.Log.BeginPush(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := tx.ClaimBlob(ctx, id, 200)
	if err != nil || !ok {
		t.Fatalf("ClaimBlob from file 1 = %v, %v", ok, err)
	}
	if err := tx.SetRowBlobs(ctx, "items", "r1", map[string]string{"project": "p1"}, []string{id}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if refs, err := b.Blobs.BlobRefs(ctx, p, id, 10); err != nil || len(refs) != 1 {
		t.Fatalf("BlobRefs = %+v, %v", refs, err)
	}
	if c, err := b.Blobs.CountBlobs(ctx); err != nil || c.Present != 1 || c.References != 1 {
		t.Fatalf("CountBlobs = %+v, %v", c, err)
	}
	// referenced in file 1: not an orphan, however old the touch
	if ids, err := b.Blobs.MarkOrphanBlobs(ctx, 1_000_000, 10); err != nil || len(ids) != 0 {
		t.Fatalf("MarkOrphanBlobs with a reference elsewhere = %v, %v", ids, err)
	}
	if err := b.Blobs.AbandonBlobUpload(ctx, id, 100); err != nil {
		t.Fatal(err)
	}
	if info, _ := b.Blobs.GetBlob(ctx, id); info == nil {
		t.Fatal("AbandonBlobUpload removed a referenced blob")
	}
	tx, err = b.Log.BeginPush(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.SetRowBlobs(ctx, "items", "r1", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, err := b.Blobs.MarkOrphanBlobs(ctx, 150, 10); err != nil || len(ids) != 0 {
		t.Fatalf("MarkOrphanBlobs before the claim's touch expired = %v, %v", ids, err)
	}
	ids, err := b.Blobs.MarkOrphanBlobs(ctx, 1_000_000, 10)
	if err != nil || len(ids) != 1 || ids[0] != id {
		t.Fatalf("MarkOrphanBlobs once unreferenced = %v, %v", ids, err)
	}
	// a swept blob is refused to a push of another file
	tx, err = b.Log.BeginPush(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if ok, err := tx.ClaimBlob(ctx, id, 300); err != nil || ok {
		t.Fatalf("ClaimBlob of a deleting blob = %v, %v", ok, err)
	}
}

// TestDirOrphanSweepPastBlobsReferencedElsewhere: blobs referenced only
// by rows of another file than the home file are candidates of the home
// file's query; they must not hide the orphans after them, batch after
// batch (the engine's sweep asks for 500 at a time and stops at a short
// batch).
func TestDirOrphanSweepPastBlobsReferencedElsewhere(t *testing.T) {
	for _, tc := range []struct {
		name              string
		referenced, limit int
	}{
		{"none referenced", 0, 1},
		{"a batch referenced", 2, 2},
		{"more than a batch referenced", 3, 1},
		{"several batches referenced", 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			_, b, _ := openDir(t, t.TempDir(), 2)
			seedSweepBlobs(t, b, tc.referenced)
			orphan := sweepBlob(tc.referenced + 1)
			ids, err := b.Blobs.MarkOrphanBlobs(ctx, 1_000_000, tc.limit)
			if err != nil || fmt.Sprint(ids) != fmt.Sprint([]string{orphan}) {
				t.Fatalf("MarkOrphanBlobs(limit %d) = %v, %v; want the orphan %s", tc.limit, ids, err, orphan)
			}
			// a second orphan before where the walk stopped is found after
			// the walk wraps around
			before := sweepBlob(0)
			uploadBlob(t, b, before)
			ids, err = b.Blobs.MarkOrphanBlobs(ctx, 1_000_000, tc.limit)
			if err != nil || !slices.Contains(ids, before) {
				t.Fatalf("MarkOrphanBlobs after the walk stopped at %s = %v, %v; want %s (the walk wraps)", orphan, ids, err, before)
			}
			checkSweepKept(t, b, tc.referenced)
		})
	}
}

// sweepBlob is the id of the sweep tests' blob n.
func sweepBlob(n int) string { return "sha256:" + fmt.Sprintf("%064x", n) }

// uploadBlob uploads blob id (present, touched at 100).
func uploadBlob(t *testing.T, b storage.Backend, id string) {
	t.Helper()
	if _, err := b.Blobs.BeginBlobUpload(t.Context(), id, 100); err != nil {
		t.Fatal(err)
	}
	if err := b.Blobs.CompleteBlobUpload(t.Context(), id, 10, "text/plain", 100); err != nil {
		t.Fatal(err)
	}
}

// seedSweepBlobs uploads blobs 1 … referenced+1 of a 2-file directory and
// references 1 … referenced from rows of a partition of file 1: the last
// one, of the highest id, is an orphan behind them.
func seedSweepBlobs(t *testing.T, b storage.Backend, referenced int) {
	t.Helper()
	ctx := t.Context()
	for n := 1; n <= referenced+1; n++ {
		uploadBlob(t, b, sweepBlob(n))
	}
	tx, err := b.Log.BeginPush(ctx, partitionIn(1, 2, "sweep"))
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= referenced; n++ {
		if ok, err := tx.ClaimBlob(ctx, sweepBlob(n), 100); err != nil || !ok {
			t.Fatalf("ClaimBlob = %v, %v", ok, err)
		}
		if err := tx.SetRowBlobs(ctx, "items", "r"+strconv.Itoa(n), map[string]string{"project": "p1"}, []string{sweepBlob(n)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// checkSweepKept fails unless blobs 1 … referenced are still present.
func checkSweepKept(t *testing.T, b storage.Backend, referenced int) {
	t.Helper()
	for n := 1; n <= referenced; n++ {
		if info, err := b.Blobs.GetBlob(t.Context(), sweepBlob(n)); err != nil || info == nil || info.State != storage.BlobPresent {
			t.Fatalf("referenced blob %d after the sweep: %+v, %v", n, info, err)
		}
	}
}

// TestDirClaimReactionsFailureKeepsNoClaims: when one file's claim fails
// after another file's claimed reactions, the call fails (the worker
// drops its result) and must not leave those reactions claimed: each
// claim counts an attempt, and a reaction whose last attempt a lost claim
// took is dead-lettered when its lease runs out, never run.
func TestDirClaimReactionsFailureKeepsNoClaims(t *testing.T) {
	ctx := t.Context()
	d, b, _ := openDir(t, t.TempDir(), 2)
	p := partitionIn(0, 2, "claim")
	putReaction(t, b, p, 1)
	// file 1 fails every call from now on
	if err := d.File(1).Close(); err != nil {
		t.Fatal(err)
	}
	const now, lease = 10, 1000
	// the files are asked in turn from a rotating start: two calls ask
	// file 0 before file 1 once
	for call := range 2 {
		if rs, err := b.Reactions.ClaimReactions(ctx, now, lease, 10); err == nil {
			t.Fatalf("call %d: ClaimReactions with a closed file = %+v, nil; want an error", call, rs)
		}
		rs, err := d.File(0).ListReactions(ctx, storage.ReactionFilter{})
		if err != nil || len(rs) != 1 {
			t.Fatalf("call %d: file 0's reactions = %+v, %v", call, rs, err)
		}
		if rs[0].Attempts != 0 || rs[0].NextAttemptAtMs > now {
			t.Fatalf("call %d: a failed ClaimReactions left a claim: attempts %d, next attempt at %d", call, rs[0].Attempts, rs[0].NextAttemptAtMs)
		}
	}
	// after the lease the reaction is claimed (run), not dead-lettered
	rs, err := d.File(0).ClaimReactions(ctx, now+lease+1, lease, 10)
	if err != nil || len(rs) != 1 {
		t.Fatalf("claim after the lease = %+v, %v; want the reaction (not dead-lettered)", rs, err)
	}
}

// TestDirOrphanSweepWalkIsBounded: one MarkOrphanBlobs call reads at most
// orphanWalkPages pages of candidates, and later calls go on where it
// stopped, so an orphan behind many blobs referenced only from other
// files is marked within a bounded number of calls.
func TestDirOrphanSweepWalkIsBounded(t *testing.T) {
	defer sqlite.SetOrphanWalkPages(1)()
	ctx := t.Context()
	_, b, _ := openDir(t, t.TempDir(), 2)
	const referenced, limit = 6, 2
	seedSweepBlobs(t, b, referenced)
	// one page of limit candidates a call: the referenced blobs take three
	// calls, the orphan is the fourth call's
	var calls int
	for calls = 1; calls <= 4; calls++ {
		ids, err := b.Blobs.MarkOrphanBlobs(ctx, 1_000_000, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) > 0 {
			if fmt.Sprint(ids) != fmt.Sprint([]string{sweepBlob(referenced + 1)}) {
				t.Fatalf("call %d marked %v; want only the orphan", calls, ids)
			}
			break
		}
	}
	if calls != referenced/limit+1 {
		t.Fatalf("the orphan was marked by call %d; want call %d (one page a call)", calls, referenced/limit+1)
	}
	checkSweepKept(t, b, referenced)
}

// TestDirCheckpointChangeSucceedsWhenGenerationFails: a declaration or an
// activation committed in its file succeeds even when the checkpoint
// generation cannot be renewed in another file (its caller must not retry
// a change that took effect: an activation retried answers stale).
func TestDirCheckpointChangeSucceedsWhenGenerationFails(t *testing.T) {
	ctx := t.Context()
	d, b, _ := openDir(t, t.TempDir(), 2)
	p := partitionIn(0, 2, "gen")
	// file 1 fails every call from now on: the generation write there too
	if err := d.File(1).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Checkpoints.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: p, Name: "proj", SchemaVersion: 1}, 1); err != nil {
		t.Fatalf("DeclareCheckpoint committed in file 0, generation not renewed in file 1: %v; want success", err)
	}
	if out, err := b.Checkpoints.ActivateCheckpoint(ctx, p, "proj", 0, 0, nil, 2); err != nil || out != storage.Activated {
		t.Fatalf("ActivateCheckpoint = %v, %v; want activated", out, err)
	}
	cps, err := d.File(0).ReadCheckpoints(ctx)
	if err != nil || len(cps) != 1 || cps[0].State != storage.CheckpointActivated {
		t.Fatalf("file 0's checkpoints after the activation: %+v, %v; want it activated", cps, err)
	}
}

// TestCheckLayoutFiles: the files of one layout in order pass; files of
// two layouts, out of order, or one file of a larger layout alone are
// refused; nothing is written next to the files read.
func TestCheckLayoutFiles(t *testing.T) {
	ctx := t.Context()
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		d, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{Files: 2, FilesExplicit: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	single := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(single, sqlite.DirFileName), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	home := func(dir string) string { return filepath.Join(dir, sqlite.DirFileName) }
	other := func(dir string) string { return filepath.Join(dir, "synclane-1.db") }
	for _, tc := range []struct {
		name  string
		paths []string
		ok    bool
	}{
		{"one layout", []string{home(a), other(a)}, true},
		{"a single file of no layout", []string{home(single)}, true},
		{"two layouts", []string{home(a), other(b)}, false},
		{"out of order", []string{other(a), home(a)}, false},
		{"one file of two, alone", []string{home(a)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := os.ReadDir(filepath.Dir(tc.paths[0]))
			if err != nil {
				t.Fatal(err)
			}
			err = sqlite.CheckLayoutFiles(ctx, tc.paths)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, sqlite.ErrLayout)) {
				t.Fatalf("CheckLayoutFiles = %v; want ok %v (or ErrLayout)", err, tc.ok)
			}
			after, err := os.ReadDir(filepath.Dir(tc.paths[0]))
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(before) {
				t.Fatalf("files next to the ones read: %d before, %d after", len(before), len(after))
			}
		})
	}
}
