package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
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
