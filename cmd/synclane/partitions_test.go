package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// synclane partitions move and the admin API's move route, against two
// serve processes on two databases: a partition of main written through
// both is moved to the second database by the command (a process of its
// own, as an operator runs it), then back by POST
// /api/partitions/{p}/move; after each move its commits are in one
// database only, both processes (one of them holding a stale cached
// directory entry) read every todo and take new pushes (a push may meet
// one retryable 503 while its process re-reads the directory), and
// rebalance --dry-run plans nothing for one partition.
func TestPartitionsMoveCommand(t *testing.T) {
	u := pgtest.URL(t)
	pgSchema := pgtest.NewSchema(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	mainURL := u + sep + "search_path=" + pgSchema
	second := pgtest.NewDatabase(t, u)
	flags := []string{"--postgres", mainURL, "--postgres-databases", "second=" + second.URL, "--pg-max-conns", "4"}
	a := startProc(t, append(flags, "--admin-listen", "127.0.0.1:0", "--admin-token", adminTestToken)...)
	b := startProc(t, flags...)
	var p string
	for i := 0; p == ""; i++ {
		if q := fmt.Sprint("tenant-", i); homes.Rendezvous([]string{homes.Main, "second"}, q) == homes.Main {
			p = q
		}
	}
	pushTodos(t, a.base, p, "a1", "a2")
	pushTodos(t, b.base, p, "b1")
	ctx := context.Background()
	conn := func(url string) *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(ctx) })
		return c
	}
	mainConn, secondConn := conn(mainURL), conn(second.URL)
	where := func() (home string, inMain, inSecond int) {
		t.Helper()
		if err := mainConn.QueryRow(ctx, `SELECT home FROM `+homes.DirectoryTable+` WHERE partition = $1`, p).Scan(&home); err != nil {
			t.Fatal(err)
		}
		_ = mainConn.QueryRow(ctx, `SELECT count(*) FROM sync_commits WHERE partition = $1`, p).Scan(&inMain)
		_ = secondConn.QueryRow(ctx, `SELECT count(*) FROM sync_commits WHERE partition = $1`, p).Scan(&inSecond)
		return
	}
	pushRetry := func(base, id string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			rs, err := partClient(base, p, "writer-"+p).Push(ctx, todoCommit("c-"+id, id, "L"))
			if err == nil && len(rs) == 1 && rs[0].Status == ssp2.CommitApplied {
				return
			}
			if e := syncerr.As(err); err == nil || !e.Spec().Retryable || time.Now().After(deadline) {
				t.Fatalf("push %s through %s: %+v, %v", id, base, rs, err)
			}
			time.Sleep(50 * time.Millisecond) // the client's back-off after a 503
		}
	}
	check := func(home string, commits int, newID string) {
		t.Helper()
		got, inMain, inSecond := where()
		if got != home || (home == homes.Main && (inMain != commits || inSecond != 0)) || (home == "second" && (inSecond != commits || inMain != 0)) {
			t.Fatalf("directory %q, commits main %d second %d; want %q with %d", got, inMain, inSecond, home, commits)
		}
		for i, proc := range []*proc{b, a} {
			pushRetry(proc.base, fmt.Sprint(newID, i))
		}
		for _, proc := range []*proc{a, b} {
			if todos := readTodos(t, proc.base, p); len(todos) != commits+2 {
				t.Fatalf("read through %s: %d todos, want %d", proc.base, len(todos), commits+2)
			}
		}
	}

	code, stdout, stderr := runCmd(t, append([]string{"partitions", "move", p, "--to", "second"}, flags...)...)
	if code != 0 {
		t.Fatalf("partitions move: exit %d: %s", code, stderr)
	}
	var rep moveReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.From != homes.Main || rep.To != "second" || rep.MaxSeq != 3 {
		t.Fatalf("partitions move printed %q (%v)", stdout, err)
	}
	check("second", 3, "after-cmd-")

	req, _ := http.NewRequest("POST", a.admin+"/api/partitions/"+p+"/move?to=main", nil)
	req.Header.Set("Authorization", "Bearer "+adminTestToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var back moveReport
	err = json.NewDecoder(res.Body).Decode(&back)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || back.From != "second" || back.To != homes.Main || back.MaxSeq != 5 {
		t.Fatalf("POST move: %d %+v (%v)", res.StatusCode, back, err)
	}
	check(homes.Main, 5, "after-api-")
	if _, m := get(t, a.base+"/metrics"); !strings.Contains(m, `synclane_postgres_home_moves_in_total{home="main"} 1`) {
		t.Fatal("/metrics of the process that moved it back does not count the move into main")
	}
	if _, m := get(t, b.base+"/metrics"); !strings.Contains(m, `synclane_postgres_home_move_refused_total{home="main"}`) {
		t.Fatalf("/metrics lacks the move guard's refusals:\n%s", grepLines(m, "synclane_postgres_home_"))
	}

	code, stdout, stderr = runCmd(t, append([]string{"partitions", "rebalance", "--dry-run"}, flags...)...)
	if code != 0 || strings.TrimSpace(stdout) != "" {
		t.Fatalf("rebalance --dry-run of one partition: exit %d, %q %s", code, stdout, stderr)
	}
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// synclane partitions move killed with SIGKILL after each step of the
// move (a process of its own, held there by SYNCLANE_TEST_MOVE_HOLD_AFTER),
// then run again: the re-run undoes (before the switch) or finishes (after
// it) the move and moves the partition; afterwards exactly one database
// holds its commits, the serving process reads every todo and takes
// pushes, and a push made while the mover was dead is kept when it was
// acknowledged.
func TestPartitionsMoveKilled(t *testing.T) {
	u := pgtest.URL(t)
	pgSchema := pgtest.NewSchema(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	mainURL := u + sep + "search_path=" + pgSchema
	second := pgtest.NewDatabase(t, u)
	flags := []string{"--postgres", mainURL, "--postgres-databases", "second=" + second.URL, "--pg-max-conns", "4"}
	a := startProc(t, flags...)
	ctx := context.Background()
	mainConn, err := pgx.Connect(ctx, mainURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mainConn.Close(ctx) })
	secondConn, err := pgx.Connect(ctx, second.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = secondConn.Close(ctx) })
	next := 0
	for step := 1; step <= 6; step++ {
		var p string
		for ; p == ""; next++ {
			if q := fmt.Sprint("killed-", next); homes.Rendezvous([]string{homes.Main, "second"}, q) == homes.Main {
				p = q
			}
		}
		pushTodos(t, a.base, p, "t1", "t2", "t3")
		cmd := exec.Command(synclaneBinary(t), append([]string{"partitions", "move", p, "--to", "second"}, flags...)...)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", holdAfterEnv, step))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != fmt.Sprintf("held after step %d", step) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("step %d: the mover printed %q (%v)", step, line, err)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		// A push while the mover is dead: taken before the fence and after
		// the switch, a retryable 503 in between.
		rs, err := partClient(a.base, p, "writer-"+p).Push(ctx, todoCommit("c-dead", "dead", "L"))
		acked := err == nil && len(rs) == 1 && rs[0].Status == ssp2.CommitApplied
		if !acked && !syncerr.As(err).Spec().Retryable {
			t.Fatalf("step %d: push while the mover is dead: %+v, %v", step, rs, err)
		}
		code, stdout, stderr := runCmd(t, append([]string{"partitions", "move", p, "--to", "second"}, flags...)...)
		var rep moveReport
		if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil {
			t.Fatalf("step %d: re-run: exit %d, %q %s", step, code, stdout, stderr)
		}
		wantRecovered := "undone"
		if step == 6 {
			wantRecovered = "finished"
		}
		if rep.Recovered != wantRecovered {
			t.Fatalf("step %d: re-run recovered %q, want %q", step, rep.Recovered, wantRecovered)
		}
		commits := 3
		if acked {
			commits = 4
		}
		var home string
		var inMain, inSecond, markers int
		if err := mainConn.QueryRow(ctx, `SELECT home FROM `+homes.DirectoryTable+` WHERE partition = $1 AND move_state = ''`, p).Scan(&home); err != nil || home != "second" {
			t.Fatalf("step %d: directory names %q with no move under way (%v), want second", step, home, err)
		}
		_ = mainConn.QueryRow(ctx, `SELECT count(*) FROM sync_commits WHERE partition = $1`, p).Scan(&inMain)
		_ = secondConn.QueryRow(ctx, `SELECT count(*) FROM sync_commits WHERE partition = $1`, p).Scan(&inSecond)
		_ = secondConn.QueryRow(ctx, `SELECT count(*) FROM sync_home_moved WHERE partition = $1`, p).Scan(&markers)
		if inMain != 0 || inSecond != commits || markers != 0 {
			t.Fatalf("step %d: commits main %d second %d (want 0, %d), markers in second %d", step, inMain, inSecond, commits, markers)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			rs, err := partClient(a.base, p, "writer-"+p).Push(ctx, todoCommit("c-after", "after", "L"))
			if err == nil && len(rs) == 1 && rs[0].Status == ssp2.CommitApplied {
				break
			}
			if e := syncerr.As(err); err == nil || !e.Spec().Retryable || time.Now().After(deadline) {
				t.Fatalf("step %d: push after the re-run: %+v, %v", step, rs, err)
			}
			time.Sleep(50 * time.Millisecond) // the client's back-off after a 503
		}
		if todos := readTodos(t, a.base, p); len(todos) != commits+1 {
			t.Fatalf("step %d: %d todos, want %d", step, len(todos), commits+1)
		}
	}
}
