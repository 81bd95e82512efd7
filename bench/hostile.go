package main

// The hostile workload (issue 31): one real `synclane serve` process with
// small connection caps; one hostile client opens realtime sockets (on one
// clientId, then on many clientIds of one actor) until refused, then
// keep-alive connections (one request each, then idle) past
// --max-connections, and keeps opening them; meanwhile an honest client's
// push+pull rounds are timed and compared with a baseline measured before
// the attack. An honest /healthz prober runs throughout.
//
//	go run ./bench hostile

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/transport/realtime"
)

// Caps of the hostile workload's server.
const (
	hostileMaxConns     = 1024
	hostileMaxWS        = 512
	hostilePerClient    = 16
	hostilePerActor     = 256
	hostileBaseline     = 8 * time.Second
	hostileUnderAttack  = 15 * time.Second
	hostileFloodPerStep = 64 // keep-alive connections opened per step of the flood
)

func runHostile(ctx context.Context, cfg *Config, _ string) ([]Result, error) {
	dir, err := os.MkdirTemp(cfg.DataDir, "synclane-bench-hostile-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var bin string
	if len(cfg.SynclaneBins) > 0 {
		bin = cfg.SynclaneBins[0].path
	} else if bin, err = buildSynclane(ctx, dir); err != nil {
		return nil, err
	}
	schemaPath := filepath.Join(dir, "tasks.json")
	if err := os.WriteFile(schemaPath, []byte(TasksSchemaJSON), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--schema", schemaPath,
		"--dev-auth", "--log-level", "warn", "--drain-delay", "0",
		"--max-connections", strconv.Itoa(hostileMaxConns), "--max-websockets", strconv.Itoa(hostileMaxWS),
		"--max-websockets-per-client", strconv.Itoa(hostilePerClient), "--max-websockets-per-actor", strconv.Itoa(hostilePerActor))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("hostile: serve did not start: %w", err)
	}
	var ann struct{ Listening string }
	if err := json.Unmarshal([]byte(line), &ann); err != nil || ann.Listening == "" {
		return nil, fmt.Errorf("hostile: serve announced %q", line)
	}
	base := ann.Listening
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	progress := func(format string, args ...any) {
		if !cfg.Quiet {
			fmt.Fprintf(os.Stderr, "hostile: "+format+"\n", args...)
		}
	}

	honest := newPPClient(newHTTPClient(), base, "default", "honest")
	measure := func(d time.Duration) (*Hist, int, error) {
		var h Hist
		errs := 0
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if ctx.Err() != nil {
				return &h, errs, ctx.Err()
			}
			t0 := time.Now()
			if err := honest.round(ctx); err != nil {
				errs++
				if errs > 100 {
					return &h, errs, fmt.Errorf("hostile: honest rounds failing: %w", err)
				}
				continue
			}
			h.Record(time.Since(t0))
		}
		return &h, errs, nil
	}
	// Warm up, then the baseline.
	if _, _, err := measure(time.Second); err != nil {
		return nil, err
	}
	progress("baseline %s", hostileBaseline)
	baseH, baseErrs, err := measure(hostileBaseline)
	if err != nil {
		return nil, err
	}

	// The attack runs in a child process ("bench hostile-attacker"), as an
	// attacker would be another program: its goroutines do not share this
	// process's scheduler with the honest client's (they still share the
	// machine's cores with it and the server).
	actx, stop := context.WithCancel(ctx)
	defer stop()
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	att := exec.Command(exe, "hostile-attacker", base)
	attIn, err := att.StdinPipe()
	if err != nil {
		return nil, err
	}
	attOut, err := att.StdoutPipe()
	if err != nil {
		return nil, err
	}
	att.Stderr = os.Stderr
	if err := att.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = att.Process.Kill(); _ = att.Wait() }()
	attLines := bufio.NewScanner(attOut)
	var rep attackReport
	readReport := func(stage string) error {
		if !attLines.Scan() {
			return fmt.Errorf("hostile: the attacker ended before %s: %v", stage, attLines.Err())
		}
		if err := json.Unmarshal(attLines.Bytes(), &rep); err != nil || rep.Stage != stage {
			return fmt.Errorf("hostile: attacker said %q, want its %s report", attLines.Text(), stage)
		}
		return nil
	}
	if err := readReport("sockets"); err != nil {
		return nil, err
	}
	wsSameClient, wsSameActor, wsClientCode, wsActorCode := rep.OneClient, rep.MoreOfActor, rep.ClientCode, rep.ActorCode
	progress("sockets: %d on one clientId (then %s), %d more on other clientIds of the actor (then %s)", wsSameClient, wsClientCode, wsSameActor, wsActorCode)
	if err := readReport("full"); err != nil { // the keep-alive flood filled the cap
		return nil, err
	}
	var wg sync.WaitGroup
	var probes, probeOK atomic.Int64
	var probeH Hist
	var probeMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		pc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for actx.Err() == nil {
			t0 := time.Now()
			res, err := pc.Get(base + "/healthz")
			probes.Add(1)
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					probeOK.Add(1)
					probeMu.Lock()
					probeH.Record(time.Since(t0))
					probeMu.Unlock()
				}
			}
			select {
			case <-actx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	progress("under attack %s (%d keep-alive connections opened so far)", hostileUnderAttack, rep.Opened)
	attackH, attackErrs, merr := measure(hostileUnderAttack)
	stop()
	wg.Wait()
	_ = attIn.Close() // the attacker stops, reports and exits
	if err := readReport("done"); err != nil {
		return nil, err
	}
	metrics, _ := scrapeMetrics(base)
	if merr != nil {
		return nil, merr
	}

	r := Result{Workload: "hostile", Case: "one hostile client", Store: "sqlite", Mode: "serve",
		Params: map[string]any{"max_connections": hostileMaxConns, "max_websockets": hostileMaxWS,
			"per_client": hostilePerClient, "per_actor": hostilePerActor}}
	r.add("honest_p50_baseline", "ms", ms(baseH.Quantile(0.50)))
	r.add("honest_p99_baseline", "ms", ms(baseH.Quantile(0.99)))
	r.add("honest_p50_attack", "ms", ms(attackH.Quantile(0.50)))
	r.add("honest_p99_attack", "ms", ms(attackH.Quantile(0.99)))
	ratio := float64(attackH.Quantile(0.99)) / float64(max(baseH.Quantile(0.99), 1))
	r.add("honest_p99_ratio", "x", ratio)
	r.add("honest_rounds_baseline", "count", float64(baseH.Count()))
	r.add("honest_rounds_attack", "count", float64(attackH.Count()))
	r.add("honest_errors", "count", float64(baseErrs+attackErrs))
	r.add("healthz_ok", "count", float64(probeOK.Load()))
	r.add("healthz_failed", "count", float64(probes.Load()-probeOK.Load()))
	r.add("healthz_p99", "ms", ms(probeH.Quantile(0.99)))
	r.add("ws_one_client", "count", float64(wsSameClient))
	r.add("ws_one_actor", "count", float64(wsSameClient+wsSameActor))
	r.add("keepalive_opened", "count", float64(rep.Opened))
	r.add("keepalive_503", "count", float64(rep.Refused503))
	r.add("keepalive_failed", "count", float64(rep.Failed))
	for _, m := range []string{"synclane_http_connections_open", "synclane_http_connections_evicted_total", "synclane_http_connections_refused_total"} {
		if v, ok := metrics[m]; ok {
			r.add(strings.TrimPrefix(m, "synclane_http_"), "count", v)
		}
	}
	r.Notes = append(r.Notes, fmt.Sprintf("refusals: one clientId %s, one actor %s", wsClientCode, wsActorCode))
	var errs []error
	if wsSameClient != hostilePerClient || wsClientCode != syncerr.WebsocketConnLimit {
		errs = append(errs, fmt.Errorf("hostile: one clientId held %d sockets (refused with %q), want %d", wsSameClient, wsClientCode, hostilePerClient))
	}
	if wsSameClient+wsSameActor != hostilePerActor || wsActorCode != syncerr.WebsocketConnLimit {
		errs = append(errs, fmt.Errorf("hostile: one actor held %d sockets (refused with %q), want %d", wsSameClient+wsSameActor, wsActorCode, hostilePerActor))
	}
	if probeOK.Load() == 0 || probeOK.Load() != probes.Load() {
		errs = append(errs, fmt.Errorf("hostile: %d of %d honest /healthz probes answered 200", probeOK.Load(), probes.Load()))
	}
	if ratio > 2 {
		r.Notes = append(r.Notes, fmt.Sprintf("honest p99 under attack is %.2fx the baseline (target 2x)", ratio))
	}
	return []Result{r}, errors.Join(errs...)
}

