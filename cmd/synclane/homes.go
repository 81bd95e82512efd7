package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/homes"
)

// Several PostgreSQL databases (issue 46): --postgres-databases adds
// homes next to the --postgres database, which is home "main" and holds
// the directory (storage/postgres/homes; docs/cluster.md "Past one
// PostgreSQL").

// namedURL is one NAME=URL of --postgres-databases.
type namedURL struct{ name, url string }

// homesFlag is --postgres-databases NAME=URL[,NAME=URL...] (repeatable;
// the environment variable takes the comma-separated form).
type homesFlag struct{ list []namedURL }

// String lists the names only: URLs may carry passwords.
func (f *homesFlag) String() string {
	names := make([]string, len(f.list))
	for i, h := range f.list {
		names[i] = h.name
	}
	return strings.Join(names, ",")
}

// entryStart matches the start of one NAME=URL: a comma followed by it
// separates two entries, any other comma belongs to the URL (a
// multi-host URL lists hosts with commas).
var entryStart = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}=postgres(ql)?://`)

// Set adds the NAME=URL entries of v.
func (f *homesFlag) Set(v string) error {
	var parts []string
	for _, seg := range strings.Split(v, ",") {
		if len(parts) == 0 || entryStart.MatchString(strings.TrimSpace(seg)) {
			parts = append(parts, strings.TrimSpace(seg))
			continue
		}
		parts[len(parts)-1] += "," + seg
	}
	for _, p := range parts {
		if p == "" {
			continue
		}
		name, u, ok := strings.Cut(p, "=")
		if !ok || !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
			return fmt.Errorf("%q: want NAME=postgres://...", redactURL(p))
		}
		if err := homes.CheckName(name); err != nil {
			return err
		}
		if name == homes.Main {
			return fmt.Errorf("home %q is the --postgres database: name the others differently", homes.Main)
		}
		for _, h := range f.list {
			if h.name == name {
				return fmt.Errorf("home %q is named twice", name)
			}
		}
		f.list = append(f.list, namedURL{name: name, url: u})
	}
	if 1+len(f.list) > homes.MaxHomes {
		return fmt.Errorf("%d homes: at most %d with the --postgres database", 1+len(f.list), homes.MaxHomes)
	}
	return nil
}

// redactURL drops what follows "://" up to an "@" (user and password).
func redactURL(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		if j := strings.Index(s[i+3:], "@"); j >= 0 {
			return s[:i+3] + "***@" + s[i+3+j+1:]
		}
	}
	return s
}

// validateHomes checks --postgres-databases against the other flags.
func (c *serveConfig) validateHomes() error {
	if len(c.homes.list) > 0 && c.postgresURL == "" {
		return errors.New("--postgres-databases needs --postgres: that database is home \"main\" and holds the directory of partitions")
	}
	return nil
}

// openHomes opens every home of --postgres-databases with opts (each its
// own pool of --pg-max-conns connections) and the router over them and
// main; on failure it closes what it opened (main too).
func openHomes(ctx context.Context, c serveConfig, main *postgres.Store, opts postgres.Options, log *zap.Logger) (*homes.Homes, error) {
	var others []homes.Home
	fail := func(err error) (*homes.Homes, error) {
		for _, o := range others {
			_ = o.Store.Close()
		}
		_ = main.Close()
		return nil, err
	}
	for _, hu := range c.homes.list {
		st, err := postgres.Open(ctx, hu.url, opts)
		if err != nil {
			return fail(fmt.Errorf("home %q: %w", hu.name, err))
		}
		others = append(others, homes.Home{Name: hu.name, Store: st})
	}
	h, err := homes.Open(main, others, homes.Options{Logger: log.Named("homes")})
	if err != nil {
		return fail(err)
	}
	log.Info("partitions spread over several PostgreSQL databases", zap.Strings("homes", h.Names()))
	return h, nil
}

// homesCollector reports every home's counters and partition count.
type homesCollector struct {
	h *homes.Homes

	mu     sync.Mutex
	at     time.Time
	counts []homes.HomeCount
}

var (
	homePartitionsDesc = prometheus.NewDesc("synclane_postgres_home_partitions",
		"Partitions the directory places in each PostgreSQL database (home), read at most every 30s.", []string{"home"}, nil)
	homeCallsDesc = prometheus.NewDesc("synclane_postgres_home_calls_total",
		"Storage calls this process routed to each home.", []string{"home"}, nil)
	homeUnreachableDesc = prometheus.NewDesc("synclane_postgres_home_unreachable_total",
		"Storage calls of each home that failed because its database could not be reached (answered 503).", []string{"home"}, nil)
	homeMoveRefusedDesc = prometheus.NewDesc("synclane_postgres_home_move_refused_total",
		"Writes each home refused because the partition was moving between databases (answered 503 partition_moving; the retry routes anew).", []string{"home"}, nil)
	homeMovesInDesc = prometheus.NewDesc("synclane_postgres_home_moves_in_total",
		"Partition moves into each home this process made (synclane partitions move, the admin API).", []string{"home"}, nil)
	homeConnsDesc = prometheus.NewDesc("synclane_postgres_home_pool_connections",
		"Connections of each home's pool in this process, by state (acquired: in use; open: all).", []string{"home", "state"}, nil)
)

// Describe implements prometheus.Collector.
func (c *homesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{homePartitionsDesc, homeCallsDesc, homeUnreachableDesc, homeMoveRefusedDesc, homeMovesInDesc, homeConnsDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. The partition counts are read
// from the directory at most every 30s (a count over it); when that read
// fails the last counts are reported.
func (c *homesCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.h.Stats() {
		ch <- prometheus.MustNewConstMetric(homeCallsDesc, prometheus.CounterValue, float64(s.Calls), s.Home)
		ch <- prometheus.MustNewConstMetric(homeUnreachableDesc, prometheus.CounterValue, float64(s.Unreachable), s.Home)
		ch <- prometheus.MustNewConstMetric(homeMoveRefusedDesc, prometheus.CounterValue, float64(s.MoveRefused), s.Home)
		ch <- prometheus.MustNewConstMetric(homeMovesInDesc, prometheus.CounterValue, float64(s.MovesIn), s.Home)
		ch <- prometheus.MustNewConstMetric(homeConnsDesc, prometheus.GaugeValue, float64(s.AcquiredConns), s.Home, "acquired")
		ch <- prometheus.MustNewConstMetric(homeConnsDesc, prometheus.GaugeValue, float64(s.TotalConns), s.Home, "open")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > 30*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		counts, err := c.h.Counts(ctx)
		cancel()
		if err == nil {
			c.counts, c.at = counts, time.Now()
		}
	}
	for _, hc := range c.counts {
		ch <- prometheus.MustNewConstMetric(homePartitionsDesc, prometheus.GaugeValue, float64(hc.Partitions), hc.Home)
	}
}
