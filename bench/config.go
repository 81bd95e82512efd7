package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/synclane/synclane/engine/retention"
)

// Config is the harness configuration from the command line.
type Config struct {
	Workload string
	Args     []string // the command line after "go run ./bench"
	Modes    []Mode
	Mode     Mode // the mode of the case being run
	URL      string

	Stores      []string
	PostgresURL string
	PGMaxConns  int
	DataDir     string

	JSON, Quick, Quiet, Baseline bool
	Runs                         int
	Duration, Warmup, Timeout    time.Duration
	MaxOps                       int64

	Writers    int
	Partitions []int
	PullEvery  int

	Clients      int
	PullWriters  int
	Rate         int
	PullInterval time.Duration

	// Tracing is the engine's tracing in-process and over --http (see
	// tracing.go): off, or drop (a real SDK provider whose exporter drops
	// every span).
	Tracing string

	Rows     []int
	PageRows int
	Pages    int
	// Lane is the bootstrap lane: inline, ref (rows by SEGMENT_REF) or
	// sqlite (a SQLite image by reference).
	Lane string
	// ServerProc runs the bootstrap's server in a child process (this
	// binary, "server-child"), so its heap is probed apart from the
	// clients'. Storm is the number of concurrent clients of the storm
	// phase (0: no storm).
	ServerProc bool
	Storm      int
	// FreshClients makes every bootstrap of storm and reconnect a new
	// client (a new clientId, its epoch acquired by an epoch-less request
	// first), as the reference harness's storm does; otherwise each of
	// the --vus clients bootstraps again under its own clientId.
	FreshClients bool
	// SkipSegments makes the storm's and reconnect's clients take a
	// SEGMENT_REF without downloading it (a client whose segment cache
	// holds it), so the server's CPU is the sync requests' alone.
	SkipSegments bool
	// ServerGOGC, when > 0, is the server child's GOGC: a low value makes
	// its collector run often enough that the sampled heap follows the
	// live heap (with the default a bootstrap may finish between two
	// collections, so neither reading isolates what the response holds).
	ServerGOGC int

	IdlePartitions int
	IdleTimeout    time.Duration

	VUs       int
	ServerPID int
	// ServerBins are the bench binaries whose server child the storm and
	// reconnect workloads run against over --http (--server-bin), each
	// in turn in every run: one built from another commit measures it
	// against this one in the same run. Empty: this binary.
	ServerBins []serverBin
	// ScopeWriterRate is the commits per second a writer makes into the
	// scope the reconnect and storm clients bootstrap, while they do (0:
	// none).
	ScopeWriterRate float64

	Sockets, FanoutSockets, FanoutCommits int
	// HolderSockets is the most idle sockets one holder process opens
	// (each on its own 127.0.0.x source address).
	HolderSockets int
	FanoutAck     bool
	// WakeSockets > 0 runs the realtime wake-up cases (realtimewake.go)
	// instead of the others, with WakeCommits push+pull requests each.
	WakeSockets, WakeCommits int

	// The cluster workload (cluster.go): the synclane binaries measured
	// (--synclane-bin; empty: built from this module), its cases, client
	// load, member count, the etcd binary, and a --debug-listen (pprof)
	// on each member (ports 6060+i).
	SynclaneBins                                      []serverBin
	ClusterCases                                      []string
	ClusterClients, ClusterPartitions, ClusterMembers int
	ForwardClients                                    int
	ClusterDeploys                                    []string
	EtcdBin                                           string
	ClusterDebug                                      bool
	// ClusterBrowser: the cluster workload's push+pull clients send a
	// browser's Accept-Encoding (and decompress what they get).
	ClusterBrowser bool

	// The soak workload (soak.go): its client groups, the server's
	// --retention-interval, and a directory for the servers' CPU profiles.
	SoakWriters, SoakReaders, SoakSubscribers, SoakChurners int
	SoakMaintenance                                         time.Duration
	SoakProfile                                             string

	PruneCommits int
	PruneBatch   int
	PruneWindow  time.Duration

	CPUProfile, MemProfile string

	// Set holds the flags given on the command line (workload defaults
	// apply to the others).
	Set map[string]bool
}

var errUsage = errors.New("usage")

const usage = `usage: go run ./bench <push|partitions|pull|bootstrap|idle|pushpull|realtime|prune|storm|reconnect|bigpush|all|cluster|hostile|soak|floor> [flags]

Modes (several may be combined; default --inproc):
  --inproc          drive engine.Engine.Sync in this process
  --http            serve the engine on a 127.0.0.1 listener and drive it over HTTP
  --url URL         drive an external SSP2 server (wire v3, x-actor/x-partition auth, demo todos schema)

Flags:
`

