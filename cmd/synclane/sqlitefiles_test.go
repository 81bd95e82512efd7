package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// Tests of a data directory of several database files (sqlite.Dir) with
// the operator tools: backup and restore, respread, kill -9, and serve's
// refusal of another --sqlite-files.

// filesPartitions are 16 partition ids; with K = 4 (and K = 2) each file
// holds some of them (spreadPartitions checks it).
var filesPartitions = func() []string {
	out := make([]string, 16)
	for i := range out {
		out[i] = fmt.Sprint("part-", i)
	}
	return out
}()

// spreadPartitions fails unless every file of a k-file layout holds one
// of filesPartitions.
func spreadPartitions(t *testing.T, k int) {
	t.Helper()
	per := make([]int, k)
	for _, p := range filesPartitions {
		per[sqlite.FileOf(p, k)]++
	}
	if slices.Contains(per, 0) {
		t.Fatalf("the test partitions leave a file of %d empty: %v", k, per)
	}
}

// partClient is a demo-schema client of one partition (development
// authentication: x-actor, x-partition).
func partClient(base, partition, clientID string) *httpsync.Client {
	return &httpsync.Client{URL: base + "/sync", ClientID: clientID, Header: http.Header{"X-Actor": {"ada"}, "X-Partition": {partition}}}
}

// pushTodos pushes one commit per id into list L of partition and fails
// unless each is applied.
func pushTodos(t *testing.T, base, partition string, ids ...string) {
	t.Helper()
	c := partClient(base, partition, "writer-"+partition)
	for _, id := range ids {
		rs, err := c.Push(context.Background(), todoCommit("c-"+id, id, "L"))
		if err != nil || len(rs) != 1 || rs[0].Status != ssp2.CommitApplied {
			t.Fatalf("push %s to %s: %+v, %v", id, partition, rs, err)
		}
	}
}

// readTodos pulls list L of partition from scratch and returns its todos
// (id → title).
func readTodos(t *testing.T, base, partition string) map[string]string {
	t.Helper()
	r := httpsynctest.NewReplica(partClient(base, partition, "reader-"+partition), schema.MustDemo())
	r.Subscribe("todos", "todos", map[string][]string{"list_id": {"L"}})
	if err := r.SyncUntilIdle(context.Background(), 20); err != nil {
		t.Fatalf("pull %s: %v", partition, err)
	}
	out := map[string]string{}
	for id, row := range r.Rows["todos"] {
		out[id] = fmt.Sprint(row.Values[2])
	}
	return out
}

// readAll reads every partition of filesPartitions (and extra).
func readAll(t *testing.T, base string, extra ...string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, p := range append(slices.Clone(filesPartitions), extra...) {
		out[p] = readTodos(t, base, p)
	}
	return out
}

// stopProc stops a serve process with SIGTERM and waits for it.
func stopProc(t *testing.T, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("synclane serve after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("synclane serve did not stop within 30s of SIGTERM")
	}
}

