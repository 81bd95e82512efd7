package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// The realtime workload measures the WebSocket channel (transport/realtime)
// on a loopback listener in this process:
//
//   - idle sockets: memory per connected, registered, idle socket. The
//     sockets are opened by a child process (this binary, run as
//     "bench realtime-holder") so the server's file descriptors and memory
//     are the server's alone;
//   - fan-out: commit → delta latency to every one of N subscribed sockets
//     (from the moment the commit is durable to the moment each client has
//     the delta), next to a bare broadcast of a same-size message over the
//     same WebSocket library in the same run (the floor).

// rtServer is an engine with a realtime hub served on 127.0.0.1.
type rtServer struct {
	t      *Target
	hub    *realtime.Hub
	url    string
	srv    *http.Server
	commit func(seq int64) // observes durable commits (set before pushing)
	mu     sync.Mutex
}

func openRealtime(ctx context.Context, cfg *Config, store string, opts realtime.Options) (*rtServer, error) {
	t := &Target{Mode: ModeLoopback, Store: store, Prefix: ""}
	st, err := openStore(ctx, cfg, store, t)
	if err != nil {
		t.Close()
		return nil, err
	}
	rs := &rtServer{t: t}
	opts.Auth = auth.DevAuth{}
	if opts.MaxConnectionsPerActor == 0 {
		// The realtime workloads open thousands of sockets of one actor:
		// they measure sockets, not the per-actor cap.
		opts.MaxConnectionsPerActor = -1
	}
	rs.hub = realtime.New(opts)
	ecfg := engine.Config{Schema: schema.MustDemo(), Backend: st, IdleTimeout: time.Hour}
	ecfg.Resolver = engine.AllowAll(ecfg.Schema)
	ecfg.OnCommit = func(_ string, seq int64) {
		rs.mu.Lock()
		f := rs.commit
		rs.mu.Unlock()
		if f != nil {
			f(seq)
		}
	}
	rs.hub.Hooks(&ecfg)
	eng, err := engine.New(ctx, ecfg)
	if err != nil {
		t.Close()
		return nil, err
	}
	t.Engine = eng
	t.cleanup = append(t.cleanup, func() { _ = eng.Close() })
	rs.hub.Start(eng)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Close()
		return nil, err
	}
	rs.srv = &http.Server{Handler: httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}, Realtime: rs.hub}),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = rs.srv.Serve(ln) }()
	t.cleanup = append(t.cleanup, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rs.srv.Shutdown(sctx)
		rs.hub.Close()
	})
	rs.url = "http://" + ln.Addr().String()
	return rs, nil
}

// heapAndStacks is the live heap plus goroutine stacks after GC.
func heapAndStacks() (uint64, int) {
	h := heapAfterGC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return h + ms.StackInuse, runtime.NumGoroutine()
}

// holderSockets is the default of --holder-sockets, the most sockets one
// holder process opens: each holder binds its own 127.0.0.x source
// address, whose ephemeral ports (32768 … 60999 here, ~28k) bound the
// connections it can open to one server port; above it the fan-out runs
// next to the idle sockets.
const holderSockets = 25_000