func parseConfig(args []string, stderr io.Writer) (*Config, error) {
	cfg := &Config{Args: args}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(stderr, usage)
		return nil, errUsage
	}
	cfg.Workload = args[0]
	known := cfg.Workload == "all"
	for _, w := range workloads {
		known = known || w.name == cfg.Workload
	}
	if !known {
		return nil, fmt.Errorf("unknown workload %q", cfg.Workload)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	var inproc, http bool
	var stores, parts, rows string
	fs.BoolVar(&inproc, "inproc", false, "drive the engine in-process (default mode)")
	fs.BoolVar(&http, "http", false, "drive the engine over HTTP on a loopback listener started by the harness")
	fs.StringVar(&cfg.URL, "url", "", "drive the SSP2 server at this base or /sync URL")
	fs.StringVar(&stores, "store", "sqlite", "storage backends, comma-separated: sqlite, postgres, memory")
	fs.StringVar(&cfg.PostgresURL, "postgres", os.Getenv("SYNCLANE_TEST_POSTGRES"), "PostgreSQL URL for --store postgres (default $SYNCLANE_TEST_POSTGRES)")
	fs.IntVar(&cfg.PGMaxConns, "pg-max-conns", 16, "PostgreSQL pool size")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "parent directory of the temporary SQLite databases (default: the system temp dir)")
	fs.BoolVar(&cfg.JSON, "json", false, "print the report as JSON")
	fs.BoolVar(&cfg.Quick, "quick", false, "small sizes and short runs (the CI smoke test)")
	fs.BoolVar(&cfg.Quiet, "quiet", false, "no progress lines on stderr")
	fs.BoolVar(&cfg.Baseline, "baseline", true, "also run the push cases with group commit disabled")
	fs.IntVar(&cfg.Runs, "runs", 1, "repeat every case this many times and report medians")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured time of each load case")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "unmeasured warm-up before each load case")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Hour, "abort the whole invocation after this long")
	fs.Int64Var(&cfg.MaxOps, "max-ops", 5_000_000, "stop a load case after this many operations")
	fs.IntVar(&cfg.Writers, "writers", 64, "push/partitions: concurrent writers; bigpush: concurrent 20 MB pushes")
	fs.StringVar(&parts, "partitions", "1,10,100,1000", "partitions: partition counts to compare")
	fs.IntVar(&cfg.PullEvery, "pull-every", 4, "partitions: every Nth operation of a writer is an incremental pull")
	fs.IntVar(&cfg.Clients, "clients", 1000, "pull: clients pulling incrementally")
	fs.IntVar(&cfg.PullWriters, "pull-writers", 4, "pull: writers pushing meanwhile")
	fs.IntVar(&cfg.Rate, "rate", 500, "pull: total push rate in commits/s")
	fs.DurationVar(&cfg.PullInterval, "pull-interval", time.Second, "pull: pause between a client's pulls")
	fs.StringVar(&rows, "rows", "10000,100000", "bootstrap: row counts")
	fs.IntVar(&cfg.PageRows, "page-rows", 10000, "bootstrap: limitSnapshotRows per page")
	fs.IntVar(&cfg.Pages, "pages", 10, "bootstrap: maxSnapshotPages per request")
	fs.StringVar(&cfg.Tracing, "tracing", "off", "engine tracing (in-process and --http targets): off, or drop (an OpenTelemetry SDK provider, every span sampled, batched to an exporter that drops them)")
	fs.StringVar(&cfg.Lane, "lane", "inline", "bootstrap: inline (accept bit 0), ref (rows by SEGMENT_REF, bit 1) or sqlite (a SQLite image by reference, bits 1 and 2)")
	fs.BoolVar(&cfg.ServerProc, "server-proc", false, "bootstrap --http: serve from a child process and probe its heap (peak server heap vs page bytes), and time a bare SELECT+encode loop on the same rows")
	fs.IntVar(&cfg.ServerGOGC, "server-gogc", 0, "bootstrap --server-proc: GOGC of the server child (0: Go's default); a low value makes the heap probe follow the live heap")
	fs.IntVar(&cfg.Storm, "storm", 0, "bootstrap: then N concurrent fresh clients bootstrap one scope (wall time vs one client, segments built/reused); needs --server-proc")
	fs.BoolVar(&cfg.FreshClients, "fresh-clients", false, "storm, reconnect: every bootstrap by a new client (new clientId, epoch handshake first), whose binding the server records")
	fs.BoolVar(&cfg.SkipSegments, "skip-segments", false, "storm, reconnect: clients do not download the segments referenced (as if cached), so only the sync requests are measured")
	fs.IntVar(&cfg.IdlePartitions, "idle-partitions", 1000, "idle: partitions woken once")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", 10*time.Second, "idle: engine IdleTimeout (passivation delay)")
	fs.IntVar(&cfg.VUs, "vus", 50, "pushpull: virtual clients, one project each; storm, reconnect: clients bootstrapping one scope over and over")
	var bins string
	fs.Float64Var(&cfg.ScopeWriterRate, "scope-writer-rate", 0, "storm, reconnect: commits/s a writer makes into the bootstrapped scope meanwhile (each updates one row, so the row count stays; every commit moves the scope's pin); 0: none")
	fs.StringVar(&bins, "server-bin", "", "storm, reconnect --http: comma-separated [label=]path of bench binaries (e.g. built from another commit) whose server child is measured, each in turn in every run (default: this binary)")
	fs.IntVar(&cfg.ServerPID, "server-pid", 0, "pushpull, bigpush with --url: pid of the server, for its CPU time and peak RSS")
	fs.IntVar(&cfg.Sockets, "sockets", 10000, "realtime: idle sockets held (opened by a child process)")
	fs.IntVar(&cfg.HolderSockets, "holder-sockets", holderSockets, "realtime: most idle sockets per holder process (each binds its own source address 127.0.0.2, .3, …; above 25,000 idle sockets the fan-out runs next to them)")
	fs.IntVar(&cfg.FanoutSockets, "fanout-sockets", 1000, "realtime: subscribed sockets a commit fans out to")
	fs.IntVar(&cfg.FanoutCommits, "fanout-commits", 100, "realtime: commits timed (each to every socket)")
	fs.BoolVar(&cfg.FanoutAck, "fanout-ack", true, "realtime: clients acknowledge every delta (and the floor is also measured with an ack-sized answer per message)")
	fs.IntVar(&cfg.WakeSockets, "wake-sockets", 0, "realtime: run the wake-up cases instead (honest push+pull next to N idle sockets that are not live); 0 skips them")
	fs.IntVar(&cfg.WakeCommits, "wake-commits", 200, "realtime wake-up cases: push+pull requests per case")
	fs.IntVar(&cfg.PruneCommits, "prune-commits", 1_000_000, "prune: commits seeded in the partition (all but the newest 1,000 are pruned)")
	fs.IntVar(&cfg.PruneBatch, "prune-batch", retention.DefaultBatchCommits, "prune: commits per pruning transaction")
	fs.DurationVar(&cfg.PruneWindow, "prune-window", 2*time.Second, "prune: pruning runs in windows this long, each followed by a window of pushes alone")
	var sbins, ccases, cdeploys string
	fs.IntVar(&cfg.SoakWriters, "soak-writers", 8, "soak: writers (push+pull rounds, one project each)")
	fs.IntVar(&cfg.SoakReaders, "soak-readers", 16, "soak: readers (pull-only rounds of a writer's project)")
	fs.IntVar(&cfg.SoakSubscribers, "soak-subscribers", 200, "soak: realtime sockets subscribed to a writer's project, acknowledging every delta")
	fs.IntVar(&cfg.SoakChurners, "soak-churners", 4, "soak: reconnect churners (socket, hello, pull, close, over and over)")
	fs.DurationVar(&cfg.SoakMaintenance, "soak-maintenance", time.Second, "soak: the server's --retention-interval (maintenance passes, pruning)")
	fs.StringVar(&cfg.SoakProfile, "soak-profile", "", "soak: write a CPU profile of each server over its measured window (soak-LABEL.pprof) and its allocation profile (soak-LABEL.allocs) to this directory")
	fs.StringVar(&sbins, "synclane-bin", "", "cluster, hostile, soak: comma-separated [label=]path of synclane binaries, each measured in turn in every run (default: go build ./cmd/synclane)")
	fs.StringVar(&ccases, "cluster-cases", strings.Join(clusterCaseNames, ","), "cluster: cases to run: forward, spread, hot, realtime")
	fs.IntVar(&cfg.ClusterClients, "cluster-clients", 64, "cluster spread, hot: concurrent push+pull clients")
	fs.IntVar(&cfg.ClusterPartitions, "cluster-partitions", 16, "cluster spread: partitions the clients are spread over")
	fs.StringVar(&cdeploys, "cluster-deploys", "single,cluster,plain", "cluster spread, hot, realtime: deployments to compare: single (1 process), cluster (--cluster-members members), plain (--cluster-members processes without cluster flags)")
	fs.IntVar(&cfg.ForwardClients, "forward-clients", 8, "cluster forward: concurrent clients per route of the second forward case (1: only the one-client case)")
	fs.IntVar(&cfg.ClusterMembers, "cluster-members", 3, "cluster spread, hot, realtime: processes of the multi-process deployments")
	etcdBin := os.Getenv("SYNCLANE_ETCD_BIN")
	if etcdBin == "" {
		etcdBin = "/usr/bin/etcd"
	}
	fs.StringVar(&cfg.EtcdBin, "etcd-bin", etcdBin, "cluster: the etcd binary (default $SYNCLANE_ETCD_BIN, else /usr/bin/etcd)")
	fs.BoolVar(&cfg.ClusterBrowser, "cluster-browser", false, "cluster forward, spread, hot: clients send a browser's Accept-Encoding (gzip, deflate, br, zstd) instead of none (identity answers)")
	fs.BoolVar(&cfg.ClusterDebug, "cluster-debug", false, "cluster: serve pprof on each member (--debug-listen 127.0.0.1:6060+i)")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole invocation")
	fs.StringVar(&cfg.MemProfile, "memprofile", "", "write a heap profile at the end")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg.Set = set
	if cfg.Quick {
		quick := map[string]string{"duration": "1s", "warmup": "200ms", "partitions": "1,10", "clients": "20",
			"rows": "2000", "idle-partitions": "50", "writers": "16", "idle-timeout": "200ms", "pull-interval": "50ms",
			"rate": "200", "page-rows": "1000", "pages": "4", "sockets": "100", "fanout-sockets": "50", "fanout-commits": "10", "prune-commits": "5000", "prune-window": "200ms",
			"cluster-clients": "8", "cluster-partitions": "4", "forward-clients": "4"}
		for name, v := range quick {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return nil, err
				}
			}
		}
	}
	if inproc {
		cfg.Modes = append(cfg.Modes, ModeInproc)
	}
	if http {
		cfg.Modes = append(cfg.Modes, ModeLoopback)
	}
	if cfg.URL != "" {
		cfg.Modes = append(cfg.Modes, ModeURL)
	}
	if len(cfg.Modes) == 0 {
		cfg.Modes = []Mode{ModeInproc}
	}
	cfg.Stores = splitList(stores)
	var err error
	if cfg.ServerBins, err = parseServerBins(bins); err != nil {
		return nil, fmt.Errorf("--server-bin: %w", err)
	}
	if cfg.SynclaneBins, err = parseServerBins(sbins); err != nil {
		return nil, fmt.Errorf("--synclane-bin: %w", err)
	}
	cfg.ClusterCases = splitList(ccases)
	for _, c := range cfg.ClusterCases {
		if !contains(clusterCaseNames, c) {
			return nil, fmt.Errorf("--cluster-cases: unknown case %q (%s)", c, strings.Join(clusterCaseNames, ", "))
		}
	}
	cfg.ClusterDeploys = splitList(cdeploys)
	for _, d := range cfg.ClusterDeploys {
		if d != "single" && d != "cluster" && d != "plain" {
			return nil, fmt.Errorf("--cluster-deploys: unknown deployment %q (single, cluster, plain)", d)
		}
	}
	if cfg.ClusterClients < 1 || cfg.ClusterPartitions < 1 || cfg.ForwardClients < 1 || cfg.ClusterMembers < 2 {
		return nil, errors.New("--cluster-clients, --cluster-partitions and --forward-clients must be positive, --cluster-members at least 2")
	}
	if cfg.Partitions, err = intList(parts); err != nil {
		return nil, fmt.Errorf("--partitions: %w", err)
	}
	if cfg.Rows, err = intList(rows); err != nil {
		return nil, fmt.Errorf("--rows: %w", err)
	}
	switch {
	case cfg.PruneCommits < 1, cfg.PruneBatch < 1, cfg.PruneWindow <= 0:
		return nil, errors.New("--prune-commits, --prune-batch and --prune-window must be positive")
	case cfg.Runs < 1, cfg.Writers < 1, cfg.Clients < 1, cfg.PullWriters < 1, cfg.Rate < 1, cfg.IdlePartitions < 1, cfg.PullEvery < 1, cfg.VUs < 1,
		cfg.Sockets < 1, cfg.FanoutSockets < 1, cfg.FanoutCommits < 1, cfg.WakeSockets < 0, cfg.WakeCommits < 1:
		return nil, errors.New("--runs, --writers, --clients, --pull-writers, --rate, --pull-every, --idle-partitions, --vus, --sockets, --fanout-sockets and --fanout-commits must be positive")
	case cfg.SoakWriters < 1 || cfg.SoakReaders < 0 || cfg.SoakSubscribers < 0 || cfg.SoakChurners < 0 || cfg.SoakMaintenance <= 0:
		return nil, errors.New("--soak-writers must be positive, --soak-readers, --soak-subscribers and --soak-churners non-negative, --soak-maintenance positive")
	case cfg.Duration <= 0 || cfg.Warmup < 0:
		return nil, errors.New("--duration must be positive and --warmup non-negative")
	}
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func intList(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(strings.ReplaceAll(p, "_", ""))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", p)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}
