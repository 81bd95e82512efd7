package main

import (
	"fmt"
	"strings"
)

// Check is one issue target evaluated against the summaries of a report.
type Check struct {
	Target string `json:"target"`
	Pass   bool   `json:"pass"`
	Detail string `json:"detail"`
}

func (c Check) status() string {
	if c.Pass {
		return "PASS"
	}
	return "MISS"
}

// checkTargets evaluates the targets of the benchmark issue (SQLite, 2-core
// machine) whose cases the report holds. Figures are medians.
func checkTargets(ss []Summary) []Check {
	var out []Check
	find := func(workload, mode, store string, match func(*Summary) bool) *Summary {
		for i := range ss {
			s := &ss[i]
			if s.Workload == workload && s.Mode == mode && s.Store == store && match(s) {
				return s
			}
		}
		return nil
	}
	med := func(s *Summary, m string) float64 {
		if x := s.Metric(m); x != nil {
			return x.Median
		}
		return 0
	}
	isGC := func(s *Summary) bool { return !strings.Contains(s.Case, "baseline") }
	isBase := func(s *Summary) bool { return strings.Contains(s.Case, "baseline") }
	isGC = func(s *Summary) bool {
		return !strings.Contains(s.Case, "baseline") && !strings.Contains(s.Case, "ceiling")
	}
	if gc := find("push", "inproc", "sqlite", isGC); gc != nil {
		cps, p99 := med(gc, "commits/s"), med(gc, "p99")
		out = append(out, Check{"push in-process p99 < 20 ms", p99 < 20, fmt.Sprintf("p99 %.2f ms", p99)})
		layout := func(name string) func(*Summary) bool {
			return func(s *Summary) bool { return s.Params["layout"] == name }
		}
		if c := find("push", "bare", "sqlite", layout(layoutCeiling)); c != nil && med(c, "commits/s") > 0 {
			f := cps / med(c, "commits/s")
			out = append(out, Check{"push in-process ≥ 0.5 × the bare SQLite ceiling (same run)", f >= 0.5,
				fmt.Sprintf("%.2f × (%.0f vs %.0f commits/s)", f, cps, med(c, "commits/s"))})
		}
		// The engine's own overhead: at least half the rate of its log's
		// statements run bare (bench/RESULTS.md, "What a log layout costs").
		if c := find("push", "bare", "sqlite", layout(layoutSynclane)); c != nil && med(c, "commits/s") > 0 {
			f := cps / med(c, "commits/s")
			out = append(out, Check{"push in-process ≥ 0.5 × its log's statements on bare SQLite (same run)", f >= 0.5,
				fmt.Sprintf("%.2f × (%.0f vs %.0f commits/s)", f, cps, med(c, "commits/s"))})
		}
		if b := find("push", "inproc", "sqlite", isBase); b != nil && med(b, "commits/s") > 0 {
			ratio := cps / med(b, "commits/s")
			out = append(out, Check{"push in-process ≥ 5× no-group-commit baseline", ratio >= 5,
				fmt.Sprintf("%.1f× (%.0f vs %.0f commits/s)", ratio, cps, med(b, "commits/s"))})
		}
	}
	if gc := find("push", "http", "sqlite", isGC); gc != nil {
		if in := find("push", "inproc", "sqlite", isGC); in != nil && med(in, "commits/s") > 0 {
			f := med(gc, "commits/s") / med(in, "commits/s")
			out = append(out, Check{"push over loopback HTTP ≥ 0.5 × in-process (same run)", f >= 0.5,
				fmt.Sprintf("%.2f × (%.0f vs %.0f commits/s)", f, med(gc, "commits/s"), med(in, "commits/s"))})
		}
	}
	for _, mode := range []string{"inproc", "http"} {
		one := find("partitions", mode, "sqlite", func(s *Summary) bool { return s.Params["partitions"] == 1 })
		k := find("partitions", mode, "sqlite", func(s *Summary) bool { return s.Params["partitions"] == 1000 })
		if one != nil && k != nil {
			a, b := med(one, "commits/s"), med(k, "commits/s")
			out = append(out, Check{"partitions (" + mode + "): 1,000 partitions aggregate ≥ 1 partition (same run)", b >= a,
				fmt.Sprintf("%.2f × (%.0f vs %.0f commits/s)", b/max(a, 1), b, a)})
		}
	}
	// The rows/s target is the rows lanes' (inline and by ref); a SQLite
	// image is built and copied whole, and has no rate target of its own.
	for _, lane := range []string{"inline", "ref"} {
		if b := find("bootstrap", "http", "sqlite", func(s *Summary) bool {
			return s.Params["rows"] == 100000 && s.Params["lane"] == lane
		}); b != nil {
			rps := med(b, "rows/s")
			out = append(out, Check{"bootstrap 100,000 rows over loopback HTTP (" + lane + " rows) ≥ 500,000 rows/s", rps >= 500000, fmt.Sprintf("%.0f rows/s", rps)})
		}
	}
	if s := find("idle", "inproc", "sqlite", func(*Summary) bool { return true }); s != nil {
		live, pass := med(s, "heap/live partition"), med(s, "heap/passivated partition")
		gl, gp := med(s, "goroutines/live partition"), med(s, "goroutines/passivated partition")
		out = append(out,
			Check{"idle: ≤ 2 KiB per live idle partition actor", live <= 2048, fmt.Sprintf("%.0f B", live)},
			Check{"idle: < 256 B per passivated partition", pass < 256, fmt.Sprintf("%.0f B", pass)},
			Check{"idle: no goroutine held by idle or passivated partitions", gl < 0.01 && gp < 0.01,
				fmt.Sprintf("%.3f per live, %.3f per passivated partition", gl, gp)})
	}
	for _, store := range []string{"sqlite", "postgres"} {
		if s := find("prune", "inproc", store, func(*Summary) bool { return true }); s != nil {
			ratio := med(s, "p99 during / without")
			out = append(out, Check{"prune (" + store + "): push p99 during pruning ≤ 1.5× without", ratio > 0 && ratio <= 1.5,
				fmt.Sprintf("%.2f× (%.1f vs %.1f ms, %.0f commits pruned at %.0f/s)", ratio, med(s, "p99 during pruning"), med(s, "p99 without pruning"),
					med(s, "pruned commits"), med(s, "pruned commits/s"))})
		}
	}
	return append(out, clusterChecks(ss)...)
}