// realtimeIdleCase connects cfg.Sockets idle sockets from child processes
// (each client pulled once, so its socket is registered on a scope key).
// Above holderSockets the sockets are spread over several holders, each
// on its own source address (127.0.0.2, .3, …). /healthz is polled all
// along; with cfg.Sockets > holderSockets the fan-out case then runs on
// the same server, next to the idle sockets.
func realtimeIdleCase(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	n := cfg.Sockets
	big := n > holderSockets
	r := Result{Workload: "realtime", Case: fmt.Sprintf("%d idle sockets (each registered on a scope key)", n), Store: store, Mode: "http",
		Params: map[string]any{"sockets": n}}
	// The server is this process: it needs a descriptor per socket (and,
	// when the fan-out runs here too, its sockets on both ends and the
	// bare broadcast's, opened while they are open).
	need := uint64(n + 256)
	if big {
		need += 4 * uint64(cfg.FanoutSockets)
	}
	if lim, err := raiseNoFile(need); err != nil {
		return []Result{r}, fmt.Errorf("open-file limit %d, %d needed: %w", lim, need, err)
	}
	maxConns := n + 10
	if big {
		maxConns += cfg.FanoutSockets
	}
	rs, err := openRealtime(ctx, cfg, store, realtime.Options{MaxConnections: maxConns, MaxUnackedDeltas: cfg.FanoutCommits + 1})
	if err != nil {
		return []Result{r}, err
	}
	defer rs.t.Close()
	exe, err := os.Executable()
	if err != nil {
		return []Result{r}, err
	}
	type holder struct {
		cmd   *exec.Cmd
		in    io.WriteCloser
		lines *bufio.Scanner
	}
	var holders []*holder
	defer func() {
		for _, h := range holders {
			_ = h.in.Close()
		}
		for _, h := range holders {
			_ = h.cmd.Wait()
		}
	}()
	per := cfg.HolderSockets
	if per <= 0 {
		per = holderSockets
	}
	for i, start := 0, 0; start < n; i, start = i+1, start+per {
		count := min(per, n-start)
		src := fmt.Sprintf("127.0.0.%d", 2+i)
		cmd := exec.CommandContext(ctx, exe, "realtime-holder", rs.url, strconv.Itoa(start), strconv.Itoa(count), src)
		cmd.Stderr = os.Stderr
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			return []Result{r}, err
		}
		holders = append(holders, &holder{cmd: cmd, in: in, lines: bufio.NewScanner(out)})
	}
	expect := func(word string) error {
		for _, h := range holders {
			if !h.lines.Scan() {
				return fmt.Errorf("realtime holder ended before %q", word)
			}
			if got := strings.TrimSpace(h.lines.Text()); got != word {
				return fmt.Errorf("realtime holder: %s", got)
			}
		}
		return nil
	}
	if err := expect("pulled"); err != nil {
		return []Result{r}, err
	}
	m0, g0 := heapAndStacks()
	rss0 := rssBytes()
	if f := os.Getenv("BENCH_REALTIME_HEAPPROFILE"); f != "" {
		if out, err := os.Create(f + ".base"); err == nil {
			_ = pprof.Lookup("heap").WriteTo(out, 0)
			_ = out.Close()
		}
	}
	health := startHealthPoll(rs.url)
	cpu0 := cpuSelf()
	start := time.Now()
	for _, h := range holders {
		fmt.Fprintln(h.in, "connect")
	}
	if err := expect("connected"); err != nil {
		health.stop()
		return []Result{r}, err
	}
	for rs.hub.Stats().Sockets < n {
		if ctx.Err() != nil {
			health.stop()
			return []Result{r}, ctx.Err()
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	openCPU := cpuSelf() - cpu0
	hOpen := health.stop()
	m1, g1 := heapAndStacks()
	rss1 := rssBytes()
	if f := os.Getenv("BENCH_REALTIME_HEAPPROFILE"); f != "" { // where the idle sockets' memory is
		if out, err := os.Create(f); err == nil {
			_ = pprof.Lookup("heap").WriteTo(out, 0)
			_ = out.Close()
		}
		if out, err := os.Create(f + ".goroutines"); err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(out, 1)
			_ = out.Close()
		}
	}
	var mst runtime.MemStats
	runtime.ReadMemStats(&mst)
	st := rs.hub.Stats()
	r.add("heap+stacks/idle socket", "B", float64(int64(m1)-int64(m0))/float64(n))
	r.add("goroutines/idle socket", "", float64(g1-g0)/float64(n))
	r.add("stack/goroutine", "B", float64(mst.StackInuse)/float64(runtime.NumGoroutine()))
	r.add("sockets open", "", float64(st.Sockets))
	r.add("connect time (all)", "ms", ms(took))
	r.add("server CPU while opening", "ms", ms(openCPU))
	r.add("process RSS after", "MB", float64(rss1)/(1<<20))
	r.add("process RSS growth/socket", "B", float64(int64(rss1)-int64(rss0))/float64(n))
	r.add("healthz p50 (opening)", "ms", ms(hOpen.Quantile(0.5)))
	r.add("healthz p99 (opening)", "ms", ms(hOpen.Quantile(0.99)))
	r.add("healthz max (opening)", "ms", ms(hOpen.Max()))
	r.add("healthz polls (opening)", "", float64(hOpen.Count()))
	out := []Result{r}
	if big {
		f, err := realtimeFanoutOn(ctx, cfg, store, rs, fmt.Sprintf(" next to %d idle sockets", n))
		out = append(out, f)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// realtimeHolder is the child process of the idle case: it pulls once per
// client (idle-START … idle-START+N-1), says "pulled", waits for
// "connect", opens one socket per client from source address SRC, says
// "connected" and holds them until stdin closes. It raises its own
// open-file limit to what it needs (the hard limit too: the bench runs as
// root here).
func realtimeHolder(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: bench realtime-holder URL START N SRC")
		return 2
	}
	base := args[0]
	first, _ := strconv.Atoi(args[1])
	n, _ := strconv.Atoi(args[2])
	src := net.ParseIP(args[3])
	if lim, err := raiseNoFile(uint64(n + 256)); err != nil {
		fmt.Printf("error: open-file limit %d: %v\n", lim, err)
		return 1
	}
	ctx := context.Background()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: dialer.DialContext}}
	ws := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	errs := make([]error, 32)
	runWorkers(32, func(w int) {
		for i := first + w; i < first+n && errs[w] == nil; i += 32 {
			c := &httpsync.Client{URL: base + "/sync", HTTP: hc, ClientID: fmt.Sprintf("idle-%d", i), Header: http.Header{"X-Actor": {"idler"}}}
			_, errs[w] = c.Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
				&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {fmt.Sprintf("list-%d", i%100)}}, Cursor: -1})
		}
	})
	if err := errors.Join(errs...); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	hc.CloseIdleConnections()
	fmt.Println("pulled")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return 1
	}
	conns := make([]*websocket.Conn, n)
	runWorkers(32, func(w int) {
		for k := w; k < n && errs[w] == nil; k += 32 {
			c, _, err := websocket.Dial(ctx, base+"/realtime?clientId="+fmt.Sprintf("idle-%d", first+k),
				&websocket.DialOptions{HTTPHeader: http.Header{"X-Actor": {"idler"}}, HTTPClient: ws})
			if err != nil {
				errs[w] = err
				return
			}
			if _, _, err := c.Read(ctx); err != nil { // hello
				errs[w] = err
				return
			}
			conns[k] = c
			// Read (and drop) what comes: heartbeats every 30 s, and pings
			// answered. (CloseRead would close the socket at the first
			// heartbeat, a data message: opening 100,000 takes longer.)
			go func() {
				for {
					if _, _, err := c.Read(ctx); err != nil {
						return
					}
				}
			}()
		}
	})
	if err := errors.Join(errs...); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("connected")
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		_ = c.CloseNow()
	}
	return 0
}

