package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/httpsync"
)

// TestMeasureHomesWrites measures write throughput with one database
// against two (skipped unless SYNCLANE_MEASURE_HOMES_WRITES is set to the
// commits each writer makes): a serve process with 200 partitions either
// all in main (--pg-max-conns 16) or spread by the directory over main
// and a second database on the same server (--pg-max-conns 8 each: the
// same connections in all), 32 writers pushing one-todo commits to them.
// Per run it prints the commits/s and, what survives a shared machine,
// the CPU per commit of the PostgreSQL backends serving the process
// (utime+stime from /proc of the backends pg_stat_activity lists under
// the run's application_name, split by database) and of the serve
// process. SYNCLANE_MEASURE_HOMES_RUNS (default 3) alternates the two
// layouts that many times. A measurement, not a unit test: it asserts
// only that every commit was applied.
func TestMeasureHomesWrites(t *testing.T) {
	perWriter, _ := strconv.Atoi(os.Getenv("SYNCLANE_MEASURE_HOMES_WRITES"))
	if perWriter <= 0 {
		t.Skip("set SYNCLANE_MEASURE_HOMES_WRITES to measure")
	}
	runs, _ := strconv.Atoi(os.Getenv("SYNCLANE_MEASURE_HOMES_RUNS"))
	if runs <= 0 {
		runs = 3
	}
	for r := range runs {
		for _, two := range []bool{false, true} {
			name := fmt.Sprintf("one/%d", r)
			if two {
				name = fmt.Sprintf("two/%d", r)
			}
			t.Run(name, func(t *testing.T) { measureHomesWrites(t, two, perWriter, r) })
		}
	}
}

func measureHomesWrites(t *testing.T, two bool, perWriter, run int) {
	const (
		partitions = 200
		writers    = 32
	)
	u := pgtest.URL(t)
	pgSchema := pgtest.NewSchema(t)
	app := fmt.Sprintf("synclane-measure-%d-%d", run, os.Getpid())
	with := func(url, params string) string {
		if strings.Contains(url, "?") {
			return url + "&" + params
		}
		return url + "?" + params
	}
	mainURL := with(u, "search_path="+pgSchema+"&application_name="+app)
	args := []string{"--postgres", mainURL, "--pg-max-conns", "16"}
	dbNames := []string{homes.Main}
	var secondDB string
	if two {
		second := pgtest.NewDatabase(t, u)
		secondDB = second.Name
		args = []string{"--postgres", mainURL, "--postgres-databases", "second=" + with(second.URL, "application_name="+app), "--pg-max-conns", "8"}
		dbNames = append(dbNames, "second")
	}
	p := startProc(t, args...)
	ctx := context.Background()
	mon, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close(ctx)
	mainDB := ""
	if err := mon.QueryRow(ctx, `SELECT current_database()`).Scan(&mainDB); err != nil {
		t.Fatal(err)
	}
	homeOfDB := map[string]string{mainDB: homes.Main, secondDB: "second"}

	tr := loadTransport()
	defer tr.CloseIdleConnections()
	httpc := &http.Client{Transport: tr}
	parts := make([]string, partitions)
	for i := range parts {
		parts[i] = fmt.Sprintf("hw-%03d", i)
	}
	var mu sync.Mutex
	var failures []string
	// pushAll makes writer w push n commits, commit k to partition
	// parts[pick(w, k)] (each partition its own client).
	pushAll := func(nWriters, n int, tag string, pick func(w, k int) int) {
		var wg sync.WaitGroup
		for w := range nWriters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				clients := map[string]*httpsync.Client{}
				for k := range n {
					part := parts[pick(w, k)]
					c := clients[part]
					if c == nil {
						c = &httpsync.Client{URL: p.base + "/sync", HTTP: httpc, ClientID: fmt.Sprintf("w%02d", w),
							Header: http.Header{"X-Actor": {"ada"}, "X-Partition": {part}}}
						clients[part] = c
					}
					id := fmt.Sprintf("%s-%02d-%05d", tag, w, k)
					rs, err := c.Push(ctx, todoCommit("c-"+id, id, "L"))
					if err != nil || len(rs) != 1 || rs[0].Status != ssp2.CommitApplied {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("%s: %+v %v", id, rs, err))
						mu.Unlock()
						return
					}
				}
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("%d pushes failed, first %s", len(failures), failures[0])
		}
	}
	// Warm up: every partition placed and created, the pools filled.
	pushAll(8, partitions/8, "warm", func(w, k int) int { return w + 8*k })

	// cpu returns the CPU ticks of the run's backends by home, and of the
	// serve process.
	cpu := func() (map[string]map[int]int64, int64) {
		t.Helper()
		rows, err := mon.Query(ctx, `SELECT pid, datname FROM pg_stat_activity WHERE application_name = $1`, app)
		if err != nil {
			t.Fatal(err)
		}
		type backend struct {
			pid int
			db  string
		}
		bs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backend, error) {
			var b backend
			return b, r.Scan(&b.pid, &b.db)
		})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]map[int]int64{}
		for _, b := range bs {
			ticks, err := procTicks(b.pid)
			if err != nil {
				continue // ended meanwhile
			}
			h := homeOfDB[b.db]
			if out[h] == nil {
				out[h] = map[int]int64{}
			}
			out[h][b.pid] = ticks
		}
		self, err := procTicks(p.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		return out, self
	}
	before, serveBefore := cpu()
	start := time.Now()
	pushAll(writers, perWriter, "load", func(w, k int) int { return (w*7 + k) % partitions })
	wall := time.Since(start)
	after, serveAfter := cpu()
	commits := writers * perWriter
	const tick = 10 * time.Millisecond // CLK_TCK 100 on Linux
	perCommit := func(ticks int64) float64 {
		return float64(time.Duration(ticks)*tick) / float64(time.Microsecond) / float64(commits)
	}
	var total int64
	var parts2 []string
	for _, h := range dbNames {
		var d int64
		for pid, tk := range after[h] {
			d += tk - before[h][pid] // a backend born during the run counts whole
		}
		total += d
		parts2 = append(parts2, fmt.Sprintf("pg_cpu_us_per_commit_%s=%.0f backends_%s=%d", h, perCommit(d), h, len(after[h])))
	}
	layout := "one"
	if two {
		layout = "two"
	}
	fmt.Printf("HOMES layout=%s run=%d commits=%d wall_s=%.2f commits_per_s=%.0f pg_cpu_us_per_commit=%.0f %s serve_cpu_us_per_commit=%.0f\n",
		layout, run, commits, wall.Seconds(), float64(commits)/wall.Seconds(), perCommit(total), strings.Join(parts2, " "), perCommit(serveAfter-serveBefore))
}

// procTicks returns utime+stime of a process in clock ticks, from
// /proc/PID/stat.
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	return ut + st, nil
}