// scrapeMetrics reads the unlabelled samples of GET /metrics.
func scrapeMetrics(base string) (map[string]float64, error) {
	res, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = f
		}
	}
	return out, sc.Err()
}

// attackReport is a line the hostile attacker writes on its stdout.
type attackReport struct {
	Stage                  string // "sockets", "full", "done"
	OneClient, MoreOfActor int
	ClientCode, ActorCode  syncerr.Code
	Opened                 int64
	Refused503, Failed     int64
}

// hostileAttacker is the child process of the hostile workload ("bench
// hostile-attacker URL"): it opens realtime sockets until refused, then
// fills the server's connection cap with idle keep-alive connections and
// keeps opening them (about 1,000 a second) until its stdin closes,
// reporting each stage as a JSON line.
func hostileAttacker(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: bench hostile-attacker URL")
		return 2
	}
	base := args[0]
	actx, stop := context.WithCancel(context.Background())
	defer stop()
	enc := json.NewEncoder(os.Stdout)
	report := func(r attackReport) { _ = enc.Encode(r) }
	var wsSameClient, wsSameActor int
	var wsClientCode, wsActorCode syncerr.Code
	var sockets []*realtime.Client
	defer func() {
		for _, s := range sockets {
			s.CloseNow()
		}
	}()
	dial := func(clientID string) (syncerr.Code, bool) {
		s, err := realtime.Dial(actx, base+"/realtime", clientID, realtime.DialOptions{Header: http.Header{"X-Actor": {"mallory"}}})
		if err != nil {
			return syncerr.CodeOf(err), false
		}
		sockets = append(sockets, s)
		return "", true
	}
	for wsSameClient < hostileMaxWS {
		code, ok := dial("mallory-1")
		if !ok {
			wsClientCode = code
			break
		}
		wsSameClient++
	}
	for i := 2; wsSameActor+wsSameClient < hostileMaxWS; i++ {
		code, ok := dial("mallory-" + strconv.Itoa(i))
		if !ok {
			wsActorCode = code
			break
		}
		wsSameActor++
	}
	report(attackReport{Stage: "sockets", OneClient: wsSameClient, MoreOfActor: wsSameActor, ClientCode: wsClientCode, ActorCode: wsActorCode})

	// The keep-alive flood runs until the end of the measurement: it first
	// fills the cap, then keeps opening connections (evicting the oldest
	// idle ones, its own).
	var floodOpened, flood503, floodFailed atomic.Int64
	var wg sync.WaitGroup
	var connsMu sync.Mutex
	var conns []net.Conn
	addr := strings.TrimPrefix(base, "http://")
	openIdle := func() {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			floodFailed.Add(1)
			return
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			floodFailed.Add(1)
			c.Close()
			return
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			floodFailed.Add(1)
			c.Close()
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusServiceUnavailable {
			flood503.Add(1)
			c.Close()
			return
		}
		_ = c.SetDeadline(time.Time{})
		floodOpened.Add(1)
		connsMu.Lock()
		conns = append(conns, c)
		connsMu.Unlock()
	}
	defer func() {
		connsMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for actx.Err() == nil {
			var step sync.WaitGroup
			for range hostileFloodPerStep {
				step.Add(1)
				go func() { defer step.Done(); openIdle() }()
			}
			step.Wait()
			if floodOpened.Load() >= hostileMaxConns { // the cap is full: keep churning at about 1,000 connections/s
				select {
				case <-actx.Done():
				case <-time.After(time.Second * hostileFloodPerStep / 1000):
				}
			}
		}
	}()
	// Fill the cap, say so, and churn until stdin closes.
	for floodOpened.Load() < hostileMaxConns && actx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	report(attackReport{Stage: "full", Opened: floodOpened.Load()})
	_, _ = io.Copy(io.Discard, os.Stdin)
	stop()
	wg.Wait()
	report(attackReport{Stage: "done", Opened: floodOpened.Load(), Refused503: flood503.Load(), Failed: floodFailed.Load()})
	return 0
}
