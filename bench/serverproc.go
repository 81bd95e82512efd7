package main

// Bootstrap with the server in a child process (--server-proc): the child
// is this binary run as "server-child"; it serves a fresh engine over
// loopback HTTP exactly as --http does and adds two probe endpoints, so
// the server's heap is sampled in a process that holds no client state:
//
//	POST /_bench/reset  collect garbage, take the baseline, clear the peaks
//	GET  /_bench/probe  baseline and peaks since the reset, segment stats
//
// Segments are stored as `synclane serve` stores them (a SQLite file next
// to the database, the PostgreSQL table with --store postgres).
// The child prints "URL DBPATH" on its first stdout line and exits when its
// stdin is closed (the parent owns it; Target.Close closes stdin and waits,
// killing it after 10 s).

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the bare loop reads the child's SQLite file

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/segstore"
)

// heapProbe is the server child's answer to GET /_bench/probe.
type heapProbe struct {
	// BaseObjects/PeakObjects: /memory/classes/heap/objects:bytes (live
	// and not yet swept garbage) after the reset's GC and its peak since.
	BaseObjects, PeakObjects uint64
	// BaseLive/PeakLive: /gc/heap/live:bytes (the heap the last GC found
	// live) after the reset and its peak since.
	BaseLive, PeakLive uint64
	// CPUSeconds is the child's user+system CPU time since the reset
	// (getrusage), less sensitive to a loaded machine than wall time.
	CPUSeconds float64
	Segments   segstore.Stats
	// Engine is the child's engine counters (a child built before a
	// counter existed reads 0 for it).
	Engine engine.MetricsSnapshot
	// HasEncoded reports that the child's segment stats carry the
	// pages-encoded counter (a child built before it reads 0).
	HasEncoded bool `json:"-"`
}

// probeSampler samples the child's heap every millisecond until stopped.
type probeSampler struct {
	mu   sync.Mutex
	p    heapProbe
	cpu0 float64
	stop chan struct{}
	done sync.WaitGroup
}

func readHeap() (objects, live uint64) {
	s := []metrics.Sample{{Name: heapObjectsMetric}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

func startProbeSampler() *probeSampler {
	ps := &probeSampler{stop: make(chan struct{})}
	ps.reset()
	ps.done.Add(1)
	go func() {
		defer ps.done.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ps.stop:
				return
			case <-t.C:
				o, l := readHeap()
				ps.mu.Lock()
				ps.p.PeakObjects, ps.p.PeakLive = max(ps.p.PeakObjects, o), max(ps.p.PeakLive, l)
				ps.mu.Unlock()
			}
		}
	}()
	return ps
}

func (ps *probeSampler) reset() {
	heapAfterGC()
	o, l := readHeap()
	ps.mu.Lock()
	ps.p = heapProbe{BaseObjects: o, PeakObjects: o, BaseLive: l, PeakLive: l}
	ps.cpu0 = cpuSeconds()
	ps.mu.Unlock()
}

func (ps *probeSampler) read() heapProbe {
	o, l := readHeap()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.p.PeakObjects, ps.p.PeakLive = max(ps.p.PeakObjects, o), max(ps.p.PeakLive, l)
	p := ps.p
	p.CPUSeconds = cpuSeconds() - ps.cpu0
	return p
}

// cpuSeconds is this process's user+system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func (ps *probeSampler) Stop() {
	close(ps.stop)
	ps.done.Wait()
}

