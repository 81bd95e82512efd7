package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/engine/cluster"
)

// TestParseProcStatCPU reads utime+stime past a command name holding
// spaces and parentheses, and refuses lines without those fields.
func TestParseProcStatCPU(t *testing.T) {
	line := "4242 (serve (x) y) S 1 4242 4242 0 -1 4194304 100 0 0 0 1234 66 0 0 20 0 9 0 3642 222543872 7514 18446744073709551615"
	got, err := parseProcStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1300 * clockTick; got != want {
		t.Errorf("CPU %v, want %v", got, want)
	}
	for _, bad := range []string{"", "4242 serve S 1 2", "4242 (serve) S 1 2 3", "4242 (serve) S 1 4242 4242 0 -1 4194304 100 0 0 0 x 66 0"} {
		if _, err := parseProcStatCPU(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if d, ok := procCPU(os.Getpid()); !ok || d < 0 {
		t.Errorf("procCPU(self) = %v, %v", d, ok)
	}
}

// TestLockStats checks the means, the share of samples with a waiter and
// the breakdown by wait event.
func TestLockStats(t *testing.T) {
	var s lockStats
	if s.meanWaiters() != 0 || s.waitingShare() != 0 || s.eventsNote() != "none" {
		t.Fatalf("empty stats: %v %v %q", s.meanWaiters(), s.waitingShare(), s.eventsNote())
	}
	s.add(map[string]int{})
	s.add(map[string]int{"transactionid": 2, "advisory": 1})
	s.add(map[string]int{"tuple": 1})
	s.add(map[string]int{})
	if s.samples != 4 || s.maxWaiters != 3 {
		t.Errorf("samples %d, max %d; want 4, 3", s.samples, s.maxWaiters)
	}
	if got := s.meanWaiters(); got != 1 {
		t.Errorf("mean waiters %v, want 1", got)
	}
	if got := s.meanRowWaiters(); got != 0.75 {
		t.Errorf("mean row-lock waiters %v, want 0.75", got)
	}
	if got := s.waitingShare(); got != 0.5 {
		t.Errorf("waiting share %v, want 0.5", got)
	}
	if got, want := s.eventsNote(), "transactionid 50%, advisory 25%, tuple 25%"; got != want {
		t.Errorf("note %q, want %q", got, want)
	}
}

// TestPartitionOwnedBy checks that the partition picked for each member
// is placed on it, and partitionOwner finds it back.
func TestPartitionOwnedBy(t *testing.T) {
	for _, ids := range [][]string{{"http://127.0.0.1:1", "http://127.0.0.1:2"}, {"http://a", "http://b", "http://c"}} {
		v := cluster.View{}
		for _, id := range ids {
			v.Members = append(v.Members, cluster.Member{ID: id})
		}
		for i := range ids {
			p := partitionOwnedBy(ids, i, "fwd-")
			if m, _ := cluster.Owner(v, p); m.ID != ids[i] {
				t.Errorf("%v: %s is owned by %s, want %s", ids, p, m.ID, ids[i])
			}
			if got := partitionOwner(ids, p); got != i {
				t.Errorf("%v: partitionOwner(%s) = %d, want %d", ids, p, got, i)
			}
		}
	}
}

// TestWithQuery keeps the URL's parameters and adds the new ones.
func TestWithQuery(t *testing.T) {
	got, err := withQuery("postgres://u@127.0.0.1:5432/db?sslmode=disable", "search_path", "s1", "application_name", "s1")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Host != "127.0.0.1:5432" || u.Path != "/db" || q.Get("sslmode") != "disable" || q.Get("search_path") != "s1" || q.Get("application_name") != "s1" {
		t.Errorf("got %s", got)
	}
}

// TestRealtimeTimeout: on the first commit, sockets missing on exactly
// the other processes make the case skipped; anything else is an error.
func TestRealtimeTimeout(t *testing.T) {
	ids := []string{"a", "b", "c"}
	seq := int64(5)
	highest := func(gotOn ...int) []int64 {
		h := make([]int64, 10) // sockets 0..9 on process i mod 3
		for i := range h {
			for _, p := range gotOn {
				if i%3 == p {
					h[i] = seq
				}
			}
		}
		return h
	}
	res, err := realtimeTimeout(Result{}, ids, 1, highest(1), seq, 0, time.Second)
	if err != nil {
		t.Fatalf("writer's sockets only: %v", err)
	}
	if len(res.Metrics) != 1 || res.Metrics[0].Name != "skipped" || !strings.Contains(strings.Join(res.Notes, " "), "none of the 7 on the other processes") {
		t.Errorf("skip result %+v", res)
	}
	for name, c := range map[string]struct {
		h      []int64
		commit int
	}{
		"a writer's socket missing": {func() []int64 { h := highest(1); h[4] = 0; return h }(), 0},
		"one other process served":  {highest(1, 2), 0},
		"a later commit":            {highest(1), 3},
	} {
		if _, err := realtimeTimeout(Result{}, ids, 1, c.h, seq, c.commit, time.Second); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestClusterChecks evaluates the targets from summaries.
func TestClusterChecks(t *testing.T) {
	sum := func(params map[string]any, kv ...any) Summary {
		params["bin"] = "x"
		s := Summary{Workload: "cluster", Store: "postgres", Mode: "http", Params: params}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Metrics = append(s.Metrics, SummaryMetric{Name: kv[i].(string), Median: kv[i+1].(float64)})
		}
		return s
	}
	ss := []Summary{
		sum(map[string]any{"case": "forward", "route": "forwarded"}, "CPU/round ÷ local", 1.2, "p50 − local p50", 1.5),
		sum(map[string]any{"case": "spread", "deploy": "single"}, "commits/s", 1000.0),
		sum(map[string]any{"case": "spread", "deploy": "cluster"}, "commits/s", 1100.0),
		sum(map[string]any{"case": "hot", "deploy": "single"}, "commits/s", 1000.0),
		sum(map[string]any{"case": "hot", "deploy": "cluster"}, "commits/s", 900.0, "row-lock waiters (mean)", 0.0),
		sum(map[string]any{"case": "hot", "deploy": "plain"}, "commits/s", 500.0, "row-lock waiters (mean)", 3.0),
	}
	got := map[string]bool{}
	for _, c := range clusterChecks(ss) {
		got[c.Target] = c.Pass
	}
	want := map[string]bool{
		"cluster: forwarded request ≤ 1.3× the CPU of a local one":                         true,
		"cluster: forwarded request ≤ +1 ms p50 over a local one on loopback":              false,
		"cluster (spread): the cluster is not slower than 1 process on one machine":        true,
		"cluster (hot): the cluster is not slower than 1 process on one machine":           false,
		"cluster (hot partition): row-lock waits ~0 (mean waiters ≤ 0.05) in cluster mode": true,
	}
	if len(got) != len(want) {
		t.Fatalf("checks %v, want %v", got, want)
	}
	for k, v := range want {
		if p, ok := got[k]; !ok || p != v {
			t.Errorf("%q: pass %v (present %v), want %v", k, p, ok, v)
		}
	}
}

// TestClusterQuick runs the cluster workload small against real
// processes (synclane built from this module, etcd, PostgreSQL) and
// checks that every case measured something without errors.
func TestClusterQuick(t *testing.T) {
	if os.Getenv("SYNCLANE_TEST_POSTGRES") == "" {
		if os.Getenv("SYNCLANE_REQUIRE_POSTGRES") == "1" {
			t.Fatal("SYNCLANE_REQUIRE_POSTGRES=1 but SYNCLANE_TEST_POSTGRES is unset")
		}
		t.Skip("PostgreSQL not configured: set SYNCLANE_TEST_POSTGRES to a pgx URL of a database the tests may create schemas in (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable); SYNCLANE_REQUIRE_POSTGRES=1 makes this a failure")
	}
	etcd := os.Getenv("SYNCLANE_ETCD_BIN")
	if etcd == "" {
		etcd = "/usr/bin/etcd"
	}
	if _, err := os.Stat(etcd); err != nil {
		if os.Getenv("SYNCLANE_REQUIRE_ETCD") == "1" {
			t.Fatalf("no etcd at %s but SYNCLANE_REQUIRE_ETCD=1", etcd)
		}
		t.Skipf("no etcd at %s: set SYNCLANE_ETCD_BIN to an etcd binary, or apt-get install etcd-server; SYNCLANE_REQUIRE_ETCD=1 makes this a failure", etcd)
	}
	args := []string{"cluster", "--quick", "--json", "--quiet", "--data-dir", t.TempDir(), "--etcd-bin", etcd,
		"--duration", "1s", "--warmup", "200ms", "--fanout-sockets", "12", "--fanout-commits", "5", "--timeout", "8m"}
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	if code := run(ctx, args, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, errb.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out.String())
	}
	seen := map[string]int{}
	for _, s := range rep.Summaries {
		c, _ := s.Params["case"].(string)
		seen[c]++
		var positive []string
		switch c {
		case "forward", "forward-concurrent":
			positive = []string{"rounds", "p50", "members CPU/round"}
			if s.Params["route"] == "forwarded" {
				positive = append(positive, "A's sync calls forwarded so far", "CPU/round ÷ local")
			}
		case "spread", "hot":
			positive = []string{"commits", "commits/s", "lock samples"}
		case "realtime":
			if s.Metric("skipped") == nil {
				positive = []string{"deltas", "all sockets p50"}
			}
		}
		for _, name := range positive {
			if m := s.Metric(name); m == nil || !(m.Median > 0) {
				t.Errorf("%s: %s = %v, want > 0 (notes %v)", s.Case, name, m, s.Notes)
			}
		}
		if m := s.Metric("errors"); m != nil && m.Max != 0 {
			t.Errorf("%s: %v errors; notes %v", s.Case, m.Max, s.Notes)
		}
	}
	want := map[string]int{"forward": 2, "forward-concurrent": 2, "spread": 3, "hot": 3, "realtime": 3}
	for c, n := range want {
		if seen[c] != n {
			t.Errorf("%s: %d summaries, want %d", c, seen[c], n)
		}
	}
}
