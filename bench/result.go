package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"text/tabwriter"
)

// Metric is one measured figure of a run.
type Metric struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
}

// Result is the outcome of one run of one case.
type Result struct {
	Workload string         `json:"workload"`
	Case     string         `json:"case"`
	Store    string         `json:"store"`
	Mode     string         `json:"mode"`
	Params   map[string]any `json:"params,omitempty"`
	Metrics  []Metric       `json:"metrics"`
	Notes    []string       `json:"notes,omitempty"`
}

func (r *Result) add(name, unit string, v float64) {
	r.Metrics = append(r.Metrics, Metric{Name: name, Unit: unit, Value: v})
}

// Summary is a case aggregated over its runs: the median of each metric
// and its spread (min, max).
type Summary struct {
	Workload string          `json:"workload"`
	Case     string          `json:"case"`
	Store    string          `json:"store"`
	Mode     string          `json:"mode"`
	Params   map[string]any  `json:"params,omitempty"`
	Runs     int             `json:"runs"`
	Metrics  []SummaryMetric `json:"metrics"`
	Notes    []string        `json:"notes,omitempty"`
}

// SummaryMetric is one metric over several runs.
type SummaryMetric struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"`
}

// summarize groups results by (workload, case) in first-seen order.
func summarize(rs []Result) []Summary {
	var out []Summary
	idx := map[string]int{}
	for _, r := range rs {
		key := r.Workload + "\x00" + r.Case + "\x00" + r.Store + "\x00" + r.Mode
		i, ok := idx[key]
		if !ok {
			i = len(out)
			idx[key] = i
			out = append(out, Summary{Workload: r.Workload, Case: r.Case, Store: r.Store, Mode: r.Mode, Params: r.Params})
		}
		s := &out[i]
		s.Runs++
		for _, n := range r.Notes {
			if !contains(s.Notes, n) {
				s.Notes = append(s.Notes, n)
			}
		}
		for _, m := range r.Metrics {
			j := -1
			for k := range s.Metrics {
				if s.Metrics[k].Name == m.Name {
					j = k
				}
			}
			if j < 0 {
				s.Metrics = append(s.Metrics, SummaryMetric{Name: m.Name, Unit: m.Unit})
				j = len(s.Metrics) - 1
			}
			s.Metrics[j].Values = append(s.Metrics[j].Values, m.Value)
		}
	}
	for i := range out {
		for j := range out[i].Metrics {
			m := &out[i].Metrics[j]
			v := append([]float64(nil), m.Values...)
			sort.Float64s(v)
			m.Min, m.Max = v[0], v[len(v)-1]
			if len(v)%2 == 1 {
				m.Median = v[len(v)/2]
			} else {
				m.Median = (v[len(v)/2-1] + v[len(v)/2]) / 2
			}
		}
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Metric returns the named metric of s (nil if absent).
func (s *Summary) Metric(name string) *SummaryMetric {
	for i := range s.Metrics {
		if s.Metrics[i].Name == name {
			return &s.Metrics[i]
		}
	}
	return nil
}

// Report is the whole JSON output of one harness invocation.
type Report struct {
	Machine   Machine   `json:"machine"`
	Command   string    `json:"command"`
	Summaries []Summary `json:"summaries"`
	Checks    []Check   `json:"checks,omitempty"`
	Results   []Result  `json:"results"`
}

func writeJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func fmtVal(v float64, unit string) string {
	switch {
	case unit == "ms" || unit == "µs":
		if v >= 100 {
			return fmt.Sprintf("%.0f", v)
		}
		if v >= 10 {
			return fmt.Sprintf("%.1f", v)
		}
		return fmt.Sprintf("%.2f", v)
	case math.Abs(v) >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// writeText prints each summary as a block of metric lines: median and,
// with several runs, the spread.
func writeText(w io.Writer, rep *Report) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, s := range rep.Summaries {
		fmt.Fprintf(tw, "\n%s — %s  [store=%s mode=%s runs=%d]\n", s.Workload, s.Case, s.Store, s.Mode, s.Runs)
		for _, m := range s.Metrics {
			spread := ""
			if s.Runs > 1 {
				spread = fmt.Sprintf("(%s … %s)", fmtVal(m.Min, m.Unit), fmtVal(m.Max, m.Unit))
			}
			fmt.Fprintf(tw, "  %s\t%s %s\t%s\n", m.Name, fmtVal(m.Median, m.Unit), m.Unit, spread)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(tw, "  note: %s\n", n)
		}
		_ = tw.Flush()
	}
	if len(rep.Checks) > 0 {
		fmt.Fprintln(w, "\ntargets:")
		for _, c := range rep.Checks {
			fmt.Fprintf(w, "  [%s] %s: %s\n", c.status(), c.Target, c.Detail)
		}
	}
	_ = tw.Flush()
}
