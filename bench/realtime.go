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
	"strconv"
	"strings"
	"sync"
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

// realtimeIdleCase connects cfg.Sockets idle sockets from a child process
// (each client pulled once, so its socket is registered on a scope key).
func realtimeIdleCase(ctx context.Context, cfg *Config, store string) (Result, error) {
	n := cfg.Sockets
	r := Result{Workload: "realtime", Case: fmt.Sprintf("%d idle sockets (each registered on a scope key)", n), Store: store, Mode: "http",
		Params: map[string]any{"sockets": n}}
	rs, err := openRealtime(ctx, cfg, store, realtime.Options{MaxConnections: n + 10})
	if err != nil {
		return r, err
	}
	defer rs.t.Close()
	exe, err := os.Executable()
	if err != nil {
		return r, err
	}
	cmd := exec.CommandContext(ctx, exe, "realtime-holder", rs.url, strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() { _ = in.Close(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	expect := func(word string) error {
		if !lines.Scan() {
			return fmt.Errorf("realtime holder ended before %q", word)
		}
		if got := strings.TrimSpace(lines.Text()); got != word {
			return fmt.Errorf("realtime holder: %s", got)
		}
		return nil
	}
	if err := expect("pulled"); err != nil {
		return r, err
	}
	m0, g0 := heapAndStacks()
	start := time.Now()
	fmt.Fprintln(in, "connect")
	if err := expect("connected"); err != nil {
		return r, err
	}
	took := time.Since(start)
	for rs.hub.Stats().Sockets < n {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		time.Sleep(10 * time.Millisecond)
	}
	m1, g1 := heapAndStacks()
	st := rs.hub.Stats()
	r.add("heap+stacks/idle socket", "B", float64(int64(m1)-int64(m0))/float64(n))
	r.add("goroutines/idle socket", "", float64(g1-g0)/float64(n))
	r.add("sockets open", "", float64(st.Sockets))
	r.add("connect time (all)", "ms", ms(took))
	return r, nil
}

// realtimeHolder is the child process of the idle case: it pulls once per
// client, says "pulled", waits for "connect", opens one socket per client,
// says "connected" and holds them until stdin closes.
func realtimeHolder(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: bench realtime-holder URL N")
		return 2
	}
	base := args[0]
	n, _ := strconv.Atoi(args[1])
	ctx := context.Background()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	errs := make([]error, 32)
	runWorkers(32, func(w int) {
		for i := w; i < n && errs[w] == nil; i += 32 {
			c := &httpsync.Client{URL: base + "/sync", HTTP: hc, ClientID: fmt.Sprintf("idle-%d", i), Header: http.Header{"X-Actor": {"idler"}}}
			_, errs[w] = c.Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
				&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {fmt.Sprintf("list-%d", i%100)}}, Cursor: -1})
		}
	})
	if err := errors.Join(errs...); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("pulled")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return 1
	}
	conns := make([]*websocket.Conn, n)
	runWorkers(32, func(w int) {
		for i := w; i < n && errs[w] == nil; i += 32 {
			c, _, err := websocket.Dial(ctx, base+"/realtime?clientId="+fmt.Sprintf("idle-%d", i),
				&websocket.DialOptions{HTTPHeader: http.Header{"X-Actor": {"idler"}}})
			if err != nil {
				errs[w] = err
				return
			}
			if _, _, err := c.Read(ctx); err != nil { // hello
				errs[w] = err
				return
			}
			conns[i] = c
			c.CloseRead(ctx) // answers pings, reads nothing else
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

// realtimeFanoutCase measures commit → delta latency to cfg.FanoutSockets
// subscribed sockets (closed loop: the next commit once every socket has
// the previous delta), then a bare broadcast of a message of the same size
// to as many sockets of a plain coder/websocket server in the same run.
func realtimeFanoutCase(ctx context.Context, cfg *Config, store string) (Result, error) {
	n, commits := cfg.FanoutSockets, cfg.FanoutCommits
	r := Result{Workload: "realtime", Case: fmt.Sprintf("commit → delta to %d sockets vs bare broadcast", n), Store: store, Mode: "http",
		Params: map[string]any{"sockets": n, "commits": commits}}
	noAck := !cfg.FanoutAck
	rs, err := openRealtime(ctx, cfg, store, realtime.Options{MaxConnections: n + 10, MaxUnackedDeltas: commits + 1})
	if err != nil {
		return r, err
	}
	defer rs.t.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
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
		}
	})
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	defer func() {
		for _, c := range conns {
			_ = c.CloseNow()
		}
	}()
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
	got := make(chan recv, n*4)
	var readers sync.WaitGroup
	rctx, stopReaders := context.WithCancel(ctx)
	for _, c := range conns {
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
	pusher := &httpsync.Client{URL: rs.url + "/sync", HTTP: hc, ClientID: "fan-writer", Header: http.Header{"X-Actor": {"writer"}}}
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
	stopReaders()
	readers.Wait()
	r.add("delta p50", "ms", ms(h.Quantile(0.5)))
	r.add("delta p99", "ms", ms(h.Quantile(0.99)))
	r.add("delta max", "ms", ms(h.Max()))
	r.add("delta bytes", "B", float64(size))
	st := rs.hub.Stats()
	r.add("distinct deltas encoded/commit", "", float64(st.DeltaBuilds)/float64(commits))

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
	r, err := realtimeFanoutCase(ctx, cfg, store)
	if err != nil {
		return out, err
	}
	out = append(out, r)
	r, err = realtimeIdleCase(ctx, cfg, store)
	if err != nil {
		return out, err
	}
	return append(out, r), nil
}
