package main

// The soak workload (issue 33), shaped like the reference harness's
// mixed-soak: against one real `synclane serve` process (embedded SQLite,
// the tasks schema, development auth, the maintenance loop every
// --soak-maintenance), at the same time
//
//   - writers: push+pull rounds, each on its own project;
//   - readers: pull-only rounds of a writer's project at their cursor;
//   - subscribers: realtime sockets subscribed to a writer's project,
//     reading every delta and acknowledging it (a wake-up is answered with
//     a pull, as the clients do);
//   - churners: reconnect churn, each iteration opening a socket, reading
//     its hello, pulling over HTTP and closing the socket;
//   - pruning: the server's maintenance loop.
//
// A round is one writer round, reader pull, churner iteration or wake-up
// pull; the figures are rounds/s and the server process's CPU time
// (/proc/PID/stat) over the measured window ÷ rounds. With several
// --synclane-bin binaries each is measured in turn in every run, and each
// result after the first carries its CPU/round as a ratio to the first's
// (same run). --soak-profile DIR takes a CPU profile of each server over
// its measured window (--debug-listen, /debug/pprof/profile) and its
// allocations since it started (/debug/pprof/allocs).
//
//	go run ./bench soak --synclane-bin prev=/tmp/prev/synclane,new=/tmp/new/synclane

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/realtime"
)

// soakServer is one `synclane serve` process of the soak workload.
type soakServer struct {
	*childProc
	url, debug string
}

// startSoakServer starts bin serve on a fresh data directory under dir.
func startSoakServer(ctx context.Context, cfg *Config, bin serverBin, dir string, debug bool) (*soakServer, error) {
	schemaPath := filepath.Join(dir, "tasks.json")
	if err := os.WriteFile(schemaPath, []byte(TasksSchemaJSON), 0o600); err != nil {
		return nil, err
	}
	args := []string{"serve", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--schema", schemaPath,
		"--dev-auth", "--log-level", "warn", "--drain-delay", "0s", "--shutdown-timeout", "5s",
		"--retention-interval", cfg.SoakMaintenance.String(),
		"--max-websockets", strconv.Itoa(cfg.SoakSubscribers + cfg.SoakChurners + 100)}
	s := &soakServer{}
	if debug {
		port, err := freeLoopbackPort()
		if err != nil {
			return nil, err
		}
		s.debug = "127.0.0.1:" + strconv.Itoa(port)
		args = append(args, "--debug-listen", s.debug)
	}
	cmd := exec.Command(bin.path, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p, err := startChild("serve "+bin.label, filepath.Join(dir, "serve.log"), cmd)
	if err != nil {
		return nil, err
	}
	s.childProc = p
	got := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		line, err := br.ReadString('\n')
		var f struct {
			Listening string `json:"listening"`
		}
		if err == nil {
			_ = json.Unmarshal([]byte(line), &f)
		}
		got <- f.Listening
		_, _ = io.Copy(io.Discard, br) // until the process exits
	}()
	select {
	case s.url = <-got:
		if s.url != "" {
			return s, nil
		}
		p.stop(5 * time.Second)
		return nil, fmt.Errorf("serve printed no listening line:\n%s", p.logTail())
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
	}
	p.stop(5 * time.Second)
	return nil, fmt.Errorf("serve did not start within 60s:\n%s", p.logTail())
}

