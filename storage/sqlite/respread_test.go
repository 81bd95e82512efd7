package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/storage/storagetest"
)

// fillRespread writes what every table of a directory holds: 30
// partitions of 3 commits (rows, changes, scopes, idempotency, clients),
// column versions on one row and a delete tombstone each, a lease each, a
// checkpoint, reactions (one dead-lettered), and a blob referenced from a
// partition of file 1.
func fillRespread(t *testing.T, dir string, files int) {
	t.Helper()
	ctx := t.Context()
	d, b, items := openDir(t, dir, files)
	for i := range 30 {
		p := "part-" + strconv.Itoa(i)
		fillPartition(t, b, items, p)
		tx, err := b.Log.BeginPush(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		row := ssp2.Row{"r0", "p1", int64(1), "title", int64(1), nil, true, nil, nil, nil, nil, nil}
		if err := tx.PutRow(ctx, items, storage.RowRecord{RowID: "r0", Version: 3, Values: row, ColumnVersions: respreadCV(i)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.DeleteRow(ctx, items, "gone", int64(i+1)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			tx, err := b.Log.BeginPush(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.PutReactions(ctx, []storage.NewReaction{{Name: "h" + p, MaxAttempts: 1, CommitSeq: 3, CreatedAtMs: int64(i)}}); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	claimed, err := b.Reactions.ClaimReactions(ctx, 10, 1000, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimReactions = %+v, %v", claimed, err)
	}
	if ok, err := b.Reactions.FailReaction(ctx, claimed[0].ID, claimed[0].Attempts, "boom", 0, true, 20); err != nil || !ok {
		t.Fatalf("FailReaction = %v, %v", ok, err)
	}
	id := "sha256:" + fmt.Sprintf("%064x", 9)
	if _, err := b.Blobs.BeginBlobUpload(ctx, id, 100); err != nil {
		t.Fatal(err)
	}
	if err := b.Blobs.CompleteBlobUpload(ctx, id, 10, "text/plain", 100); err != nil {
		t.Fatal(err)
	}
	tx, err := b.Log.BeginPush(ctx, partitionIn(1, 4, "part-"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := tx.ClaimBlob(ctx, id, 200); err != nil || !ok {
		t.Fatalf("ClaimBlob = %v, %v", ok, err)
	}
	if err := tx.SetRowBlobs(ctx, "items", "r1", map[string]string{"project": "p1"}, []string{id}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Last: a pending checkpoint makes EnsureSchema report it.
	if _, err := b.Checkpoints.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: "part-7", Name: "cp", SchemaVersion: 1}, 5); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// respreadCV is the column versions fillRespread stores on row r0 of
// partition i.
func respreadCV(i int) storage.ColumnVersions {
	return storage.EncodeColumnVersions([]int64{1, 1, 1, int64(i%3 + 1)}, int64(i%3+1))
}

// dumpDir reads everything fillRespread wrote through a directory's roles
// (reaction ids left out: they are per file) as text.
func dumpDir(t *testing.T, dir string, files int) []string {
	t.Helper()
	ctx := t.Context()
	d, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{Files: files, FilesExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sch := storagetest.MustParse(storagetest.SchemaV1)
	b, items := d.Backend(), sch.Table("items")
	if err := b.Lifecycle.EnsureSchema(ctx, sch); err != nil && !errors.Is(err, storage.ErrCheckpointIncomplete) {
		t.Fatal(err) // the checkpoint fillRespread declared is pending
	}
	var out []string
	parts, err := b.Retention.ListPartitions(ctx)
	if err != nil || len(parts) != 30 {
		t.Fatalf("ListPartitions = %d partitions, %v", len(parts), err)
	}
	for _, p := range parts {
		out = append(out, fmt.Sprintf("partition %+v", p))
		rows, err := b.Rows.ScanRows(ctx, p.Partition, storage.RowQuery{Table: items, Scopes: map[string][]string{}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			out = append(out, fmt.Sprintf("  row %s v%d %v", r.RowID, r.Version, r.Values))
		}
		tx, err := b.Log.BeginPush(ctx, p.Partition)
		if err != nil {
			t.Fatal(err)
		}
		r0, err := tx.GetRow(ctx, items, "r0")
		if err != nil || r0 == nil {
			t.Fatalf("GetRow(%s, r0) = %v, %v", p.Partition, r0, err)
		}
		tomb, err := tx.Tombstone(ctx, items, "gone")
		if err != nil || tomb == 0 {
			t.Fatalf("Tombstone(%s, gone) = %d, %v", p.Partition, tomb, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("  column versions of r0 %x, tombstone of gone at %d", []byte(r0.ColumnVersions), tomb))
		cl, err := b.Clients.GetClient(ctx, p.Partition, "client")
		if err != nil || cl == nil {
			t.Fatalf("GetClient(%s) = %v, %v", p.Partition, cl, err)
		}
		out = append(out, fmt.Sprintf("  client %+v", *cl))
		l, err := b.Leases.GetLease(ctx, p.Partition, "client")
		if err != nil || l == nil {
			t.Fatalf("GetLease(%s) = %v, %v", p.Partition, l, err)
		}
		out = append(out, fmt.Sprintf("  lease %+v", *l))
		idem, err := b.Log.LookupIdempotency(ctx, p.Partition, "client", p.Partition+"-c2")
		if err != nil || idem == nil {
			t.Fatalf("LookupIdempotency(%s) = %v, %v", p.Partition, idem, err)
		}
		out = append(out, fmt.Sprintf("  idempotency %+v", *idem))
		ch, err := b.Log.ScanChanges(ctx, p.Partition, storage.ChangeQuery{Table: "items", Scopes: map[string][]string{"project": {"p1"}}, UpToSeq: 100, LimitChanges: 100})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("  changes %+v", ch))
	}
	rs, err := b.Reactions.ListReactions(ctx, storage.ReactionFilter{})
	if err != nil || len(rs) != 10 {
		t.Fatalf("ListReactions = %d, %v", len(rs), err)
	}
	for _, r := range rs {
		r.ID = 0
		out = append(out, fmt.Sprintf("reaction %+v", r))
	}
	cps, err := b.Checkpoints.ReadCheckpoints(ctx)
	if err != nil || len(cps) != 1 {
		t.Fatalf("ReadCheckpoints = %+v, %v", cps, err)
	}
	out = append(out, fmt.Sprintf("checkpoint %+v", cps[0]))
	bc, err := b.Blobs.CountBlobs(ctx)
	if err != nil || bc.Present != 1 || bc.References != 1 {
		t.Fatalf("CountBlobs = %+v, %v", bc, err)
	}
	out = append(out, fmt.Sprintf("blobs %+v", bc))
	slices.Sort(out[len(out)-12 : len(out)-2]) // reactions: the order of ids changes with the files
	return out
}

// checkPlacement reads every file of a K-file directory directly: each
// partition's rows are in the file FileOf names, and the file records
// the schema version.
func checkPlacement(t *testing.T, dir string, files int) {
	t.Helper()
	for i, name := range sqlite.DirFileNames(files) {
		path := filepath.Join(dir, name)
		for tb, ps := range partitionsByTable(t, path) {
			for _, p := range ps {
				if f := sqlite.FileOf(p, files); f != i {
					t.Errorf("%s: table %s holds partition %s of file %d", name, tb, p, f)
				}
			}
		}
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		var v string
		err = db.QueryRow(`SELECT value FROM sync_meta WHERE key = 'schema_version'`).Scan(&v)
		db.Close()
		if err != nil || v != "1" {
			t.Errorf("%s: schema_version %q, %v", name, v, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, sqlite.DirFileNames(files + 1)[files])); err == nil {
		t.Errorf("file %d of a %d-file directory still in place", files, files)
	}
}

// TestRespread re-spreads a directory 1 → 4 → 2 → 1 and reads every
// partition's rows (with their column versions), tombstones, changes,
// clients, leases, idempotency records, the
// reactions (a dead letter among them), the checkpoint and the blob back
// through each layout; each file holds only its partitions; the old files
// are kept aside.
func TestRespread(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	fillRespread(t, dir, 1)
	want := dumpDir(t, dir, 1)
	from := 1
	for _, to := range []int{4, 2, 1} {
		rep, err := sqlite.Respread(ctx, dir, to, sqlite.RespreadOptions{})
		if err != nil {
			t.Fatalf("respread %d → %d: %v", from, to, err)
		}
		if rep.FilesBefore != from || rep.FilesAfter != to || rep.Partitions != 30 || rep.Moved == 0 || rep.Resumed {
			t.Fatalf("respread %d → %d: report %+v", from, to, rep)
		}
		counts := map[string]int64{}
		for _, tr := range rep.Tables {
			counts[tr.Table] = tr.Rows
		}
		if counts["sync_commits"] != 90 || counts["sync_reactions"] != 10 || counts["sync_blobs"] != 1 || counts["items"] != 90 || counts["sync_leases"] != 30 || counts["sync_tombstones"] != 30 {
			t.Fatalf("respread %d → %d: row counts %v", from, to, counts)
		}
		for _, name := range sqlite.DirFileNames(from) {
			if _, err := os.Stat(filepath.Join(rep.OldDir, name)); err != nil {
				t.Errorf("old file %s not kept aside: %v", name, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, sqlite.RespreadWorkDir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("work directory left behind: %v", err)
		}
		checkPlacement(t, dir, to)
		if got := dumpDir(t, dir, to); !slices.Equal(got, want) {
			t.Fatalf("after respread %d → %d:\n%v\nwant\n%v", from, to, got, want)
		}
		from = to
	}
	// The same K: nothing to do, nothing changed.
	if rep, err := sqlite.Respread(ctx, dir, 1, sqlite.RespreadOptions{}); err != nil || rep.OldDir != "" || rep.FilesBefore != 1 {
		t.Fatalf("respread to the same K: %+v, %v", rep, err)
	}
}

// TestRespreadResumes stops the swap at each of its renames (a crash
// there): the directory is refused until Respread runs again, which
// finishes the swap; nothing is lost at any of them.
func TestRespreadResumes(t *testing.T) {
	ctx := t.Context()
	src := t.TempDir()
	fillRespread(t, src, 2)
	want := dumpDir(t, src, 2)
	for stop := 0; ; stop++ {
		dir := t.TempDir()
		for _, name := range sqlite.DirFileNames(2) {
			b, err := os.ReadFile(filepath.Join(src, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		restore := sqlite.SetRespreadRename(func(from, to string) error {
			if n == stop {
				return errors.New("crash")
			}
			n++
			return os.Rename(from, to)
		})
		_, err := sqlite.Respread(ctx, dir, 3, sqlite.RespreadOptions{})
		restore()
		if err == nil {
			if stop < 3 {
				t.Fatalf("the swap made only %d renames", stop)
			}
			break // every rename point was a crash once
		}
		if _, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{}); !errors.Is(err, sqlite.ErrRespreadPending) {
			t.Fatalf("open after a crash at rename %d: %v, want ErrRespreadPending", stop, err)
		}
		rep, err := sqlite.Respread(ctx, dir, 3, sqlite.RespreadOptions{})
		if err != nil || !rep.Resumed || rep.FilesBefore != 3 {
			t.Fatalf("respread after a crash at rename %d: %+v, %v", stop, rep, err)
		}
		checkPlacement(t, dir, 3)
		if got := dumpDir(t, dir, 3); !slices.Equal(got, want) {
			t.Fatalf("after a crash at rename %d:\n%v\nwant\n%v", stop, got, want)
		}
	}
}

// An unfinished copy (a work directory without a journal: a crash before
// the commit point) leaves the old layout in place and is removed by the
// next respread.
func TestRespreadUnfinishedCopy(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	fillRespread(t, dir, 1)
	want := dumpDir(t, dir, 1)
	work := filepath.Join(dir, sqlite.RespreadWorkDir)
	if err := os.Mkdir(work, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "synclane-1.db"), []byte("half a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := dumpDir(t, dir, 1); !slices.Equal(got, want) {
		t.Fatal("the old layout changed under an unfinished copy")
	}
	if _, err := sqlite.Respread(ctx, dir, 2, sqlite.RespreadOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := dumpDir(t, dir, 2); !slices.Equal(got, want) {
		t.Fatalf("after the respread:\n%v\nwant\n%v", got, want)
	}
}