// raiseNoFile raises this process's open-file limit to at least need:
// the soft limit, and the hard limit when below (which needs
// CAP_SYS_RESOURCE: root in a container may lack it, as here). It returns
// the soft limit it has, and an error when that is below need.
func raiseNoFile(need uint64) (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur >= need {
		return rl.Cur, nil
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: need, Max: max(need, rl.Max)}); err == nil {
		return need, nil
	} else if rl.Max < need {
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: rl.Max, Max: rl.Max})
		return rl.Max, fmt.Errorf("the hard limit is %d and cannot be raised: %w", rl.Max, err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: need, Max: rl.Max}); err != nil {
		return rl.Cur, err
	}
	return need, nil
}

// rssBytes is this process's resident set size (0 when unknown).
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuSelf is this process's user + system CPU time so far.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// healthPoll polls GET /healthz on its own connection, one request at a
// time every 10 ms, and records each answer's latency.
type healthPoll struct {
	h    Hist
	once sync.Once
	quit chan struct{}
	done chan struct{}
	fail int
}

func startHealthPoll(base string) *healthPoll {
	p := &healthPoll{quit: make(chan struct{}), done: make(chan struct{})}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second}
	go func() {
		defer close(p.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
			}
			t0 := time.Now()
			resp, err := hc.Get(base + "/healthz")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("HTTP %d", resp.StatusCode)
				}
			}
			if err != nil {
				p.fail++
				continue
			}
			p.h.Record(time.Since(t0))
		}
	}()
	return p
}

