package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/datadir"
)

// exitCode is the exit status of a finished exec.Cmd's error (0 for nil,
// -1 when it did not exit normally).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// seedWithIdempotency appends n commits of two changes each with their
// applied idempotency records, and a rejected record every 10 commits, to
// the default partition.
func seedWithIdempotency(t *testing.T, st store, n int) {
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
		ch := func(id string) storage.ChangeRecord {
			return storage.ChangeRecord{Table: "todos", RowID: id, Op: ssp2.OpDelete, Scopes: map[string]string{"list_id": "L"}}
		}
		if err := tx.AppendCommit(ctx, storage.CommitRecord{Seq: seq, CreatedAtMs: now, ActorID: "a", ClientID: "seed", ClientCommitID: fmt.Sprint(seq),
			Changes: []storage.ChangeRecord{ch(fmt.Sprint("t", i%50)), ch(fmt.Sprint("u", i%50))}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "seed", ClientCommitID: fmt.Sprint(seq), Status: ssp2.CommitApplied, CommitSeq: seq, Result: []byte("ok")}); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if err := tx.PutIdempotency(ctx, storage.IdempotencyRecord{ClientID: "seed", ClientCommitID: fmt.Sprint("r", seq), Status: ssp2.CommitRejected, Result: []byte("no")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

var totalsRE = regexp.MustCompile(`(?m)^(?:would prune|pruned) (\d+) commits, (\d+) changes, (\d+) idempotency records, 0 tombstones in (\d+) of (\d+) partitions`)

// totals reads the final line's counts: commits, changes, idempotency.
func totals(t *testing.T, out string) [3]int64 {
	t.Helper()
	m := totalsRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no totals line in:\n%s", out)
	}
	var r [3]int64
	for i := range r {
		r[i], _ = strconv.ParseInt(m[i+1], 10, 64)
	}
	return r
}

// prune --dry-run counts exactly what the run then deletes: commits,
// changes and idempotency records (applied and rejected), on every store.
func TestPruneDryRunCountsEqualTheRun(t *testing.T) {
	for name, args := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			st := openArgs(t, args)
			seedWithIdempotency(t, st, 1500)
			st.Close()
			code, dry, errOut := runCmd(t, append([]string{"prune", "--dry-run"}, args...)...)
			if code != 0 {
				t.Fatalf("dry run: exit %d\n%s%s", code, dry, errOut)
			}
			code, run, errOut := runCmd(t, append([]string{"prune", "--retention-batch", "64"}, args...)...)
			if code != 0 {
				t.Fatalf("prune: exit %d\n%s%s", code, run, errOut)
			}
			d, r := totals(t, dry), totals(t, run)
			// 500 commits of 2 changes, 500 applied records, and the
			// rejected ones written at log positions <= 500 (seq 1, 11, ...,
			// 491 and the one at 500's batch: positions are the max seq
			// inside the one seeding transaction).
			if d != r || d[0] != 500 || d[1] != 1000 || d[2] < 500 {
				t.Fatalf("dry run counted %v, the run deleted %v (want equal, 500 commits, 1000 changes, >= 500 records)\n%s\n%s", d, r, dry, run)
			}
			if !strings.Contains(run, "default: batch 8: pruned 52 commits") {
				t.Fatalf("no per-batch progress:\n%s", run)
			}
			if name == "sqlite" && !strings.Contains(run, "synclane vacuum returns them") {
				t.Fatalf("no free-pages line:\n%s", run)
			}
		})
	}
}

// startPrune starts the binary's prune on dir and returns it with a reader
// of its stdout lines.
func startPrune(t *testing.T, bin string, args ...string) (*exec.Cmd, *bufio.Scanner, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"prune"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out), &stderr
}

// waitLine reads lines until one contains want, returning what was read.
func waitLine(t *testing.T, sc *bufio.Scanner, want string) string {
	t.Helper()
	var b strings.Builder
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), want) {
			return b.String()
		}
	}
	t.Fatalf("output ended before %q:\n%s", want, b.String())
	return ""
}

