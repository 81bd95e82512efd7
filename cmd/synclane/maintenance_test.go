package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// openArgs opens the store a command line's --data or --postgres names,
// with the demo schema ensured.
func openArgs(t *testing.T, args []string) store {
	t.Helper()
	ctx := context.Background()
	var st store
	switch args[0] {
	case "--data":
		s, err := sqlite.Open(ctx, filepath.Join(args[1], "synclane.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st = store{Backend: s.Backend()}
	case "--postgres":
		pg, err := postgres.Open(ctx, args[1], postgres.Options{MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		st = store{Backend: pg.Backend(), pg: pg}
	}
	if err := st.Lifecycle.EnsureSchema(ctx, schema.MustDemo()); err != nil {
		t.Fatal(err)
	}
	return st
}

// seedCommits appends n commits (one todos change each, created now) to
// the default partition in one transaction.
func seedCommits(t *testing.T, st store, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := st.Log.BeginPush(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	now := time.Now().UnixMilli()
	for i := range n {
		seq := tx.Partition().MaxCommitSeq + 1
		id := fmt.Sprint("t", i%50)
		if err := tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: now, ActorID: "a", ClientID: "seed", ClientCommitID: fmt.Sprint(seq),
			Changes: []storage.ChangeRecord{{Table: "todos", RowID: id, Op: ssp2.OpDelete, Scopes: map[string]string{"list_id": "L"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func horizonOf(t *testing.T, st store) int64 {
	t.Helper()
	info, err := st.Log.ReadPartition(context.Background(), "default")
	if err != nil {
		t.Fatal(err)
	}
	return info.HorizonSeq
}

func TestPruneCommand(t *testing.T) {
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			st := openArgs(t, store)
			seedCommits(t, st, 1300)
			if name == "sqlite" {
				st.Close() // the command opens the file itself
			} else {
				defer st.Close()
			}
			code, out, errOut := runCmd(t, append([]string{"prune", "--dry-run"}, store...)...)
			// seedCommits writes no idempotency records: the run deletes none.
			if code != 0 || !strings.Contains(out, "would prune 300 commits, 300 changes, 0 idempotency records, 0 tombstones in 1 of 1 partitions") || !strings.Contains(out, "minRetainedCommits") {
				t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
			}
			if code, _, errOut := runCmd(t, append([]string{"prune", "--retention-min-commits", "5"}, store...)...); code != 2 || !strings.Contains(errOut, "floor") {
				t.Fatalf("a limit below the floor: exit %d, %s", code, errOut)
			}
			if code, _, errOut := runCmd(t, append([]string{"prune", "--partition", "nope"}, store...)...); code != 1 || !strings.Contains(errOut, "nope") {
				t.Fatalf("an unknown partition: exit %d, %s", code, errOut)
			}
			code, out, errOut = runCmd(t, append([]string{"prune", "--partition", "default", "--retention-batch", "7"}, store...)...)
			if code != 0 || !strings.Contains(out, "pruned 300 commits, 300 changes, 0 idempotency records") ||
				!strings.Contains(out, "default: batch 43: pruned 6 commits, 6 changes, 0 idempotency records, 0 tombstones; horizon 300 of 300") {
				t.Fatalf("prune: exit %d\n%s%s", code, out, errOut)
			}
			code, out, _ = runCmd(t, append([]string{"prune"}, store...)...)
			if code != 0 || !strings.Contains(out, "pruned 0 commits, 0 changes, 0 idempotency records, 0 tombstones in 0 of 1 partitions") ||
				!strings.Contains(out, "below the floor: the newest 1000 commits are kept") {
				t.Fatalf("second prune: exit %d\n%s", code, out)
			}
			if name == "sqlite" {
				st = openArgs(t, store)
				defer st.Close()
			}
			if h := horizonOf(t, st); h != 300 {
				t.Fatalf("horizon after synclane prune: %d, want 300", h)
			}
			// After a restore by other means (pg_restore), --rotate-epochs
			// gives every partition a new, required epoch.
			before, err := st.Log.ReadPartition(context.Background(), "default")
			if err != nil {
				t.Fatal(err)
			}
			code, out, errOut = runCmd(t, append([]string{"restore", "--rotate-epochs"}, store...)...)
			after, err := st.Log.ReadPartition(context.Background(), "default")
			if err != nil || code != 0 || !strings.Contains(out, after.LogEpoch) || after.LogEpoch == before.LogEpoch || !after.EpochRequired {
				t.Fatalf("restore --rotate-epochs: exit %d, epoch %q → %+v (%v)\n%s%s", code, before.LogEpoch, after, err, out, errOut)
			}
		})
	}
}

// Two `synclane prune` processes on one PostgreSQL database: while another
// process holds the maintenance lock a prune does nothing; started at
// once, one does the work.
func TestPruneProcessesShareTheMaintenanceLock(t *testing.T) {
	store, ok := sharedStores(t)["postgres"]
	if !ok {
		t.Skip("PostgreSQL not configured: set SYNCLANE_TEST_POSTGRES to a pgx URL of a database the tests may create schemas in (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable); SYNCLANE_REQUIRE_POSTGRES=1 makes this a failure")
	}
	bin := synclaneBinary(t)
	st := openArgs(t, store)
	defer st.Close()
	seedCommits(t, st, 1300)
	prune := func(extra ...string) (string, error) {
		out, err := exec.Command(bin, append(append([]string{"prune"}, store...), extra...)...).CombinedOutput()
		return string(out), err
	}
	unlock, held, err := st.Retention.TryLockMaintenance(context.Background())
	if err != nil || !held {
		t.Fatalf("TryLockMaintenance: %v %v", held, err)
	}
	if out, err := prune(); exitCode(err) != exitPruneSkipped || !strings.Contains(out, "skipped: another process holds the maintenance lock: PostgreSQL session (backend pid ") {
		t.Fatalf("prune while this process holds the lock: %v, want exit %d\n%s", err, exitPruneSkipped, out)
	}
	if h := horizonOf(t, st); h != 0 {
		t.Fatalf("a skipped prune moved the horizon to %d", h)
	}
	unlock()
	outs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = prune("--retention-batch", "2")
		}()
	}
	wg.Wait()
	worked := 0
	for i, out := range outs {
		switch {
		case exitCode(errs[i]) == exitPruneSkipped && strings.Contains(out, "skipped"):
		case errs[i] != nil:
			t.Fatalf("prune %d: %v\n%s", i, errs[i], out)
		case strings.Contains(out, "pruned 300 commits"):
			worked++
		case strings.Contains(out, "pruned 0 commits"):
		default:
			t.Fatalf("prune %d printed:\n%s", i, out)
		}
	}
	if worked != 1 || horizonOf(t, st) != 300 {
		t.Fatalf("%d processes did the work (want 1), horizon %d:\n%s\n%s", worked, horizonOf(t, st), outs[0], outs[1])
	}
}

// synclane backup while the server runs, synclane restore with it
// stopped: a client ahead of the restored database gets resetRequired,
// bootstraps again and converges on the backup's rows.
func TestBackupAndRestoreCommands(t *testing.T) {
	dir := t.TempDir()
	base, stop := startServeStoppable(t, "--data", dir)
	codec := ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)
	w := &httpsync.Client{URL: base + "/sync", ClientID: "writer", Header: map[string][]string{"X-Actor": {"ada"}}}
	push := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprint("t", i)
			payload, err := codec.AppendSparse(nil, ssp2.Row{id, "L", "title", false, int64(i), int64(0)}, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Push(context.Background(), &ssp2.PushCommit{ClientCommitID: id,
				Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: payload}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	replica := func(base string) *httpsynctest.Replica {
		r := httpsynctest.NewReplica(&httpsync.Client{URL: base + "/sync", ClientID: "reader", Header: map[string][]string{"X-Actor": {"ada"}}}, schema.MustDemo())
		r.Subscribe("s", "todos", map[string][]string{"list_id": {"L"}})
		return r
	}
	push(0, 10)
	if code, _, errOut := runCmd(t, "backup", "--data", dir, "--to", filepath.Join(t.TempDir(), "backup.db")); code != 2 || !strings.Contains(errOut, "a backup is now a directory") {
		t.Fatalf("backup to a .db file: exit %d %s", code, errOut)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	if code, out, errOut := runCmd(t, "backup", "--data", dir, "--to", backup); code != 0 || !strings.Contains(out, "backed up") {
		t.Fatalf("online backup: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "backup", "--data", dir, "--to", backup); code != 1 || !strings.Contains(errOut, "exists") {
		t.Fatalf("backup onto an existing directory: exit %d %s", code, errOut)
	}
	push(10, 15)
	r := replica(base)
	if err := r.SyncUntilIdle(context.Background(), 5); err != nil || len(r.Rows["todos"]) != 15 {
		t.Fatalf("before the restore: %v, %d rows", err, len(r.Rows["todos"]))
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	for _, bad := range [][]string{{"restore", "--data", dir}, {"restore", "--data", dir, "--from", backup, "--rotate-epochs"},
		{"restore", "--postgres", "postgres://x", "--from", backup}, {"backup", "--data", dir}} {
		if code, _, _ := runCmd(t, bad...); code != 2 {
			t.Fatalf("%v: exit %d, want 2", bad, code)
		}
	}
	if code, _, errOut := runCmd(t, "restore", "--data", t.TempDir(), "--from", filepath.Join(dir, "nope.db")); code != 1 {
		t.Fatalf("restore of a missing file: exit %d %s", code, errOut)
	}
	code, out, errOut := runCmd(t, "restore", "--data", dir, "--from", backup)
	if code != 0 || !strings.Contains(out, "rotated the log epoch of 1 partitions") || !strings.Contains(out, "default") {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	// A successful restore removes the files it replaced (-wal and -shm too).
	if aside, _ := filepath.Glob(filepath.Join(dir, "*.before-restore-*")); len(aside) != 0 || !strings.Contains(out, "removed the") {
		t.Fatalf("the replaced files are left after a successful restore: %v\n%s", aside, out)
	}
	base2 := startServe(t, "--data", dir)
	r.Client.URL = base2 + "/sync"
	_, err := r.Client.Pull(context.Background(), r.Limits, &ssp2.Subscription{ID: "s", Table: "todos", Scopes: r.Subs[0].Scopes, Cursor: r.Subs[0].Cursor})
	if !errors.Is(err, httpsync.ErrResetRequired) {
		t.Fatalf("a client ahead of the restored database: %v, want resetRequired", err)
	}
	r.Reset()
	if err := r.SyncUntilIdle(context.Background(), 5); err != nil || len(r.Rows["todos"]) != 10 {
		t.Fatalf("after the restore: %v, %d rows, want the backup's 10", err, len(r.Rows["todos"]))
	}
	// The writer re-acquires the epoch; its lost commits are new again.
	w.URL, w.Epoch = base2+"/sync", ""
	push(10, 12)
	if err := r.SyncUntilIdle(context.Background(), 5); err != nil || len(r.Rows["todos"]) != 12 {
		t.Fatalf("after writing on the restored database: %v, %d rows", err, len(r.Rows["todos"]))
	}
	if _, err := os.Stat(backup); err != nil {
		t.Fatalf("the backup file: %v", err)
	}
}

// serve refuses retention limits below the normative floors before it
// touches storage.
func TestServeRefusesRetentionBelowFloors(t *testing.T) {
	for _, flags := range [][]string{
		{"--retention-min-commits", "999"}, {"--retention-active-window", "24h"}, {"--retention-age-force", "719h"},
		{"--retention-batch", "0"}, {"--retention-interval", "-1s"},
	} {
		dir := t.TempDir()
		code, _, errOut := runCmd(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--data", dir}, flags...)...)
		if code != 2 || !strings.Contains(errOut, strings.TrimPrefix(flags[0], "--")) {
			t.Fatalf("%v: exit %d, %s; want 2 naming the flag", flags, code, errOut)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("%v: a refused start touched storage: %v", flags, entries)
		}
	}
}

// restore --from without --schema, of a backup made under another schema,
// is refused before anything is changed, naming the flag it needs (not
// "bump the schema version", which would migrate the restored data to the
// demo schema); given the schema, it restores and removes what it replaced.
func TestRestoreNamesTheSchemaFlag(t *testing.T) {
	for _, tc := range []struct {
		name, schema, want string
	}{
		{"same version, another schema", `{"version":1,"tables":[{"name":"notes","columns":[{"name":"id","type":"string"},{"name":"body","type":"string","nullable":true}],"primaryKey":"id","scopes":["n:{id}"]}]}`,
			"holds another schema at v1 than the built-in demo schema (no --schema given): pass --schema FILE"},
		{"newer version", `{"version":3,"tables":[{"name":"notes","columns":[{"name":"id","type":"string"},{"name":"body","type":"string","nullable":true}],"primaryKey":"id","scopes":["n:{id}"]}]}`,
			"holds schema v3, newer than the built-in demo schema (no --schema given) (v1): pass --schema FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sf := filepath.Join(t.TempDir(), "schema.json")
			if err := os.WriteFile(sf, []byte(tc.schema), 0o600); err != nil {
				t.Fatal(err)
			}
			src := t.TempDir()
			_, stop := startServeStoppable(t, "--data", src, "--schema", sf)
			if code := stop(); code != 0 {
				t.Fatalf("serve exited %d", code)
			}
			bdir := filepath.Join(t.TempDir(), "backup")
			if code, out, errOut := runCmd(t, "backup", "--data", src, "--schema", sf, "--to", bdir); code != 0 {
				t.Fatalf("backup: exit %d\n%s%s", code, out, errOut)
			}
			// The target holds data of its own (the demo schema's).
			target := t.TempDir()
			_, stop = startServeStoppable(t, "--data", target)
			if code := stop(); code != 0 {
				t.Fatalf("serve exited %d", code)
			}
			before := snapshotDir(t, target)
			code, out, errOut := runCmd(t, "restore", "--data", target, "--from", bdir)
			if code != 1 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "nothing in") || strings.Contains(errOut, "bump") {
				t.Fatalf("restore without --schema: exit %d, want 1 naming the flag (%q)\n%s%s", code, tc.want, out, errOut)
			}
			if after := snapshotDir(t, target); !maps.Equal(before, after) {
				t.Fatalf("a refused restore changed the data directory:\nbefore %v\nafter  %v", before, after)
			}
			code, out, errOut = runCmd(t, "restore", "--data", target, "--from", bdir, "--schema", sf)
			if code != 0 || !strings.Contains(out, "rotated the log epoch") || !strings.Contains(out, "removed the") {
				t.Fatalf("restore with --schema: exit %d\n%s%s", code, out, errOut)
			}
			if aside, _ := filepath.Glob(filepath.Join(target, "*.before-restore-*")); len(aside) != 0 {
				t.Fatalf("the replaced files are left after a successful restore: %v", aside)
			}
		})
	}
}