// stop ends the polling and returns the latencies.
func (p *healthPoll) stop() *Hist {
	p.once.Do(func() { close(p.quit) })
	<-p.done
	return &p.h
}

// realtimeFanoutCase measures commit → delta latency to cfg.FanoutSockets
// subscribed sockets (closed loop: the next commit once every socket has
// the previous delta), then a bare broadcast of a message of the same size
// to as many sockets of a plain coder/websocket server in the same run.
func realtimeFanoutCase(ctx context.Context, cfg *Config, store string) (Result, error) {
	// No heartbeats (the floor has none either): on its own server the
	// fan-out measures deltas and acks only.
	rs, err := openRealtime(ctx, cfg, store, realtime.Options{MaxConnections: cfg.FanoutSockets + 10, MaxUnackedDeltas: cfg.FanoutCommits + 1,
		HeartbeatInterval: time.Hour})
	if err != nil {
		return Result{Workload: "realtime", Case: "commit → delta", Store: store}, err
	}
	defer rs.t.Close()
	return realtimeFanoutOn(ctx, cfg, store, rs, "")
}

// realtimeFanoutOn is the fan-out case on rs (which may hold other,
// idle sockets: where says so in the case's name); /healthz is polled
// while the commits fan out.
func realtimeFanoutOn(ctx context.Context, cfg *Config, store string, rs *rtServer, where string) (Result, error) {
	n, commits := cfg.FanoutSockets, cfg.FanoutCommits
	r := Result{Workload: "realtime", Case: fmt.Sprintf("commit → delta to %d sockets vs bare broadcast%s", n, where), Store: store, Mode: "http",
		Params: map[string]any{"sockets": n, "commits": commits}}
	noAck := !cfg.FanoutAck
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// Each client reads from its hello on (heartbeats are dropped, pings
	// answered), so the server's pings do not close sockets while the
	// others are still connecting.
	got := make(chan recv, n*4)
	var readers sync.WaitGroup
	rctx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	startReader := func(c *websocket.Conn) {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				typ, data, err := c.Read(rctx)
				at := time.Now()
				if err != nil {
					return
				}
				if typ != websocket.MessageBinary || len(data) == 0 || data[0] != realtime.TagDelta {
					continue
				}
				// The delta ends with SUB_END (nextCursor, no token) and END:
				// read the cursor from there (a full decode per socket would
				// load the 2 cores the server shares with these clients).
				seq := int64(-1)
				if k := len(data); k >= 20 && data[k-19] == 0x16 {
					seq = int64(binary.LittleEndian.Uint64(data[k-14 : k-6]))
				}
				got <- recv{seq: seq, at: at, size: len(data), data: data}
				if noAck {
					continue
				}
				b, _ := ssp2.MarshalControl(&ssp2.Ack{Cursor: seq})
				_ = c.Write(rctx, websocket.MessageText, b)
			}
		}()
	}
	// Every client pulls the list once (registered, current), then connects.
	conns := make([]*websocket.Conn, n)
	errs := make([]error, 16)
	runWorkers(16, func(w int) {
		for i := w; i < n && errs[w] == nil; i += 16 {
			cid := fmt.Sprintf("fan-%d", i)
			c := &httpsync.Client{URL: rs.url + "/sync", HTTP: hc, ClientID: cid, Header: http.Header{"X-Actor": {"reader"}}}
			if _, errs[w] = c.Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
				&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"fan"}}, Cursor: 0}); errs[w] != nil {
				return
			}
			conn, _, err := websocket.Dial(ctx, rs.url+"/realtime?clientId="+cid, &websocket.DialOptions{HTTPHeader: http.Header{"X-Actor": {"reader"}}})
			if err != nil {
				errs[w] = err
				return
			}
			conn.SetReadLimit(1 << 20)
			if _, _, err := conn.Read(ctx); err != nil {
				errs[w] = err
				return
			}
			conns[i] = conn
			startReader(conn)
		}
	})
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.CloseNow()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	// Every socket is live once its hello said so; wait for the hub too.
	for {
		live := 0
		for _, s := range rs.hub.Sessions(auth.DefaultPartition) {
			if s.Live {
				live++
			}
		}
		if live == n {
			break
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		time.Sleep(10 * time.Millisecond)
	}
	var durable sync.Map // seq → time the commit became durable
	rs.mu.Lock()
	rs.commit = func(seq int64) { durable.Store(seq, time.Now()) }
	rs.mu.Unlock()
	pusher := &httpsync.Client{URL: rs.url + "/sync", HTTP: hc, ClientID: "fan-writer", Header: http.Header{"X-Actor": {"writer"}}}
	health := startHealthPoll(rs.url)
	defer health.stop()
	cpu0 := cpuSelf()
	var h Hist
	size := 0
	for i := range commits {
		prs, err := pusher.Push(ctx, &ssp2.PushCommit{ClientCommitID: fmt.Sprintf("c%d", i),
			Operations: []ssp2.Operation{{Table: "todos", RowID: fmt.Sprintf("row-%d", i%10), Op: ssp2.OpUpsert, Payload: todoRow(fmt.Sprintf("row-%d", i%10), "fan", i)}}})
		if err != nil {
			stopReaders()
			return r, err
		}
		seq := *prs[0].CommitSeq
		for k := 0; k < n; k++ {
			select {
			case x := <-got:
				if x.seq != seq {
					stopReaders()
					return r, fmt.Errorf("a socket got a delta up to %d while waiting for %d", x.seq, seq)
				}
				t0, ok := durable.Load(seq)
				if !ok {
					stopReaders()
					return r, fmt.Errorf("commit %d was never reported durable", seq)
				}
				h.Record(x.at.Sub(t0.(time.Time)))
				size = x.size
				if k == 0 { // one full check per commit
					m, err := ssp2.DecodeResponse(x.data[1:])
					if err != nil || subEnd(m).NextCursor != seq || len(m.Frames) < 4 {
						stopReaders()
						return r, fmt.Errorf("commit %d: bad delta (%v)", seq, err)
					}
				}
			case <-time.After(30 * time.Second):
				stopReaders()
				return r, fmt.Errorf("commit %d: %d of %d sockets got no delta within 30s", seq, n-k, n)
			}
		}
	}
	fanCPU := cpuSelf() - cpu0
	hFan := health.stop()
	stopReaders()
	readers.Wait()
	// The floor's sockets replace these (descriptors: both ends of every
	// socket are in this process).
	for _, c := range conns {
		if c != nil {
			_ = c.CloseNow()
		}
	}
	r.add("delta p50", "ms", ms(h.Quantile(0.5)))
	r.add("delta p99", "ms", ms(h.Quantile(0.99)))
	r.add("delta max", "ms", ms(h.Max()))
	r.add("delta bytes", "B", float64(size))
	st := rs.hub.Stats()
	r.add("distinct deltas encoded/commit", "", float64(st.DeltaBuilds)/float64(commits))
	r.add("process CPU/commit (server + clients)", "ms", ms(fanCPU)/float64(commits))
	r.add("healthz p50 (fan-out)", "ms", ms(hFan.Quantile(0.5)))
	r.add("healthz p99 (fan-out)", "ms", ms(hFan.Quantile(0.99)))
	r.add("healthz max (fan-out)", "ms", ms(hFan.Max()))
	r.add("healthz polls (fan-out)", "", float64(hFan.Count()))

	floor, err := bareBroadcast(ctx, n, commits, size, false)
	if err != nil {
		return r, err
	}
	r.add("floor p50", "ms", ms(floor.Quantile(0.5)))
	r.add("floor p99", "ms", ms(floor.Quantile(0.99)))
	r.add("p99 / floor p99", "×", float64(h.Quantile(0.99))/float64(floor.Quantile(0.99)))
	if !noAck {
		// The same broadcast with each client answering every message with
		// an ack-sized text message, as the realtime clients do.
		echo, err := bareBroadcast(ctx, n, commits, size, true)
		if err != nil {
			return r, err
		}
		r.add("floor+echo p50", "ms", ms(echo.Quantile(0.5)))
		r.add("floor+echo p99", "ms", ms(echo.Quantile(0.99)))
		r.add("p99 / floor+echo p99", "×", float64(h.Quantile(0.99))/float64(echo.Quantile(0.99)))
	}
	return r, nil
}