// clusterChecks evaluates issue 29's targets on the cluster workload's
// summaries, per synclane binary (Params["bin"]).
func clusterChecks(ss []Summary) []Check {
	var out []Check
	var bins []string
	for _, s := range ss {
		if b, ok := s.Params["bin"].(string); ok && s.Workload == "cluster" && !contains(bins, b) {
			bins = append(bins, b)
		}
	}
	for _, bin := range bins {
		find := func(kv ...string) *Summary {
			for i := range ss {
				s := &ss[i]
				ok := s.Workload == "cluster" && s.Params["bin"] == bin
				for j := 0; ok && j+1 < len(kv); j += 2 {
					ok = s.Params[kv[j]] == kv[j+1]
				}
				if ok {
					return s
				}
			}
			return nil
		}
		med := func(s *Summary, m string) float64 {
			if x := s.Metric(m); x != nil {
				return x.Median
			}
			return 0
		}
		tag := ""
		if len(bins) > 1 {
			tag = " [" + bin + "]"
		}
		if f := find("case", "forward", "route", "forwarded"); f != nil && f.Metric("CPU/round ÷ local") != nil {
			r, d := med(f, "CPU/round ÷ local"), med(f, "p50 − local p50")
			out = append(out,
				Check{"cluster: forwarded request ≤ 1.3× the CPU of a local one" + tag, r <= 1.3, fmt.Sprintf("%.2f×", r)},
				Check{"cluster: forwarded request ≤ +1 ms p50 over a local one on loopback" + tag, d <= 1, fmt.Sprintf("%+.2f ms", d)})
		}
		for _, load := range []string{"spread", "hot"} {
			one, cl, plain := find("case", load, "deploy", "single"), find("case", load, "deploy", "cluster"), find("case", load, "deploy", "plain")
			if one != nil && cl != nil && med(one, "commits/s") > 0 {
				a, b := med(one, "commits/s"), med(cl, "commits/s")
				out = append(out, Check{"cluster (" + load + "): the cluster is not slower than 1 process on one machine" + tag, b >= a,
					fmt.Sprintf("%.2f × (%.0f vs %.0f commits/s)", b/a, b, a)})
			}
			if load == "hot" && cl != nil && plain != nil {
				c, p := med(cl, "row-lock waiters (mean)"), med(plain, "row-lock waiters (mean)")
				out = append(out, Check{"cluster (hot partition): row-lock waits ~0 (mean waiters ≤ 0.05) in cluster mode" + tag, c <= 0.05,
					fmt.Sprintf("mean row-lock waiters %.3f in cluster mode vs %.3f with plain processes", c, p)})
			}
		}
	}
	return out
}