// serverChild runs the server child process; it returns the exit code.
func serverChild(args []string) int {
	fs := flag.NewFlagSet("server-child", flag.ContinueOnError)
	store := fs.String("store", "sqlite", "storage backend")
	dataDir := fs.String("data-dir", "", "parent directory of the SQLite database")
	pg := fs.String("postgres", "", "PostgreSQL URL")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if path := os.Getenv("BENCH_SERVER_CPUPROFILE"); path != "" {
		// Profiles the server child (the harness's --cpuprofile covers the
		// parent only).
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "server-child:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "server-child:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	ps := startProbeSampler()
	defer ps.Stop()
	cfg := &Config{Mode: ModeLoopback, DataDir: *dataDir, PostgresURL: *pg}
	t, err := openTarget(ctx, cfg, *store, EngineOpts{ServeSegments: true, Wrap: func(eng *engine.Engine, h http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		mux.HandleFunc("POST /_bench/reset", func(w http.ResponseWriter, _ *http.Request) {
			ps.reset()
			w.WriteHeader(http.StatusNoContent)
		})
		mux.HandleFunc("GET /_bench/probe", func(w http.ResponseWriter, _ *http.Request) {
			p := ps.read()
			p.Segments = eng.Segments().Stats()
			p.Engine = eng.Metrics()
			_ = json.NewEncoder(w).Encode(p)
		})
		return mux
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "server-child:", err)
		return 1
	}
	defer t.Close()
	fmt.Printf("%s %s\n", t.rt.(httpRT).url, t.dbPath)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
	return 0
}

// openServerProc starts the server child for store and returns a target
// driving it over loopback HTTP (Engine is nil; probe with probeReset and
// probeRead). exe is the bench binary run as the child ("": this one); one
// built from another commit (--server-bin) serves that commit's engine
// under the same child protocol.
func openServerProc(ctx context.Context, cfg *Config, store, exe string) (*Target, error) {
	if exe == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		exe = self
	}
	cmd := exec.Command(exe, "server-child", "--store", store, "--data-dir", cfg.DataDir, "--postgres", cfg.PostgresURL)
	cmd.Stderr = os.Stderr
	if cfg.ServerGOGC > 0 {
		cmd.Env = append(os.Environ(), "GOGC="+strconv.Itoa(cfg.ServerGOGC))
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := &Target{Mode: ModeLoopback, Store: store, Prefix: "bench-" + randHex(4) + "-", pid: cmd.Process.Pid}
	t.cleanup = append(t.cleanup, func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("server child: %w", err)
	}
	url, dbPath, _ := strings.Cut(strings.TrimSpace(line), " ")
	go func() { _, _ = io.Copy(io.Discard, stdout) }() // ends when the child exits
	hc := newHTTPClient()
	t.cleanup = append(t.cleanup, hc.CloseIdleConnections)
	t.rt = httpRT{url: url, hc: hc}
	t.dbPath = dbPath
	return t, nil
}

// probeURL is the server child's probe endpoint for path.
func (t *Target) probeURL(path string) string {
	return strings.TrimSuffix(t.rt.(httpRT).url, "/sync") + path
}

// probeReset collects the child's garbage and restarts its peaks.
func (t *Target) probeReset(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.probeURL("/_bench/reset"), nil)
	if err != nil {
		return err
	}
	res, err := t.rt.(httpRT).hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		return fmt.Errorf("probe reset: %s", res.Status)
	}
	return nil
}

// probeRead returns the child's heap peaks since the last reset and its
// segment stats.
func (t *Target) probeRead(ctx context.Context) (heapProbe, error) {
	var p heapProbe
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.probeURL("/_bench/probe"), nil)
	if err != nil {
		return p, err
	}
	res, err := t.rt.(httpRT).hc.Do(req)
	if err != nil {
		return p, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return p, fmt.Errorf("probe: %s", res.Status)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return p, err
	}
	p.HasEncoded = bytes.Contains(body, []byte(`"encoded"`)) || bytes.Contains(body, []byte(`"Encoded"`))
	return p, json.Unmarshal(body, &p)
}

// bareLoop is the baseline of the bootstrap: the same rows read from the
// server's SQLite file with one plain SELECT per page through the same
// driver and encoded into SSG2 pages, nothing else (no actor, gate, HTTP
// or client). It returns the rows/s and the CPU seconds this process spent
// (the harness is otherwise idle meanwhile).
func bareLoop(ctx context.Context, dbPath, partition string, t *schema.Table, version int32, pageRows int) (rowsPerSec, cpuSec float64, err error) {
	if dbPath == "" {
		return 0, 0, errors.New("bare loop: needs --store sqlite")
	}
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro")
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = `"` + c.Name + `"`
	}
	pk := cols[t.PK]
	q := fmt.Sprintf(`SELECT %s, _sync_version FROM %q WHERE partition_id = ? AND %s > ? ORDER BY %s LIMIT ?`,
		strings.Join(cols, ", "), t.Name, pk, pk)
	raw := make([]any, len(cols)+1)
	ptrs := make([]any, len(raw))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	start, cpu0 := time.Now(), cpuSeconds()
	n := 0
	after := ""
	for {
		rows, err := db.QueryContext(ctx, q, partition, after, pageRows)
		if err != nil {
			return 0, 0, err
		}
		sb := ssp2.NewSegmentBuilder(t.Name, version, t.Columns)
		got := 0
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return 0, 0, err
			}
			row := make(ssp2.Row, len(cols))
			for i, c := range t.Columns {
				row[i] = bareValue(c, raw[i])
			}
			if err := sb.AddRow(raw[len(cols)].(int64), row); err != nil {
				rows.Close()
				return 0, 0, err
			}
			after = row[t.PK].(string)
			got++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, 0, err
		}
		if got == 0 {
			break
		}
		if len(sb.Finish()) == 0 {
			return 0, 0, errors.New("bare loop: empty segment")
		}
		n += got
	}
	return float64(n) / time.Since(start).Seconds(), cpuSeconds() - cpu0, nil
}

// bareValue is the minimal conversion of a scanned value to its row value
// (booleans are stored as 0/1; the demo schema has no other conversions).
func bareValue(c ssp2.Column, v any) any {
	switch x := v.(type) {
	case int64:
		if c.Type == ssp2.TypeBoolean {
			return x != 0
		}
	case []byte:
		if c.Type == ssp2.TypeString {
			return string(x)
		}
		return bytes.Clone(x)
	}
	return v
}
