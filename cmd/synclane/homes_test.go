package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

func TestHomesFlag(t *testing.T) {
	for _, tc := range []struct {
		in    string
		names []string
		urls  []string
		bad   string
	}{
		{in: "b=postgres://u:p@h/db?sslmode=disable,c=postgresql://h1,h2/db", names: []string{"b", "c"},
			urls: []string{"postgres://u:p@h/db?sslmode=disable", "postgresql://h1,h2/db"}},
		{in: "eu-1=postgres://h/db", names: []string{"eu-1"}, urls: []string{"postgres://h/db"}},
		{in: "B=postgres://h/db", bad: "home name"},
		{in: "main=postgres://h/db", bad: "is the --postgres database"},
		{in: "b=postgres://h/db,b=postgres://h/db2", bad: "named twice"},
		{in: "b=mysql://h/db", bad: "want NAME=postgres://"},
		{in: "postgres://u:secret@h/db", bad: "want NAME=postgres://"},
	} {
		var f homesFlag
		err := f.Set(tc.in)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) || strings.Contains(err.Error(), "secret") {
				t.Errorf("Set(%q) = %v, want an error about %q without the password", tc.in, err, tc.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("Set(%q): %v", tc.in, err)
			continue
		}
		for i, h := range f.list {
			if h.name != tc.names[i] || h.url != tc.urls[i] {
				t.Errorf("Set(%q)[%d] = %+v, want %s=%s", tc.in, i, h, tc.names[i], tc.urls[i])
			}
		}
		if f.String() != strings.Join(tc.names, ",") {
			t.Errorf("String() = %q", f.String())
		}
	}
	code, _, stderr := runCmd(t, "serve", "--postgres-databases", "b=postgres://h/db")
	if code != 2 || !strings.Contains(stderr, "--postgres-databases needs --postgres") {
		t.Fatalf("--postgres-databases without --postgres: exit %d, %s", code, stderr)
	}
}

// Two serve processes on two PostgreSQL databases (the --postgres one,
// home main, and a second, home "second", its own database on the test
// server): 20 partitions written through both processes spread over both
// databases, each partition's data in its home only, read back whole
// from either process; the admin API lists each partition with its home
// and /metrics has a series per home. With the second database refusing
// connections, its partitions answer 503 (retryable) while main's keep
// taking pushes; once it is back they serve again.
func TestServeSeveralDatabases(t *testing.T) {
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

	const n = 20
	homeOf := map[string]string{}
	for i := range n {
		p := fmt.Sprint("tenant-", i)
		homeOf[p] = homes.Rendezvous([]string{homes.Main, "second"}, p)
		for k, proc := range []*proc{a, b, a} {
			pushTodos(t, proc.base, p, fmt.Sprint(p, "-", k))
		}
	}
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
	spread := map[string]int{}
	for p, want := range homeOf {
		var home string
		if err := mainConn.QueryRow(ctx, `SELECT home FROM `+homes.DirectoryTable+` WHERE partition = $1`, p).Scan(&home); err != nil || home != want {
			t.Fatalf("%s: directory names %q (%v), want %q", p, home, err, want)
		}
		spread[home]++
		var inMain, inSecond int
		_ = mainConn.QueryRow(ctx, `SELECT count(*) FROM sync_commits WHERE partition = $1`, p).Scan(&inMain)
		_ = secondConn.QueryRow(ctx, `SELECT count(*) FROM sync_commits WHERE partition = $1`, p).Scan(&inSecond)
		if (home == homes.Main && (inMain != 3 || inSecond != 0)) || (home == "second" && (inMain != 0 || inSecond != 3)) {
			t.Fatalf("%s (home %s): %d commits in main, %d in second", p, home, inMain, inSecond)
		}
		for _, proc := range []*proc{a, b} {
			if got := readTodos(t, proc.base, p); len(got) != 3 {
				t.Fatalf("%s read from %s: %v, want 3 todos", p, proc.base, got)
			}
		}
	}
	if spread[homes.Main] == 0 || spread["second"] == 0 {
		t.Fatalf("partitions not spread: %v", spread)
	}

	var page struct {
		Items []struct {
			Partition string `json:"partition"`
			Home      string `json:"home"`
		} `json:"items"`
	}
	if code := adminGet(t, a.admin+"/api/partitions?limit=100", adminTestToken, &page); code != 200 {
		t.Fatalf("GET /api/partitions: %d", code)
	}
	if len(page.Items) != n {
		t.Fatalf("admin lists %d partitions, want %d", len(page.Items), n)
	}
	for _, it := range page.Items {
		if it.Home != homeOf[it.Partition] {
			t.Fatalf("admin: %s in home %q, want %q", it.Partition, it.Home, homeOf[it.Partition])
		}
	}
	_, metrics := get(t, a.base+"/metrics")
	for _, want := range []string{
		fmt.Sprintf(`synclane_postgres_home_partitions{home="main"} %d`, spread[homes.Main]),
		fmt.Sprintf(`synclane_postgres_home_partitions{home="second"} %d`, spread["second"]),
		`synclane_postgres_home_calls_total{home="second"}`,
		`synclane_postgres_home_unreachable_total{home="second"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}

	var onMain, onSecond string
	for p, h := range homeOf {
		if h == homes.Main {
			onMain = p
		} else {
			onSecond = p
		}
	}
	second.RefuseConnections(t)
	for _, proc := range []*proc{a, b} {
		rs, err := partClient(proc.base, onSecond, "writer-"+onSecond).Push(ctx, todoCommit("down", "down", "L"))
		e := syncerr.As(err)
		if err == nil || e.Code != syncerr.InternalError || !e.Spec().Retryable || !strings.Contains(fmt.Sprint(e.Err), "503") ||
			!strings.Contains(string(e.Details), "database_unavailable") {
			t.Fatalf("push to the unreachable home through %s: %+v, %v (details %s), want a retryable 503", proc.base, rs, err, e.Details)
		}
		pushTodos(t, proc.base, onMain, "while-second-is-down-"+proc.base[len(proc.base)-5:])
	}
	_, metrics = get(t, a.base+"/metrics")
	if strings.Contains(metrics, `synclane_postgres_home_unreachable_total{home="second"} 0`) {
		t.Fatal("/metrics counts no unreachable call of home second")
	}
	second.AcceptConnections(t)
	// Each process's pool still holds connections the outage ended: a
	// request that draws one is answered 503 and the connection dropped,
	// so a client retries (as after an outage of a single database).
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs, err := partClient(a.base, onSecond, "writer-"+onSecond).Push(ctx, todoCommit("back", "back", "L"))
		if err == nil && len(rs) == 1 && rs[0].Status == ssp2.CommitApplied {
			break
		}
		if e := syncerr.As(err); err != nil && !e.Spec().Retryable || time.Now().After(deadline) {
			t.Fatalf("the second home's partition does not serve again: %+v, %v", rs, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		r := httpsynctest.NewReplica(partClient(b.base, onSecond, "reader-after"), schema.MustDemo())
		r.Subscribe("todos", "todos", map[string][]string{"list_id": {"L"}})
		err := r.SyncUntilIdle(ctx, 20)
		if err == nil {
			if len(r.Rows["todos"]) != 4 {
				t.Fatalf("%s after the outage: %d todos, want 4", onSecond, len(r.Rows["todos"]))
			}
			break
		}
		if !syncerr.As(err).Spec().Retryable || time.Now().After(deadline) {
			t.Fatalf("read %s after the outage: %v", onSecond, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