// SIGINT stops a prune after the batch in flight: it exits 130 and its
// totals are what was pruned (the horizon), not 0. A prune killed with
// SIGKILL leaves the SQLite maintenance lease behind: the next prune
// exits 3 naming the dead process, and a later one runs the pass once
// the lease (--maintenance-lease, 30 s here) lapses unrenewed.
func TestPruneInterruptedAndKilled(t *testing.T) {
	bin := synclaneBinary(t)
	dir := t.TempDir()
	args := []string{"--data", dir}
	st := openArgs(t, args)
	seedWithIdempotency(t, st, 5000)
	st.Close()

	cmd, sc, stderr := startPrune(t, bin, append(args, "--retention-batch", "5")...)
	got := waitLine(t, sc, "default: batch 3:")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	for sc.Scan() {
		rest.WriteString(sc.Text() + "\n")
	}
	err := cmd.Wait()
	out := got + rest.String()
	if code := exitCode(err); code != exitInterrupted || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("interrupted prune: exit %d, want %d\n%s%s", code, exitInterrupted, out, stderr.String())
	}
	st = openArgs(t, args)
	h := horizonOf(t, st)
	st.Close()
	if tot := totals(t, out); h < 15 || tot[0] != h || h >= 4000 {
		t.Fatalf("interrupted prune reported %v commits, the horizon is %d (want equal, at least 3 batches, not all)\n%s", tot, h, out)
	}

	// kill -9 in the middle of a pass, under a 30 s lease (renewed every
	// 10 s: 20-30 s of it are left at the kill).
	args = append(args, "--maintenance-lease", "30s")
	cmd, sc, _ = startPrune(t, bin, append(args, "--retention-batch", "5")...)
	waitLine(t, sc, ": batch 2:")
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // the process is dead: nothing more to read
	killed := time.Now()
	code, skipped, _ := runCmd(t, append([]string{"prune"}, args...)...)
	if code != exitPruneSkipped || !strings.Contains(skipped, fmt.Sprintf("pid %d", cmd.Process.Pid)) {
		t.Fatalf("prune after a kill -9: exit %d, want %d naming pid %d\n%s", code, exitPruneSkipped, cmd.Process.Pid, skipped)
	}
	// The dead process's lease, no longer renewed, lapses: a later prune
	// runs the pass. The deadline is generous (a loaded CI machine): it
	// bounds the wait, it is not a speed target.
	deadline := killed.Add(30*time.Second + 90*time.Second)
	for {
		code, out, errOut := runCmd(t, append([]string{"prune"}, args...)...)
		if code == 0 {
			st = openArgs(t, args)
			defer st.Close()
			if h := horizonOf(t, st); h != 4000 || !strings.Contains(out, "horizon 4000 of 4000") {
				t.Fatalf("the pass after the lease lapsed left the horizon at %d, want 4000\n%s", h, out)
			}
			break
		}
		if code != exitPruneSkipped {
			t.Fatalf("prune while the dead lease holds: exit %d\n%s%s", code, out, errOut)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead process's lease still blocks maintenance %v after the kill:\n%s", time.Since(killed), out)
		}
		time.Sleep(2 * time.Second) // polling the condition (the lease's expiry) with a deadline
	}
}

// synclane vacuum refuses while another process has the database open and
// shrinks a pruned file once it is alone.
func TestVacuumCommand(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data", dir}
	st := openArgs(t, args)
	seedWithIdempotency(t, st, 4000)
	st.Close()
	if code, out, errOut := runCmd(t, append([]string{"prune"}, args...)...); code != 0 || !strings.Contains(out, "free pages") {
		t.Fatalf("prune: exit %d\n%s%s", code, out, errOut)
	}
	db := filepath.Join(dir, "synclane.db")
	open := openArgs(t, args)
	if code, _, errOut := runCmd(t, append([]string{"vacuum"}, args...)...); code != 1 || !strings.Contains(errOut, "stop it first") {
		t.Fatalf("vacuum with the database open: exit %d, want 1\n%s", code, errOut)
	}
	open.Close()
	held, err := datadir.Acquire(dir, "synclane serve") // a server holding the directory
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCmd(t, append([]string{"vacuum"}, args...)...); code != 1 || !strings.Contains(errOut, "is in use by `synclane serve`") {
		t.Fatalf("vacuum with the directory held: exit %d, want 1 naming the holder\n%s", code, errOut)
	}
	held.Release()
	before, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, append([]string{"vacuum"}, args...)...)
	after, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || !strings.Contains(out, "vacuumed:") || !strings.Contains(out, "free disk") || after.Size() >= before.Size() {
		t.Fatalf("vacuum: exit %d, %d → %d bytes\n%s%s", code, before.Size(), after.Size(), out, errOut)
	}
	if code, out, errOut := runCmd(t, append([]string{"vacuum", "--postgres", "postgres://x"}, "--data", dir)...); code != 2 || !strings.Contains(errOut, "PostgreSQL") {
		t.Fatalf("vacuum --postgres: exit %d\n%s%s", code, out, errOut)
	}
}
