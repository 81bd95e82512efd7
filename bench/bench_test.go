package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestQuickSuite runs every workload with tiny sizes in-process and over
// loopback HTTP, and checks only that each completes with sane non-zero
// counts. No timing is asserted: the timeouts only catch a hang (on a
// machine loaded by other test binaries the suite takes minutes; it
// overran a 90 s bound at load average 28).
func TestQuickSuite(t *testing.T) {
	stores := "sqlite,memory"
	if os.Getenv("SYNCLANE_TEST_POSTGRES") != "" {
		stores += ",postgres"
	}
	args := []string{"all", "--quick", "--inproc", "--http", "--json", "--quiet", "--store", stores,
		"--data-dir", t.TempDir(), "--duration", "300ms", "--warmup", "50ms", "--writers", "4",
		"--partitions", "1,3", "--clients", "5", "--rows", "1500", "--page-rows", "500", "--pages", "2",
		"--idle-partitions", "20", "--idle-timeout", "2s", "--vus", "8", "--timeout", "8m"}
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
		seen[s.Workload]++
		positive := map[string][]string{
			"push":       {"commits", "commits/s"},
			"partitions": {"commits/s", "pulls/s"},
			"pull":       {"pulls/s", "commits/s", "deliveries"},
			"bootstrap":  {"rows/s", "requests"},
			"idle":       {"wake time"},
			"pushpull":   {"rounds/s", "rounds"},
			"realtime":   {"delta p99", "floor p99"},
			"prune":      {"pruned commits", "pushes/s without pruning", "batches"},
			"storm":      {"bootstraps/s", "bootstraps"},
			"reconnect":  {"reconnects/s", "reconnects"},
		}[s.Workload]
		if s.Workload == "realtime" && strings.Contains(s.Case, "idle") {
			positive = []string{"sockets open", "heap+stacks/idle socket"}
		}
		for _, name := range positive {
			m := s.Metric(name)
			if m == nil || !(m.Median > 0) {
				t.Errorf("%s / %s [%s %s]: %s = %v, want > 0", s.Workload, s.Case, s.Store, s.Mode, name, m)
			}
		}
		if m := s.Metric("errors"); m != nil && m.Max != 0 {
			t.Errorf("%s / %s [%s %s]: %v errors; notes %v", s.Workload, s.Case, s.Store, s.Mode, m.Max, s.Notes)
		}
	}
	nStores := len(splitList(stores))
	// push: group commit and baseline per mode and store, plus the bare
	// SQLite ceiling and synclane's log statements on bare SQLite once
	// each (in-process SQLite); pushpull and prune: per mode and store.
	want := map[string]int{"push": 2*2*nStores + 2, "partitions": 2 * 2 * nStores, "pull": 2 * nStores,
		"bootstrap": 2 * nStores, "idle": nStores, "pushpull": 2 * nStores, "prune": 2 * nStores,
		"storm": 2 * nStores, "reconnect": 2 * nStores}
	for w, n := range want {
		if seen[w] != n {
			t.Errorf("%s: %d summaries, want %d", w, seen[w], n)
		}
	}
	if rep.Machine.CPUs < 1 || rep.Machine.GoVersion == "" {
		t.Errorf("machine not reported: %+v", rep.Machine)
	}
}

// TestHist checks the histogram's quantiles against exact ranks.
func TestHist(t *testing.T) {
	var h Hist
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5000 * time.Microsecond}, {0.99, 9900 * time.Microsecond}, {1, 10000 * time.Microsecond}} {
		got := h.Quantile(c.q)
		if got < c.want || float64(got) > float64(c.want)*1.01 {
			t.Errorf("q%.2f = %v, want %v (+1%%)", c.q, got, c.want)
		}
	}
	var small Hist
	small.Record(3)
	small.Merge(&h)
	if small.Count() != 10001 || small.Quantile(0.00001) != 3 {
		t.Errorf("merge: count %d, min %v", small.Count(), small.Quantile(0.00001))
	}
}

// TestSummarizeMedian checks the median and spread over runs.
func TestSummarizeMedian(t *testing.T) {
	var rs []Result
	for _, v := range []float64{5, 1, 3, 4, 2} {
		r := Result{Workload: "push", Case: "c"}
		r.add("commits/s", "1/s", v)
		rs = append(rs, r)
	}
	s := summarize(rs)
	if len(s) != 1 || s[0].Runs != 5 {
		t.Fatalf("summaries %+v", s)
	}
	m := s[0].Metric("commits/s")
	if m.Median != 3 || m.Min != 1 || m.Max != 5 {
		t.Errorf("median %v min %v max %v", m.Median, m.Min, m.Max)
	}
}

// TestBootstrapRateCheckRowsLanesOnly checks that the ≥ 500,000 rows/s
// target is judged per rows lane and not against a SQLite image bootstrap.
func TestBootstrapRateCheckRowsLanesOnly(t *testing.T) {
	var rs []Result
	for lane, rps := range map[string]float64{"inline": 600000, "ref": 400000, "sqlite": 150000} {
		r := Result{Workload: "bootstrap", Case: "100000 rows, " + lane, Store: "sqlite", Mode: "http",
			Params: map[string]any{"rows": 100000, "lane": lane}}
		r.add("rows/s", "1/s", rps)
		rs = append(rs, r)
	}
	got := map[string]bool{}
	for _, c := range checkTargets(summarize(rs)) {
		if strings.HasPrefix(c.Target, "bootstrap 100,000 rows") {
			got[c.Target] = c.Pass
		}
	}
	want := map[string]bool{
		"bootstrap 100,000 rows over loopback HTTP (inline rows) ≥ 500,000 rows/s": true,
		"bootstrap 100,000 rows over loopback HTTP (ref rows) ≥ 500,000 rows/s":    false,
	}
	if len(got) != len(want) {
		t.Fatalf("bootstrap checks %v, want %v", got, want)
	}
	for k, v := range want {
		if p, ok := got[k]; !ok || p != v {
			t.Errorf("check %q: pass %v (present %v), want %v", k, p, ok, v)
		}
	}
}

// TestParseServerBins checks --server-bin: labels default to the file
// name; an empty label or path is refused.
func TestParseServerBins(t *testing.T) {
	got, err := parseServerBins("before=/tmp/a/bench, /tmp/b/bench-after")
	if err != nil {
		t.Fatal(err)
	}
	want := []serverBin{{"before", "/tmp/a/bench"}, {"bench-after", "/tmp/b/bench-after"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"=/tmp/x", "label="} {
		if _, err := parseServerBins(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestRealtimeWakeCases runs the wake-up cases small: idle sockets on
// other lists get no wake-up, those on the written lists get them, and the
// honest requests are timed in every case.
func TestRealtimeWakeCases(t *testing.T) {
	args := []string{"realtime", "--json", "--quiet", "--store", "sqlite", "--data-dir", t.TempDir(),
		"--wake-sockets", "20", "--wake-commits", "40", "--timeout", "2m"}
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, errb.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out.String())
	}
	if len(rep.Summaries) != 3 {
		t.Fatalf("%d summaries, want 3", len(rep.Summaries))
	}
	for i, s := range rep.Summaries {
		wakes, p99 := s.Metric("wake-ups sent"), s.Metric("push+pull p99")
		if wakes == nil || p99 == nil || !(p99.Median > 0) {
			t.Fatalf("%s: wake-ups %v, p99 %v", s.Case, wakes, p99)
		}
		if want := i == 2; (wakes.Median > 0) != want {
			t.Errorf("%s: %v wake-ups sent", s.Case, wakes.Median)
		}
	}
}