type recv struct {
	seq  int64
	at   time.Time
	size int
	data []byte
}

// todoRow is the wire-v3 payload of a whole todo (every column present).
func todoRow(id, list string, i int) []byte {
	b, err := ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns).AppendSparse(nil, ssp2.Row{id, list, "item " + strconv.Itoa(i), i%2 == 0, int64(i), int64(1_700_000_000_000 + i)}, nil, 0)
	if err != nil {
		panic(err)
	}
	return b
}

// bareBroadcast is the floor: a plain coder/websocket server on loopback
// that writes one message of size bytes to each of n sockets (one
// goroutine per write, as the hub's writers), timed from the start of the
// broadcast to each client's read.
func bareBroadcast(ctx context.Context, n, rounds, size int, echo bool) (*Hist, error) {
	var mu sync.Mutex
	var conns []*websocket.Conn
	ready := make(chan struct{}, n)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		ready <- struct{}{}
		if !echo {
			c.CloseRead(context.Background())
			return
		}
		for { // read and drop the clients' answers
			if _, _, err := c.Read(context.Background()); err != nil {
				return
			}
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	clients := make([]*websocket.Conn, n)
	errs := make([]error, 16)
	runWorkers(16, func(w int) {
		for i := w; i < n && errs[w] == nil; i += 16 {
			c, _, err := websocket.Dial(ctx, "ws://"+ln.Addr().String(), nil)
			if err != nil {
				errs[w] = err
				return
			}
			c.SetReadLimit(1 << 20)
			clients[i] = c
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for range n {
		<-ready
	}
	defer func() {
		for _, c := range clients {
			_ = c.CloseNow()
		}
		for _, c := range conns {
			_ = c.CloseNow()
		}
	}()
	type stamp struct{ at time.Time }
	got := make(chan stamp, n)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	for _, c := range clients {
		go func() {
			for {
				_, _, err := c.Read(rctx)
				at := time.Now()
				if err != nil {
					return
				}
				got <- stamp{at}
				if echo {
					_ = c.Write(rctx, websocket.MessageText, []byte(`{"type":"ack","cursor":1234}`))
				}
			}
		}()
	}
	msg := make([]byte, size)
	var h Hist
	for range rounds {
		t0 := time.Now()
		for _, c := range conns {
			go func() { _ = c.Write(ctx, websocket.MessageBinary, msg) }()
		}
		for range n {
			select {
			case s := <-got:
				h.Record(s.at.Sub(t0))
			case <-time.After(30 * time.Second):
				return nil, errors.New("bare broadcast: a socket got nothing within 30s")
			}
		}
	}
	return &h, nil
}

// runRealtime runs the realtime workload (loopback sockets in this
// process; the mode flags do not apply).
func runRealtime(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	if cfg.Mode != ModeInproc {
		return nil, nil // runs once, whatever the modes
	}
	if cfg.WakeSockets > 0 {
		return realtimeWakeCases(ctx, cfg, store)
	}
	var out []Result
	if cfg.Sockets <= holderSockets { // larger: the fan-out runs next to the idle sockets
		r, err := realtimeFanoutCase(ctx, cfg, store)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	rs, err := realtimeIdleCase(ctx, cfg, store)
	return append(out, rs...), err
}
