// Package promtext reads the Prometheus text exposition for tests: the
// samples of a scrape keyed independently of label order and number
// formatting, and a collector rendered the way GET /metrics renders it.
package promtext

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families parses a text exposition into its metric families by name.
func Families(text []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(text))
}

// Samples parses a text exposition into its samples, keyed by Key: the
// name (a histogram's as name_bucket, name_sum and name_count, a summary's
// quantiles under its own name) and the labels sorted by name. A sample
// that appears twice is an error.
func Samples(text []byte) (map[string]float64, error) {
	fams, err := Families(text)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	add := func(name string, labels map[string]string, v float64) error {
		k := key(name, labels)
		if _, dup := out[k]; dup {
			return fmt.Errorf("duplicate sample %s", k)
		}
		out[k] = v
		return nil
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			var err error
			switch {
			case m.Histogram != nil:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					err = add(name+"_bucket", with(labels, "le", formatFloat(b.GetUpperBound())), float64(b.GetCumulativeCount()))
					if err != nil {
						return nil, err
					}
				}
				if bs := h.GetBucket(); len(bs) == 0 || !math.IsInf(bs[len(bs)-1].GetUpperBound(), 1) {
					if err = add(name+"_bucket", with(labels, "le", "+Inf"), float64(h.GetSampleCount())); err != nil {
						return nil, err
					}
				}
				if err = add(name+"_sum", labels, h.GetSampleSum()); err == nil {
					err = add(name+"_count", labels, float64(h.GetSampleCount()))
				}
			case m.Summary != nil:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					if err = add(name, with(labels, "quantile", formatFloat(q.GetQuantile())), q.GetValue()); err != nil {
						return nil, err
					}
				}
				if err = add(name+"_sum", labels, s.GetSampleSum()); err == nil {
					err = add(name+"_count", labels, float64(s.GetSampleCount()))
				}
			case m.Counter != nil:
				err = add(name, labels, m.GetCounter().GetValue())
			case m.Gauge != nil:
				err = add(name, labels, m.GetGauge().GetValue())
			default:
				err = add(name, labels, m.GetUntyped().GetValue())
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Key returns the key Samples gives the sample written name{labels} (in
// the text format, labels in any order).
func Key(sample string) string {
	name, labels, err := parseSample(sample + " 0")
	if err != nil {
		return sample
	}
	return key(name, labels)
}

// Has reports whether text holds the sample of line, written in the text
// format ("name{a=\"x\"} 1"): the same name, the same label set in any
// order, and an equal value however it is formatted.
func Has(text []byte, line string) bool {
	name, labels, err := parseSample(line)
	if err != nil {
		return false
	}
	fields := strings.Fields(line)
	want, err := strconv.ParseFloat(fields[len(fields)-1], 64)
	if err != nil {
		return false
	}
	s, err := Samples(text)
	if err != nil {
		return false
	}
	got, ok := s[key(name, labels)]
	return ok && (got == want || math.IsNaN(got) && math.IsNaN(want))
}

// Collect renders c alone in the text format, as a registry holding only
// c would serve it.
func Collect(c prometheus.Collector) ([]byte, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// parseSample parses one sample line through the text parser.
func parseSample(line string) (string, map[string]string, error) {
	fams, err := Families([]byte(line + "\n"))
	if err != nil {
		return "", nil, err
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			return name, labels, nil
		}
	}
	return "", nil, fmt.Errorf("no sample in %q", line)
}

func with(labels map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(labels)+1)
	for a, b := range labels {
		out[a] = b
	}
	out[k] = v
	return out
}

func key(name string, labels map[string]string) string {
	if len(labels) == 0 {
		return name
	}
	names := make([]string, 0, len(labels))
	for k := range labels {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + "=" + strconv.Quote(labels[k])
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