// filePartitions reads the database file at path directly and returns
// the partition ids found in any of sync_partitions, sync_commits,
// sync_clients, sync_tombstones and todos.
func fileParts(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT partition_id FROM sync_partitions UNION SELECT partition_id FROM sync_commits
		UNION SELECT partition_id FROM sync_clients UNION SELECT partition_id FROM sync_tombstones
		UNION SELECT partition_id FROM todos ORDER BY 1`)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// checkLayout reads the data directory's files directly: exactly the k
// files of a k-file layout are there (no synclane-<i>.db beyond), each
// partition is in the file sqlite.FileOf names, and every file holds
// some.
func checkLayout(t *testing.T, dir string, k int) {
	t.Helper()
	have, err := layoutFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := sqlite.DirFileNames(k)
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		t.Fatalf("database files in %s: %v, want %v", dir, have, want)
	}
	for i, name := range sqlite.DirFileNames(k) {
		ps := fileParts(t, filepath.Join(dir, name))
		if len(ps) == 0 {
			t.Errorf("%s holds no partition", name)
		}
		for _, p := range ps {
			if f := sqlite.FileOf(p, k); f != i {
				t.Errorf("%s (file %d of %d) holds partition %s of file %d", name, i, k, p, f)
			}
		}
	}
}

// A backup of a 4-file directory restored over the same directory (after
// more pushes), over a 2-file one and a single-file backup over a 4-file
// one: each leaves exactly the backup's database files, and serving it
// reads back exactly the backup's rows of every partition.
func TestBackupRestoreFourFiles(t *testing.T) {
	spreadPartitions(t, 4)
	dir := t.TempDir()
	p, want := serveFilled(t, dir, "4")
	bdir := filepath.Join(t.TempDir(), "backup")
	if code, out := runBinary(t, "backup", "--data", dir, "--to", bdir); code != 0 || !strings.Contains(out, "synclane-3.db") {
		t.Fatalf("backup: exit %d\n%s", code, out)
	}
	checkLayout(t, bdir, 4) // every file of the backup holds its partitions
	// After the backup: a row in every partition, and a new partition.
	for _, part := range filesPartitions {
		pushTodos(t, p.base, part, part+"-after")
	}
	pushTodos(t, p.base, "part-new", "new-1")
	stopProc(t, p)

	// A 2-file directory to restore over.
	dir2 := t.TempDir()
	p2 := startProc(t, "--data", dir2, "--sqlite-files", "2")
	for _, part := range filesPartitions {
		pushTodos(t, p2.base, part, part+"-other")
	}
	stopProc(t, p2)

	for _, target := range []string{dir, dir2} {
		code, out := runBinary(t, "restore", "--data", target, "--from", bdir)
		if code != 0 || !strings.Contains(out, "installed 4 database files") {
			t.Fatalf("restore into %s: exit %d\n%s", target, code, out)
		}
		checkLayout(t, target, 4)
		if n := tombstones(t, target, 4); n != len(filesPartitions) {
			t.Fatalf("restored into %s: %d delete tombstones, want the backup's %d", target, n, len(filesPartitions))
		}
		if aside, _ := filepath.Glob(filepath.Join(target, "*.before-restore-*")); len(aside) != 0 || !strings.Contains(out, "removed the") {
			t.Fatalf("the replaced files are left after a successful restore into %s: %v\n%s", target, aside, out)
		}
		p := startProc(t, "--data", target, "--sqlite-files", "4")
		got := readAll(t, p.base, "part-new")
		if n := len(got["part-new"]); n != 0 {
			t.Errorf("restored into %s: part-new, made after the backup, has %d rows", target, n)
		}
		delete(got, "part-new")
		if !maps.EqualFunc(got, want, maps.Equal) {
			t.Fatalf("restored into %s:\n%v\nwant the backup's\n%v", target, got, want)
		}
		stopProc(t, p)
	}

	// A single-file directory's database (an older backup) over the 4-file
	// one: exactly synclane.db is left.
	dir1 := t.TempDir()
	p1 := startProc(t, "--data", dir1, "--sqlite-files", "1")
	pushTodos(t, p1.base, "part-0", "single")
	stopProc(t, p1)
	if code, out := runBinary(t, "restore", "--data", dir, "--from", filepath.Join(dir1, "synclane.db")); code != 0 || !strings.Contains(out, "an older backup") {
		t.Fatalf("restore of a single database file: exit %d\n%s", code, out)
	}
	if have, err := layoutFiles(dir); err != nil || !slices.Equal(have, []string{"synclane.db"}) {
		t.Fatalf("database files after restoring a single file over 4: %v, %v", have, err)
	}
	p = startProc(t, "--data", dir)
	if got := readTodos(t, p.base, "part-0"); len(got) != 1 || got["single"] != "title single" {
		t.Fatalf("part-0 after restoring the single file: %v", got)
	}
	if got := readTodos(t, p.base, "part-1"); len(got) != 0 {
		t.Fatalf("part-1 after restoring the single file: %v, want none", got)
	}
}

// respread of a served directory 1 → 4 → 2: refused while the server
// runs; after each, every file holds exactly its partitions and serving
// it reads back every partition's rows.
func TestRespreadServedDirectory(t *testing.T) {
	spreadPartitions(t, 4)
	spreadPartitions(t, 2)
	dir := t.TempDir()
	p, want := serveFilled(t, dir, "1")
	if code, out := runBinary(t, "respread", "--data", dir, "--files", "4"); code != 1 || !strings.Contains(out, "stop it first") {
		t.Fatalf("respread next to a running server: exit %d, want 1\n%s", code, out)
	}
	stopProc(t, p)
	checkLayout(t, dir, 1)

	for _, k := range []int{4, 2} {
		code, out := runBinary(t, "respread", "--data", dir, "--files", fmt.Sprint(k))
		if code != 0 || !strings.Contains(out, fmt.Sprintf("→ %d database files; 16 partitions", k)) || !strings.Contains(out, "sync_commits") {
			t.Fatalf("respread --files %d: exit %d\n%s", k, code, out)
		}
		old, _ := filepath.Glob(filepath.Join(dir, "respread-old-*", "synclane.db"))
		if len(old) == 0 || !strings.Contains(out, filepath.Dir(old[len(old)-1])) {
			t.Fatalf("respread --files %d: old files %v not kept or not named\n%s", k, old, out)
		}
		checkLayout(t, dir, k)
		if n := tombstones(t, dir, k); n != len(filesPartitions) {
			t.Fatalf("after respread --files %d: %d delete tombstones, want %d", k, n, len(filesPartitions))
		}
		p := startProc(t, "--data", dir, "--sqlite-files", fmt.Sprint(k))
		if got := readAll(t, p.base); !maps.EqualFunc(got, want, maps.Equal) {
			t.Fatalf("after respread --files %d:\n%v\nwant\n%v", k, got, want)
		}
		// The new layout takes writes.
		for _, part := range filesPartitions {
			id := fmt.Sprintf("%s-k%d", part, k)
			pushTodos(t, p.base, part, id)
			want[part][id] = "title " + id
		}
		stopProc(t, p)
	}
	if code, out := runBinary(t, "respread", "--data", dir, "--files", "2"); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("respread to the same K: exit %d\n%s", code, out)
	}
	if code, out := runBinary(t, "respread", "--data", dir); code != 2 || !strings.Contains(out, "--files K is required") {
		t.Fatalf("respread without --files: exit %d\n%s", code, out)
	}
}

// kill -9 of a server with 4 database files while 16 writers push to
// partitions of every file: after the restart every acknowledged
// (applied) commit is there, on every file.
func TestKill9SeveralFiles(t *testing.T) {
	spreadPartitions(t, 4)
	dir := t.TempDir()
	p := startProc(t, "--data", dir, "--sqlite-files", "4")
	var mu sync.Mutex
	acked := map[string][]string{}
	total := 0
	var wg sync.WaitGroup
	cut := make(chan error, len(filesPartitions))
	for _, part := range filesPartitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := partClient(p.base, part, "writer-"+part)
			for n := 0; ; n++ {
				id := fmt.Sprintf("%s-%d", part, n)
				rs, err := c.Push(context.Background(), todoCommit("c-"+id, id, "L"))
				if err != nil {
					cut <- err
					return
				}
				if len(rs) != 1 || rs[0].Status != ssp2.CommitApplied {
					cut <- fmt.Errorf("push %s: %+v", id, rs)
					return
				}
				mu.Lock()
				acked[part] = append(acked[part], id)
				total++
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return total }
	for deadline := time.Now().Add(60 * time.Second); count() < 400; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d commits acknowledged in 60s", count())
		}
	}
	p.kill(t) // the writers are mid-push
	wg.Wait()
	close(cut)
	for err := range cut {
		if strings.HasPrefix(err.Error(), "push ") {
			t.Fatal(err) // an answer that was not applied: not a cut push
		}
	}
	perFile := make([]int, 4)
	for part, ids := range acked {
		perFile[sqlite.FileOf(part, 4)] += len(ids)
	}
	if slices.Contains(perFile, 0) {
		t.Fatalf("acknowledged commits per file %v: a file got none", perFile)
	}
	p = startProc(t, "--data", dir)
	lost := 0
	for _, part := range filesPartitions {
		got := readTodos(t, p.base, part)
		for _, id := range acked[part] {
			if got[id] != "title "+id {
				lost++
				t.Errorf("%s: acknowledged commit %s lost after kill -9", part, id)
			}
		}
	}
	t.Logf("%d commits acknowledged before kill -9 (per file %v), %d lost", total, perFile, lost)
}

// serve --sqlite-files 2 on a 4-file directory exits 2 (a configuration
// error) with a message naming synclane respread, touching nothing.
func TestServeRefusesOtherFileCount(t *testing.T) {
	dir := t.TempDir()
	p := startProc(t, "--data", dir, "--sqlite-files", "4")
	pushTodos(t, p.base, "part-0", "a")
	stopProc(t, p)
	code, _, errOut := runCmdEnv(t, nil, "serve", "--data", dir, "--sqlite-files", "2", "--listen", "127.0.0.1:0", "--log-level", "error")
	if code != 2 || !strings.Contains(errOut, "synclane respread --files 2") || !strings.Contains(errOut, "has 4") {
		t.Fatalf("serve --sqlite-files 2 on a 4-file directory: exit %d, want 2 naming respread\n%s", code, errOut)
	}
	four := func() {
		t.Helper()
		if have, err := layoutFiles(dir); err != nil || len(have) != 4 {
			t.Fatalf("database files: %v, %v; want the 4", have, err)
		}
	}
	four()
	// Without the flag it keeps its 4 files.
	p = startProc(t, "--data", dir)
	if got := readTodos(t, p.base, "part-0"); got["a"] != "title a" {
		t.Fatalf("part-0: %v", got)
	}
	four()
}

// seedDir makes a data directory of k database files holding partitions
// parts (the demo schema, each partition touched).
func seedDir(t *testing.T, dir string, k int, parts ...string) {
	t.Helper()
	ctx := context.Background()
	d, err := sqlite.OpenDir(ctx, dir, sqlite.DirOptions{Files: k, FilesExplicit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b := d.Backend()
	if err := b.Lifecycle.EnsureSchema(ctx, schema.MustDemo()); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if _, err := b.Log.TouchPartition(ctx, p, time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
}

// restore --from a backup of another K than --sqlite-files (the flag or
// SYNCLANE_SQLITE_FILES, as set for serve) is refused before anything in
// the data directory changes: installing it first left the directory
// replaced but unopenable with that K, so the epochs were never rotated.
func TestRestoreRefusesOtherSqliteFiles(t *testing.T) {
	src := t.TempDir()
	seedDir(t, src, 1, filesPartitions...)
	bdir := filepath.Join(t.TempDir(), "backup")
	if code, out, errOut := runCmdEnv(t, nil, "backup", "--data", src, "--to", bdir); code != 0 {
		t.Fatalf("backup: exit %d\n%s%s", code, out, errOut)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"flag", nil, []string{"--sqlite-files", "2"}},
		{"environment", map[string]string{"SYNCLANE_SQLITE_FILES": "2"}, nil},
		{"single database file", nil, []string{"--sqlite-files", "2", "--from", filepath.Join(bdir, sqlite.DirFileName)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := t.TempDir()
			seedDir(t, target, 2, filesPartitions...)
			before := snapshotDir(t, target)
			args := append([]string{"restore", "--data", target}, tc.args...)
			if !slices.Contains(args, "--from") {
				args = append(args, "--from", bdir)
			}
			code, out, errOut := runCmdEnv(t, tc.env, args...)
			if code == 0 || !strings.Contains(errOut, "has 1 database file") || !strings.Contains(errOut, "asks for 2") || !strings.Contains(errOut, "nothing in "+target+" was changed") {
				t.Fatalf("restore of a 1-file backup with 2 files asked: exit %d, want a refusal naming both\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if after := snapshotDir(t, target); !maps.Equal(after, before) {
				t.Fatalf("the refused restore changed %s: %v, was %v", target, slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
			}
		})
	}
}

// listParts opens dir as serve would (opts), and returns its partitions
// sorted, or the error OpenDir refused it with.
func listParts(t *testing.T, dir string, opts sqlite.DirOptions) ([]string, error) {
	t.Helper()
	ctx := context.Background()
	d, err := sqlite.OpenDir(ctx, dir, opts)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	b := d.Backend()
	if err := b.Lifecycle.EnsureSchema(ctx, schema.MustDemo()); err != nil {
		t.Fatal(err)
	}
	ps, err := b.Retention.ListPartitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.Partition)
	}
	slices.Sort(out)
	return out, nil
}

// A restore of a 4-file backup over a 2-file directory stopped before
// each rename of its swap (a kill -9 there): the directory then either is
// refused by serve, with the default files and with --sqlite-files 4, or
// serves all of the old or all of the new partitions, never a new empty
// layout; and running the restore again installs the backup.
func TestRestoreInterruptedAtEveryRename(t *testing.T) {
	spreadPartitions(t, 4)
	spreadPartitions(t, 2)
	prefixed := func(pre string) []string {
		var out []string
		for _, p := range filesPartitions {
			out = append(out, pre+p)
		}
		slices.Sort(out)
		return out
	}
	oldParts, newParts := prefixed("old-"), prefixed("new-")
	src := t.TempDir()
	seedDir(t, src, 4, newParts...)
	bdir, m := backupOf(t, src)
	template := t.TempDir()
	seedDir(t, template, 2, oldParts...)
	defer func() { restoreRename = os.Rename }()
	for step := 0; ; step++ {
		target := t.TempDir()
		copyTree(t, template, target)
		n := 0
		restoreRename = func(from, to string) error {
			if n++; n > step {
				return fmt.Errorf("stopped before rename %d", n)
			}
			return os.Rename(from, to)
		}
		_, err := installBackupDir(context.Background(), m, bdir, target, "", fmt.Sprintf("step%d", step))
		restoreRename = os.Rename
		if err == nil {
			if step == 0 {
				t.Fatal("the install renamed nothing")
			}
			break
		}
		if !strings.Contains(err.Error(), "run synclane restore again") {
			t.Errorf("stopped before rename %d: %v, want it to name what to do", step+1, err)
		}
		for _, opts := range []sqlite.DirOptions{{}, {Files: 4, FilesExplicit: true}} {
			probe := t.TempDir()
			copyTree(t, target, probe)
			got, err := listParts(t, probe, opts)
			if err == nil && !slices.Equal(got, oldParts) && !slices.Equal(got, newParts) {
				t.Errorf("stopped before rename %d, opened with %+v: partitions %v, want all the old or all the new ones", step+1, opts, got)
			}
		}
		if _, err := installBackupDir(context.Background(), m, bdir, target, "", fmt.Sprintf("step%d-again", step)); err != nil {
			t.Fatalf("stopped before rename %d: running the restore again: %v", step+1, err)
		}
		checkLayout(t, target, 4)
		if got, err := listParts(t, target, sqlite.DirOptions{Files: 4, FilesExplicit: true}); err != nil || !slices.Equal(got, newParts) {
			t.Fatalf("stopped before rename %d, restored again: %v, %v; want the backup's partitions", step+1, got, err)
		}
	}
}

// synclane respread finishes a swap interrupted while the home file was
// between the data directory and the work directory (the old one moved
// aside, the new one not yet in: no synclane.db in place), as serve's
// refusal (ErrRespreadPending) tells the operator to.
func TestRespreadResumesWithoutHomeFile(t *testing.T) {
	dir := t.TempDir()
	seedDir(t, dir, 2, filesPartitions...)
	want, err := listParts(t, dir, sqlite.DirOptions{Files: 2, FilesExplicit: true})
	if err != nil || len(want) != len(filesPartitions) {
		t.Fatalf("seeded partitions %v, %v", want, err)
	}
	if _, err := sqlite.Respread(context.Background(), dir, 3, sqlite.RespreadOptions{}); err != nil {
		t.Fatal(err)
	}
	olds, err := filepath.Glob(filepath.Join(dir, "respread-old-*"))
	if err != nil || len(olds) != 1 {
		t.Fatalf("old layout directories %v, %v", olds, err)
	}
	// Back to the moment between the home file's two renames: the new
	// home file still in the work directory, under its journal.
	work := filepath.Join(dir, sqlite.RespreadWorkDir)
	if err := os.Mkdir(work, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, sqlite.DirFileName), filepath.Join(work, sqlite.DirFileName)); err != nil {
		t.Fatal(err)
	}
	journal := fmt.Sprintf(`{"filesBefore": 2, "filesAfter": 3, "oldDir": %q}`, filepath.Base(olds[0]))
	if err := os.WriteFile(filepath.Join(work, "journal.json"), []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listParts(t, dir, sqlite.DirOptions{}); !errors.Is(err, sqlite.ErrRespreadPending) {
		t.Fatalf("open mid-swap: %v, want ErrRespreadPending", err)
	}
	code, out, errOut := runCmdEnv(t, nil, "respread", "--data", dir, "--files", "3")
	if code != 0 || !strings.Contains(out, "finished an interrupted respread") {
		t.Fatalf("respread --files 3 mid-swap: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if got, err := listParts(t, dir, sqlite.DirOptions{Files: 3, FilesExplicit: true}); err != nil || !slices.Equal(got, want) {
		t.Fatalf("after finishing: %v, %v; want %v", got, err, want)
	}
}

// A restore stopped after it installed the backup's files and before it
// rotated the epochs (a kill -9 there) leaves a directory serve refuses,
// naming the command that finishes it; `restore --rotate-epochs` does,
// and serve's check passes then.
func TestRestoreStoppedBeforeRotationRefusedByServe(t *testing.T) {
	src := t.TempDir()
	seedDir(t, src, 2, filesPartitions...)
	bdir, m := backupOf(t, src)
	target := t.TempDir()
	seedDir(t, target, 2, "before")
	// what restore --from does before it rotates the epochs
	if _, err := installBackupDir(context.Background(), m, bdir, target, "", "test"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmdEnv(t, nil, "serve", "--data", target, "--listen", "127.0.0.1:0", "--dev-auth", "--drain-delay", "0s")
	if code == 0 || !strings.Contains(errOut, "restore --rotate-epochs") || !strings.Contains(errOut, "did not finish") {
		t.Fatalf("serve of a restore stopped before rotating: exit %d\n%s%s\nwant a refusal naming restore --rotate-epochs", code, out, errOut)
	}
	if code, out, errOut := runCmdEnv(t, nil, "restore", "--rotate-epochs", "--data", target); code != 0 || !strings.Contains(out, "rotated the log epoch of 16 partitions") {
		t.Fatalf("restore --rotate-epochs: exit %d\n%s%s", code, out, errOut)
	}
	if err := checkRestorePending(target); err != nil {
		t.Fatalf("after the rotation: %v", err)
	}
	if _, err := os.Stat(filepath.Join(target, restorePendingName)); !os.IsNotExist(err) {
		t.Fatalf("the marker is still there: %v", err)
	}
}

// backupOf takes a backup of the data directory src with synclane backup
// and returns its directory and verified manifest.
func backupOf(t *testing.T, src string) (string, backupManifest) {
	t.Helper()
	bdir := filepath.Join(t.TempDir(), "backup")
	if code, out, errOut := runCmdEnv(t, nil, "backup", "--data", src, "--to", bdir); code != 0 {
		t.Fatalf("backup: exit %d\n%s%s", code, out, errOut)
	}
	m, err := verifyBackup(bdir)
	if err != nil {
		t.Fatal(err)
	}
	return bdir, m
}

// serveFilled serves dir with --sqlite-files files, pushes two rows to
// each of filesPartitions and a third it deletes (leaving a delete
// tombstone in every partition), and returns the process and every
// partition's rows as served.
func serveFilled(t *testing.T, dir, files string) (*proc, map[string]map[string]string) {
	t.Helper()
	p := startProc(t, "--data", dir, "--sqlite-files", files)
	for _, part := range filesPartitions {
		pushTodos(t, p.base, part, part+"-a", part+"-b", part+"-gone")
		c := partClient(p.base, part, "writer-"+part)
		del := &ssp2.PushCommit{ClientCommitID: "c-del-" + part, Operations: []ssp2.Operation{{Table: "todos", RowID: part + "-gone", Op: ssp2.OpDelete}}}
		if rs, err := c.Push(context.Background(), del); err != nil || len(rs) != 1 || rs[0].Status != ssp2.CommitApplied {
			t.Fatalf("delete %s-gone: %+v, %v", part, rs, err)
		}
	}
	return p, readAll(t, p.base)
}

// tombstones counts the delete tombstones of every database file of a
// k-file directory (checkLayout checks each is in its partition's file).
func tombstones(t *testing.T, dir string, k int) int {
	t.Helper()
	n := 0
	for _, name := range sqlite.DirFileNames(k) {
		db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, name)+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		var c int
		err = db.QueryRow(`SELECT count(*) FROM sync_tombstones`).Scan(&c)
		db.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n += c
	}
	return n
}