func runSoak(ctx context.Context, cfg *Config, _ string) ([]Result, error) {
	dir, err := os.MkdirTemp(cfg.DataDir, "synclane-bench-soak-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bins := cfg.SynclaneBins
	if len(bins) == 0 {
		bin, err := buildSynclane(ctx, dir)
		if err != nil {
			return nil, err
		}
		bins = []serverBin{{label: "this tree", path: bin}}
	}
	var out []Result
	for i, b := range bins {
		if !cfg.Quiet {
			fmt.Fprintf(os.Stderr, "soak: %s\n", b.label)
		}
		d := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(d, 0o700); err != nil {
			return out, err
		}
		r, err := soakCase(ctx, cfg, b, d)
		if err == nil && i > 0 {
			if base, cur := out[0].metric("server CPU/round"), r.metric("server CPU/round"); base > 0 && cur > 0 {
				r.add("server CPU/round "+bins[0].label+" ÷ this", "×", base/cur)
			}
			if base, cur := out[0].metric("rounds/s"), r.metric("rounds/s"); base > 0 {
				r.add("rounds/s this ÷ "+bins[0].label, "×", cur/base)
			}
		}
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// metric returns the named metric's value (0 if absent).
func (r *Result) metric(name string) float64 {
	for _, m := range r.Metrics {
		if m.Name == name {
			return m.Value
		}
	}
	return 0
}

// soakTally counts one kind of round.
type soakTally struct {
	ok, errs atomic.Int64
	mu       sync.Mutex
	lat      Hist
	first    error
}

func (t *soakTally) record(ph *Phase, t0 time.Time, err error) {
	if err != nil {
		t.errs.Add(1)
		t.mu.Lock()
		if t.first == nil {
			t.first = err
		}
		t.mu.Unlock()
		return
	}
	if ph.measuring(t0) {
		t.ok.Add(1)
		t.mu.Lock()
		t.lat.Record(time.Since(t0))
		t.mu.Unlock()
	}
}

// soakPull is a pull-only round of project at *cursor (advanced).
func soakPull(ctx context.Context, c *Client, project string, cursor *int64) error {
	resp, err := c.Do(ctx, &ssp2.PullHeader{LimitCommits: 100, LimitSnapshotRows: 5000, MaxSnapshotPages: 1, Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "tasks", Table: "tasks", Scopes: map[string][]string{"project_id": {project}}, Cursor: *cursor})
	if err != nil {
		return err
	}
	e := subEnd(resp)
	if e == nil {
		return errors.New("pull: no SUB_END")
	}
	*cursor = e.NextCursor
	return nil
}

// soakDial opens a realtime socket of client c and reads its hello.
func soakDial(ctx context.Context, base string, c *Client) (*websocket.Conn, *ssp2.Hello, error) {
	conn, _, err := websocket.Dial(ctx, base+"/realtime?clientId="+c.clientID, &websocket.DialOptions{
		HTTPHeader: http.Header{"X-Actor": {c.id.ActorID}, "X-Partition": {c.id.Partition}}})
	if err != nil {
		return nil, nil, err
	}
	conn.SetReadLimit(1 << 20)
	_, data, err := conn.Read(ctx)
	if err != nil {
		_ = conn.CloseNow()
		return nil, nil, err
	}
	m, err := ssp2.ParseServerControl(data)
	h, ok := m.(*ssp2.Hello)
	if err != nil || !ok {
		_ = conn.CloseNow()
		return nil, nil, fmt.Errorf("first message is not a hello: %.100q", data)
	}
	return conn, h, nil
}

func soakCase(ctx context.Context, cfg *Config, bin serverBin, dir string) (Result, error) {
	W, R, S, C := cfg.SoakWriters, cfg.SoakReaders, cfg.SoakSubscribers, cfg.SoakChurners
	r := Result{Workload: "soak", Case: fmt.Sprintf("%d writers, %d readers, %d subscribers, %d churners, maintenance every %s, server %s",
		W, R, S, C, cfg.SoakMaintenance, bin.label), Store: "sqlite", Mode: "http",
		Params: map[string]any{"writers": W, "readers": R, "subscribers": S, "churners": C, "maintenance": cfg.SoakMaintenance.String(),
			"server": bin.label, "duration": cfg.Duration.String()}}
	srv, err := startSoakServer(ctx, cfg, bin, dir, cfg.SoakProfile != "")
	if err != nil {
		return r, err
	}
	defer srv.stop(10 * time.Second)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: W + R + S + C + 16}}
	defer hc.CloseIdleConnections()
	const part = "default"
	client := func(name string) *Client {
		return &Client{rt: httpRT{url: srv.url + "/sync", hc: hc}, id: engine.Identity{ActorID: name, Partition: part}, clientID: name}
	}
	writers := make([]*ppClient, W)
	for i := range writers {
		writers[i] = newPPClient(hc, srv.url, part, "w"+strconv.Itoa(i))
		if err := writers[i].round(ctx); err != nil { // the project has a row
			return r, fmt.Errorf("seed: %w", err)
		}
	}
	project := func(i int) string { return writers[i%W].project }

	// Subscribers: pulled once, then connected (live), for the whole case.
	type sub struct {
		c       *Client
		conn    *websocket.Conn
		project string
		cursor  int64
	}
	subs := make([]*sub, S)
	errs := make([]error, 16)
	runWorkers(16, func(w int) {
		for i := w; i < S && errs[w] == nil; i += 16 {
			s := &sub{c: client("sub-" + strconv.Itoa(i)), project: project(i), cursor: -1}
			if errs[w] = soakPull(ctx, s.c, s.project, &s.cursor); errs[w] != nil {
				return
			}
			var h *ssp2.Hello
			if s.conn, h, errs[w] = soakDial(ctx, srv.url, s.c); errs[w] != nil {
				return
			}
			if h.RequiresSync {
				errs[w] = fmt.Errorf("subscriber %d: hello says requiresSync after its pull", i)
			}
			subs[i] = s
		}
	})
	defer func() {
		for _, s := range subs {
			if s != nil && s.conn != nil {
				_ = s.conn.CloseNow()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	readers := make([]*Client, R)
	rcursor := make([]int64, R)
	for i := range readers {
		readers[i] = client("reader-" + strconv.Itoa(i))
		rcursor[i] = -1
	}
	churners := make([]*Client, C)
	ccursor := make([]int64, C)
	for i := range churners {
		churners[i] = client("churn-" + strconv.Itoa(i))
		ccursor[i] = -1
		if err := soakPull(ctx, churners[i], project(i), &ccursor[i]); err != nil {
			return r, err
		}
	}

	ph := newPhase(cfg.Warmup, cfg.Duration, 0)
	cpuAt := make(chan time.Duration, 1)
	prunedAt := make(chan float64, 1)
	go func() {
		select {
		case <-time.After(time.Until(ph.measureFrom)):
			d, _ := procCPU(srv.pid)
			cpuAt <- d
			prunedAt <- soakPruned(ctx, srv.url)
		case <-ctx.Done():
			cpuAt <- -1
			prunedAt <- -1
		}
	}()
	var prof sync.WaitGroup
	var profErr error
	if cfg.SoakProfile != "" {
		prof.Add(1)
		go func() {
			defer prof.Done()
			select {
			case <-time.After(time.Until(ph.measureFrom)):
			case <-ctx.Done():
				return
			}
			profErr = fetchProfile(ctx, "http://"+srv.debug+"/debug/pprof/profile?seconds="+strconv.Itoa(max(1, int(cfg.Duration.Seconds()))),
				filepath.Join(cfg.SoakProfile, "soak-"+bin.label+".pprof"))
		}()
	}
	var wT, rT, cT, wakeT soakTally
	var deltas, wakes atomic.Int64
	rctx, stopSubs := context.WithCancel(ctx)
	var subWG sync.WaitGroup
	for _, s := range subs {
		subWG.Add(1)
		go func() {
			defer subWG.Done()
			for {
				typ, data, err := s.conn.Read(rctx)
				if err != nil {
					return
				}
				switch {
				case typ == websocket.MessageBinary && len(data) > 0 && data[0] == realtime.TagDelta:
					seq := deltaSeq(data)
					if ph.measuring(time.Now()) {
						deltas.Add(1)
					}
					s.cursor = max(s.cursor, seq)
					b, _ := ssp2.MarshalControl(&ssp2.Ack{Cursor: seq})
					_ = s.conn.Write(rctx, websocket.MessageText, b)
				case typ == websocket.MessageText:
					m, err := ssp2.ParseServerControl(data)
					if _, ok := m.(*ssp2.Wake); err == nil && ok {
						if ph.measuring(time.Now()) {
							wakes.Add(1)
						}
						t0 := time.Now()
						wakeT.record(ph, t0, soakPull(rctx, s.c, s.project, &s.cursor))
					}
				}
			}
		}()
	}
	var load sync.WaitGroup
	load.Add(3)
	go func() {
		defer load.Done()
		runWorkers(W, func(i int) {
			for ph.next() && ctx.Err() == nil {
				t0 := time.Now()
				wT.record(ph, t0, writers[i].round(ctx))
			}
		})
	}()
	go func() {
		defer load.Done()
		runWorkers(R, func(i int) {
			for ph.next() && ctx.Err() == nil {
				t0 := time.Now()
				rT.record(ph, t0, soakPull(ctx, readers[i], project(i), &rcursor[i]))
			}
		})
	}()
	go func() {
		defer load.Done()
		runWorkers(C, func(i int) {
			for ph.next() && ctx.Err() == nil {
				t0 := time.Now()
				conn, _, err := soakDial(ctx, srv.url, churners[i])
				if err == nil {
					err = soakPull(ctx, churners[i], project(i), &ccursor[i])
					_ = conn.Close(websocket.StatusNormalClosure, "")
				}
				cT.record(ph, t0, err)
			}
		})
	}()
	load.Wait()
	cpuEnd, ok := procCPU(srv.pid)
	prunedEnd := soakPruned(ctx, srv.url)
	elapsed := time.Since(ph.measureFrom)
	stopSubs()
	subWG.Wait()
	cpuStart := <-cpuAt
	prof.Wait()
	if cfg.SoakProfile != "" && profErr == nil {
		// The allocations since the server started (setup included).
		profErr = fetchProfile(ctx, "http://"+srv.debug+"/debug/pprof/allocs", filepath.Join(cfg.SoakProfile, "soak-"+bin.label+".allocs"))
	}
	if srv.exited() {
		return r, fmt.Errorf("serve exited during the case:\n%s", srv.logTail())
	}
	rounds := wT.ok.Load() + rT.ok.Load() + cT.ok.Load() + wakeT.ok.Load()
	r.add("rounds/s", "1/s", float64(rounds)/elapsed.Seconds())
	if rounds > 0 && ok && cpuStart >= 0 {
		r.add("server CPU/round", "ms", ms(cpuEnd-cpuStart)/float64(rounds))
		r.add("server CPU", "%", 100*(cpuEnd-cpuStart).Seconds()/elapsed.Seconds())
	}
	for _, k := range []struct {
		name string
		t    *soakTally
	}{{"writer rounds", &wT}, {"reader pulls", &rT}, {"reconnects", &cT}} {
		r.add(k.name+"/s", "1/s", float64(k.t.ok.Load())/elapsed.Seconds())
		r.add(k.name+" p50", "ms", ms(k.t.lat.Quantile(0.5)))
		r.add(k.name+" p99", "ms", ms(k.t.lat.Quantile(0.99)))
	}
	r.add("deltas/s", "1/s", float64(deltas.Load())/elapsed.Seconds())
	r.add("wake-ups/s", "1/s", float64(wakes.Load())/elapsed.Seconds())
	if p0 := <-prunedAt; p0 >= 0 && prunedEnd >= 0 {
		r.add("commits pruned/s", "1/s", (prunedEnd-p0)/elapsed.Seconds())
	}
	r.add("rounds", "", float64(rounds))
	nerr := wT.errs.Load() + rT.errs.Load() + cT.errs.Load() + wakeT.errs.Load()
	r.add("errors", "", float64(nerr))
	r.Notes = append(r.Notes, "rounds: writer push+pull rounds, reader pulls, reconnects (socket, hello, pull, close) and wake-up pulls; server CPU is the serve process's utime+stime (/proc/PID/stat) over the measured window")
	if err := errors.Join(wT.first, rT.first, cT.first, wakeT.first); err != nil {
		r.Notes = append(r.Notes, "first errors: "+err.Error())
	}
	if profErr != nil {
		r.Notes = append(r.Notes, "profile: "+profErr.Error())
	}
	return r, nil
}

// soakPruned reads synclane_retention_pruned_commits_total from the
// server's /metrics (-1 when it cannot).
func soakPruned(ctx context.Context, base string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return -1
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "synclane_retention_pruned_commits_total "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// fetchProfile saves the profile at u (a /debug/pprof URL) to path.
func fetchProfile(ctx context.Context, u, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, res.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
