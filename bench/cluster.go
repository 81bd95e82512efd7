package main

// The cluster workload (issue 29) runs real `synclane serve` processes on
// one PostgreSQL database and drives them over loopback HTTP:
//
//   - forward: 2 members; one client sends push+pull rounds for a
//     partition owned by member B, in alternating 1 s windows either to B
//     (local) or to A (forwarded to B over HTTP/2). Latency, and CPU per
//     round of both members together;
//   - spread and hot: the same client load (--cluster-clients push+pull
//     clients over --cluster-partitions partitions, or all on one
//     partition) against 1 plain process, N cluster members and N plain
//     processes (no cluster flags: each runs its own actor per partition,
//     serialized by the partition's row lock), clients spread over the
//     processes round-robin as a load balancer would. Commits/s, CPU per
//     commit of the members and of their PostgreSQL backends, and lock
//     waits of those backends sampled every 10 ms;
//   - realtime: --fanout-sockets sockets spread round-robin over the
//     processes, all subscribed to one partition; one writer pushes
//     --fanout-commits commits one after another, each timed until every
//     socket has the delta (or a wake-up).
//
// The synclane binary is --synclane-bin (several [label=]path: each in
// turn, same run), else built from this module. etcd is --etcd-bin,
// started on free loopback ports with its data in a temporary directory.
// Every deployment gets a fresh PostgreSQL schema (search_path in the
// members' URL), dropped after; its name is also the members' PostgreSQL
// application_name, which is how their backends are found for CPU and
// lock sampling.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// clusterCaseNames are the cases of --cluster-cases, in run order.
var clusterCaseNames = []string{"forward", "spread", "hot", "realtime"}

// deployKind is how a case's server side is deployed.
type deployKind struct {
	key       string // Params["deploy"]: single, cluster, plain
	name      string
	n         int
	clustered bool
}

func deployKinds(members int) []deployKind {
	return []deployKind{
		{"single", "1 process", 1, false},
		{"cluster", fmt.Sprintf("%d cluster members", members), members, true},
		{"plain", fmt.Sprintf("%d plain processes (no cluster flags)", members), members, false},
	}
}

func runCluster(ctx context.Context, cfg *Config, _ string) ([]Result, error) {
	if cfg.PostgresURL == "" {
		return nil, errors.New("cluster: needs --postgres URL or SYNCLANE_TEST_POSTGRES")
	}
	dir, err := os.MkdirTemp(cfg.DataDir, "synclane-bench-cluster-")
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if keep {
			fmt.Fprintf(os.Stderr, "bench: cluster: logs kept in %s\n", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	bins := cfg.SynclaneBins
	if len(bins) == 0 {
		if !cfg.Quiet {
			fmt.Fprintln(os.Stderr, "cluster: building ./cmd/synclane")
		}
		path, err := buildSynclane(ctx, dir)
		if err != nil {
			return nil, err
		}
		bins = []serverBin{{label: "synclane", path: path}}
	}
	etcd, etcdURL, err := startEtcd(ctx, cfg.EtcdBin, dir)
	if err != nil {
		return nil, err
	}
	defer etcd.stop(5 * time.Second)
	schemaPath, secretPath := filepath.Join(dir, "tasks.json"), filepath.Join(dir, "cluster.secret")
	if err := errors.Join(os.WriteFile(schemaPath, []byte(TasksSchemaJSON), 0o600),
		os.WriteFile(secretPath, []byte(randHex(32)), 0o600)); err != nil {
		return nil, err
	}
	var out []Result
	var errs []error
	for _, bin := range bins {
		rig := &clusterRig{cfg: cfg, bin: bin, dir: dir, etcd: etcd, etcdURL: etcdURL,
			schemaPath: schemaPath, secretPath: secretPath, token: randHex(16)}
		for _, name := range cfg.ClusterCases {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			rs, err := rig.runCase(ctx, name)
			for i := range rs {
				rs[i].Params["bin"] = bin.label
				if len(bins) > 1 {
					rs[i].Case += " [" + bin.label + "]"
				}
			}
			out = append(out, rs...)
			if err != nil {
				keep = true
				errs = append(errs, fmt.Errorf("%s [%s]: %w", name, bin.label, err))
				if !cfg.Quiet {
					fmt.Fprintf(os.Stderr, "bench: cluster %s [%s]: %v\n", name, bin.label, err)
				}
			}
		}
	}
	return out, errors.Join(errs...)
}

// buildSynclane builds ./cmd/synclane of the module in the working
// directory into dir.
func buildSynclane(ctx context.Context, dir string) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(gomod))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", errors.New("cluster: not inside the synclane module: run from the repository or pass --synclane-bin")
	}
	bin := filepath.Join(dir, "synclane")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/synclane")
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cluster: go build ./cmd/synclane: %w\n%s", err, out)
	}
	return bin, nil
}

func (r *clusterRig) runCase(ctx context.Context, name string) ([]Result, error) {
	progress := func(what string) {
		if !r.cfg.Quiet {
			fmt.Fprintf(os.Stderr, "cluster: %s [%s]\n", what, r.bin.label)
		}
	}
	switch name {
	case "forward":
		progress("forward vs local")
		return r.forwardCase(ctx)
	case "spread", "hot", "realtime":
		var out []Result
		var errs []error
		for _, k := range deployKinds(r.cfg.ClusterMembers) {
			if !contains(r.cfg.ClusterDeploys, k.key) {
				continue
			}
			progress(name + ": " + k.name)
			var res Result
			var err error
			if name == "realtime" {
				res, err = r.realtimeCase(ctx, k)
			} else {
				res, err = r.loadCase(ctx, k, name == "hot")
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", k.name, err))
				res.Notes = append(res.Notes, "FAILED: "+err.Error())
			}
			out = append(out, res)
		}
		return out, errors.Join(errs...)
	}
	return nil, fmt.Errorf("unknown cluster case %q", name)
}

// partitionOwnedBy returns the first partition prefix0, prefix1, … that
// rendezvous placement over ids gives to ids[owner].
func partitionOwnedBy(ids []string, owner int, prefix string) string {
	v := cluster.View{}
	for _, id := range ids {
		v.Members = append(v.Members, cluster.Member{ID: id})
	}
	for i := 0; ; i++ {
		p := prefix + strconv.Itoa(i)
		if m, ok := cluster.Owner(v, p); ok && m.ID == ids[owner] {
			return p
		}
	}
}

// ppClient is a push+pull client of the pushpull workload: its own
// project, one upsert and a pull of its project per round.
type ppClient struct {
	c       *Client
	project string
	cursor  int64
	n       int64
}

func newPPClient(hc *http.Client, memberURL, partition, name string) *ppClient {
	return &ppClient{c: &Client{rt: httpRT{url: memberURL + "/sync", hc: hc}, id: engine.Identity{ActorID: name, Partition: partition}, clientID: name},
		project: "proj-" + name, cursor: -1}
}

// client is newPPClient, sending a browser's Accept-Encoding with
// --cluster-browser.
func (r *clusterRig) client(hc *http.Client, memberURL, partition, name string) *ppClient {
	c := newPPClient(hc, memberURL, partition, name)
	if r.cfg.ClusterBrowser {
		c.c.rt = browserRT{url: memberURL + "/sync", hc: hc}
	}
	return c
}

// round sends one push+pull round and checks that its commit was applied.
func (p *ppClient) round(ctx context.Context) error {
	n := p.n
	p.n++
	id := p.project + "-r" + strconv.Itoa(int(n%pushpullRowsPerVU))
	row, err := tasksCodec.AppendSparse(nil, ssp2.Row{id, p.project, "task " + id, n%2 == 0, n % 5, time.Now().UnixMilli()}, nil, 0)
	if err != nil {
		return err
	}
	resp, err := p.c.Do(ctx,
		&ssp2.PushCommit{ClientCommitID: "c" + strconv.FormatInt(n, 10), Operations: []ssp2.Operation{{Table: "tasks", RowID: id, Op: ssp2.OpUpsert, Payload: row}}},
		&ssp2.PullHeader{LimitCommits: 100, LimitSnapshotRows: 5000, MaxSnapshotPages: 1, Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "tasks", Table: "tasks", Scopes: map[string][]string{"project_id": {p.project}}, Cursor: p.cursor})
	if err != nil {
		return err
	}
	applied := false
	for _, f := range resp.Frames {
		switch x := f.(type) {
		case *ssp2.PushResult:
			applied = x.Status != ssp2.CommitRejected && x.CommitSeq != nil
		case *ssp2.SubEnd:
			p.cursor = x.NextCursor
		}
	}
	if !applied {
		return fmt.Errorf("%s: commit c%d not applied", p.project, n)
	}
	return nil
}

// forwardCase: a partition owned by member B; clients sending rounds to B
// (local) and clients sending them to A (forwarded to B) in alternating
// windows, so both routes see the same machine load: one client, then
// --forward-clients concurrent clients per route.
func (r *clusterRig) forwardCase(ctx context.Context) ([]Result, error) {
	d, err := r.deploy(ctx, 2, true)
	if err != nil {
		return nil, err
	}
	defer d.close()
	ids := d.ids()
	part := partitionOwnedBy(ids, 1, "fwd-")
	for i := range ids { // the members agree
		v, err := d.view(ctx, i, part)
		if err != nil {
			return nil, err
		}
		if v.Owner != ids[1] {
			return nil, fmt.Errorf("member %d says %s is owned by %q, want %s", i, part, v.Owner, ids[1])
		}
	}
	hc := newHTTPClient()
	defer hc.CloseIdleConnections()
	var out []Result
	concs := []int{1}
	if r.cfg.ForwardClients > 1 {
		concs = append(concs, r.cfg.ForwardClients)
	}
	for _, conc := range concs {
		rs, err := r.forwardRoutes(ctx, d, hc, part, conc, r.cfg.Duration/time.Duration(len(concs)))
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// forwardRoutes measures conc clients per route for dur per route, in
// alternating windows of about 1 s.
func (r *clusterRig) forwardRoutes(ctx context.Context, d *deployment, hc *http.Client, part string, conc int, dur time.Duration) ([]Result, error) {
	ids := d.ids()
	name, what := "forward", "1 client"
	if conc > 1 {
		name, what = "forward-concurrent", fmt.Sprintf("%d clients", conc)
	}
	mk := func(route, how string) Result {
		return Result{Workload: "cluster", Case: name + ": " + what + how, Store: "postgres", Mode: "http",
			Params: map[string]any{"case": name, "route": route, "clients": conc, "duration": dur.String()}}
	}
	local, fwd := mk("local", " → owner B (local)"), mk("forwarded", " → A → owner B (forwarded)")
	clients := [2][]*ppClient{}
	for k, member := range []string{ids[1], ids[0]} {
		for i := range conc {
			c := r.client(hc, member, part, fmt.Sprintf("route%d-c%d-%d", k, conc, i))
			if err := c.c.Handshake(ctx); err != nil {
				return nil, fmt.Errorf("handshake: %w", err)
			}
			clients[k] = append(clients[k], c)
		}
	}
	// Warm-up: both routes, unmeasured.
	windows := max(1, int(dur/time.Second))
	win := dur / time.Duration(windows)
	var lat [2]Hist
	var use [2]cpuUse
	var rounds, errs [2]int64
	var firstErr error
	for w := -2; w < 2*windows; w++ {
		k := (w + 2) % 2
		length := win
		if w < 0 {
			length = r.cfg.Warmup / 2
		}
		s0 := d.snapCPU(ctx)
		end := time.Now().Add(length)
		tallies := make([]tally, conc)
		runWorkers(conc, func(i int) {
			for time.Now().Before(end) && ctx.Err() == nil {
				t0 := time.Now()
				if err := clients[k][i].round(ctx); err != nil {
					tallies[i].fail(err)
					continue
				}
				tallies[i].lat.Record(time.Since(t0))
				tallies[i].ok++
			}
		})
		u := cpuBetween(s0, d.snapCPU(ctx))
		if w < 0 {
			continue
		}
		tot, ferr := mergeTallies(tallies)
		lat[k].Merge(&tot.lat)
		rounds[k] += tot.ok
		errs[k] += tot.errs
		if firstErr == nil {
			firstErr = ferr
		}
		use[k].members = addDurations(use[k].members, u.members)
		use[k].pg += u.pg
		use[k].pgOK = (w < 2 || use[k].pgOK) && u.pgOK
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	v, err := d.view(ctx, 0, "")
	if err != nil {
		return nil, err
	}
	cpuPer := [2]float64{}
	for k, res := range []*Result{&local, &fwd} {
		res.add("rounds/s", "1/s", float64(rounds[k])/(win*time.Duration(windows)).Seconds())
		res.add("p50", "ms", ms(lat[k].Quantile(0.5)))
		res.add("p99", "ms", ms(lat[k].Quantile(0.99)))
		if rounds[k] > 0 {
			cpuPer[k] = ms(use[k].memberSum()) / float64(rounds[k])
			res.add("members CPU/round", "ms", cpuPer[k])
			res.add("A CPU/round", "ms", ms(use[k].members[0])/float64(rounds[k]))
			res.add("B CPU/round", "ms", ms(use[k].members[1])/float64(rounds[k]))
			if use[k].pgOK {
				res.add("PostgreSQL CPU/round", "ms", ms(use[k].pg)/float64(rounds[k]))
			}
		}
		res.add("rounds", "", float64(rounds[k]))
		res.add("errors", "", float64(errs[k]))
		res.Notes = append(res.Notes, fmt.Sprintf("%d alternating windows of %s per route; CPU summed over both members (utime+stime from /proc), A's idle work counted in both routes", windows, win))
	}
	fwd.add("A's sync calls forwarded so far", "", float64(v.Forwarded["sync"]))
	if cpuPer[0] > 0 {
		fwd.add("CPU/round ÷ local", "×", cpuPer[1]/cpuPer[0])
	}
	fwd.add("p50 − local p50", "ms", ms(lat[1].Quantile(0.5))-ms(lat[0].Quantile(0.5)))
	if rounds[0] > 0 {
		fwd.add("rounds/s ÷ local", "×", float64(rounds[1])/float64(rounds[0]))
	}
	if firstErr != nil {
		fwd.Notes = append(fwd.Notes, "first error: "+firstErr.Error())
	}
	return []Result{local, fwd}, nil
}

func addDurations(a, b []time.Duration) []time.Duration {
	if a == nil {
		a = make([]time.Duration, len(b))
	}
	for i := range b {
		a[i] += b[i]
	}
	return a
}

// loadCase runs --cluster-clients push+pull clients, client i on member
// i mod N and on partition i mod --cluster-partitions (hot: all on one
// partition), for --duration after --warmup.
func (r *clusterRig) loadCase(ctx context.Context, k deployKind, hot bool) (Result, error) {
	nClients, nParts := r.cfg.ClusterClients, r.cfg.ClusterPartitions
	load, what := "spread", fmt.Sprintf("%d clients over %d partitions", nClients, nParts)
	if hot {
		nParts, load, what = 1, "hot", fmt.Sprintf("%d clients on 1 partition", nClients)
	}
	res := Result{Workload: "cluster", Case: load + ": " + what + ", " + k.name, Store: "postgres", Mode: "http",
		Params: map[string]any{"case": load, "deploy": k.key, "processes": k.n, "clients": nClients, "partitions": nParts, "duration": r.cfg.Duration.String()}}
	d, err := r.deploy(ctx, k.n, k.clustered)
	if err != nil {
		return res, err
	}
	defer d.close()
	ids := d.ids()
	hc := newHTTPClient()
	defer hc.CloseIdleConnections()
	clients := make([]*ppClient, nClients)
	herrs := make([]error, nClients)
	for i := range clients {
		clients[i] = r.client(hc, ids[i%len(ids)], "load-"+strconv.Itoa(i%nParts), "vu"+strconv.Itoa(i))
	}
	runWorkers(nClients, func(i int) { herrs[i] = clients[i].c.Handshake(ctx) })
	if err := errors.Join(herrs...); err != nil {
		return res, fmt.Errorf("handshake: %w", err)
	}
	views := func() (sync uint64) {
		for i := range d.members {
			if v, err := d.view(ctx, i, ""); err == nil {
				sync += v.Forwarded["sync"]
			}
		}
		return sync
	}
	var fwd0 uint64
	if k.clustered {
		fwd0 = views()
	}
	ph := newPhase(r.cfg.Warmup, r.cfg.Duration, r.cfg.MaxOps)
	var s0 cpuSnap
	var ls *lockSampler
	started := make(chan struct{})
	go func() { // at the start of the measurement window
		defer close(started)
		if sleepCtx(ctx, time.Until(ph.measureFrom)) == nil {
			s0 = d.snapCPU(ctx)
			ls = d.sampleLocks(ctx)
		}
	}()
	tallies := make([]tally, nClients)
	runWorkers(nClients, func(i int) {
		c, tl := clients[i], &tallies[i]
		for ph.next() && ctx.Err() == nil {
			t0 := time.Now()
			if err := c.round(ctx); err != nil {
				tl.fail(err)
				continue
			}
			if ph.measuring(t0) {
				tl.lat.Record(time.Since(t0))
				tl.ok++
			}
		}
	})
	<-started
	if ls == nil {
		return res, ctx.Err()
	}
	locks, lockErrs := ls.stop()
	u := cpuBetween(s0, d.snapCPU(ctx))
	elapsed := time.Since(ph.measureFrom)
	tot, ferr := mergeTallies(tallies)
	res.add("commits/s", "1/s", float64(tot.ok)/elapsed.Seconds())
	res.add("p50", "ms", ms(tot.lat.Quantile(0.5)))
	res.add("p99", "ms", ms(tot.lat.Quantile(0.99)))
	if tot.ok > 0 {
		per := func(d time.Duration) float64 { return ms(d) / float64(tot.ok) }
		res.add("members CPU/commit", "ms", per(u.memberSum()))
		if u.pgOK {
			res.add("PostgreSQL CPU/commit", "ms", per(u.pg))
			res.add("members+PostgreSQL CPU/commit", "ms", per(u.memberSum()+u.pg))
		}
		if k.clustered {
			res.add("sync calls forwarded/commit", "", float64(views()-fwd0)/float64(tot.ok))
		}
	}
	busiest := time.Duration(0)
	for _, m := range u.members {
		busiest = max(busiest, m)
	}
	res.add("busiest process CPU", "cores", busiest.Seconds()/elapsed.Seconds())
	if k.clustered {
		res.add("etcd CPU", "cores", u.etcd.Seconds()/elapsed.Seconds())
	}
	res.add("lock waiters (mean)", "", locks.meanWaiters())
	res.add("row-lock waiters (mean)", "", locks.meanRowWaiters())
	res.add("samples with a lock waiter", "%", 100*locks.waitingShare())
	res.add("lock waiters (max)", "", float64(locks.maxWaiters))
	res.add("lock samples", "", float64(locks.samples))
	res.add("commits", "", float64(tot.ok))
	res.add("errors", "", float64(tot.errs))
	res.Notes = append(res.Notes, "lock waits by wait_event: "+locks.eventsNote())
	if ferr != nil {
		res.Notes = append(res.Notes, "first error: "+ferr.Error())
	}
	if lockErrs > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d lock samples failed", lockErrs))
	}
	return res, nil
}

// rtArrival is one socket's news of a commit: a delta up to seq or a
// wake-up at cursor seq.
type rtArrival struct {
	socket int
	seq    int64
	at     time.Time
	wake   bool
}

// deltaSeq is the cursor a delta message (TagDelta and one SSP2 response)
// brings its socket to: read from its trailing SUB_END (one subscription,
// no token) when the layout matches, else from a full decode.
func deltaSeq(data []byte) int64 {
	if k := len(data); k >= 20 && data[k-19] == 0x16 {
		return int64(binary.LittleEndian.Uint64(data[k-14 : k-6]))
	}
	m, err := ssp2.DecodeResponse(data[1:])
	if err != nil {
		return -1
	}
	if e := subEnd(m); e != nil {
		return e.NextCursor
	}
	return -1
}

// relayWait is how long the first commit of the realtime case may take
// to reach every socket before the case concludes that commits are not
// relayed across members.
const relayWait = 10 * time.Second

// realtimeCase: sockets on the processes round-robin, all subscribed to
// one partition's project; one writer (on the partition's owner in
// cluster mode, else on the first process) pushes commits one after
// another, each timed from its push until every socket has it.
func (r *clusterRig) realtimeCase(ctx context.Context, k deployKind) (Result, error) {
	n, commits := r.cfg.FanoutSockets, r.cfg.FanoutCommits
	res := Result{Workload: "cluster", Case: fmt.Sprintf("realtime: commit → %d sockets, %s", n, k.name), Store: "postgres", Mode: "http",
		Params: map[string]any{"case": "realtime", "deploy": k.key, "processes": k.n, "sockets": n, "commits": commits}}
	d, err := r.deploy(ctx, k.n, k.clustered)
	if err != nil {
		return res, err
	}
	defer d.close()
	ids := d.ids()
	const part, project = "rt", "fan"
	wm := 0
	if k.clustered {
		wm = partitionOwner(ids, part)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	writer := newPPClient(hc, ids[wm], part, "writer")
	writer.project = project
	if err := writer.round(ctx); err != nil { // the partition and a row exist
		return res, fmt.Errorf("seed: %w", err)
	}
	// One actor per socket: a server keeps at most 256 sockets of one actor
	// (--max-websockets-per-actor).
	hdr := func(i int) http.Header {
		return http.Header{"X-Actor": {"reader-" + strconv.Itoa(i)}, "X-Partition": {part}}
	}
	conns := make([]*websocket.Conn, n)
	requiresSync := make([]bool, n)
	errs := make([]error, 16)
	runWorkers(16, func(w int) {
		for i := w; i < n && errs[w] == nil; i += 16 {
			base := ids[i%len(ids)]
			cid := "rt-" + strconv.Itoa(i)
			c := &httpsync.Client{URL: base + "/sync", HTTP: hc, ClientID: cid, Header: hdr(i)}
			if _, errs[w] = c.Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: 5000, MaxSnapshotPages: 1},
				&ssp2.Subscription{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {project}}, Cursor: -1}); errs[w] != nil {
				return
			}
			conn, _, err := websocket.Dial(ctx, base+"/realtime?clientId="+cid, &websocket.DialOptions{HTTPHeader: hdr(i)})
			if err != nil {
				errs[w] = err
				return
			}
			conn.SetReadLimit(1 << 20)
			_, data, err := conn.Read(ctx)
			if err != nil {
				errs[w] = err
				_ = conn.CloseNow()
				return
			}
			m, err := ssp2.ParseServerControl(data)
			if h, ok := m.(*ssp2.Hello); err == nil && ok {
				requiresSync[i] = h.RequiresSync
			} else {
				errs[w] = fmt.Errorf("socket %d: first message is not a hello: %.100q", i, data)
				_ = conn.CloseNow()
				return
			}
			conns[i] = conn
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
		return res, err
	}
	notLive := 0
	for _, rs := range requiresSync {
		if rs {
			notLive++
		}
	}
	got := make(chan rtArrival, 4*n)
	rctx, stopReaders := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer func() { stopReaders(); readers.Wait() }()
	for i, c := range conns {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				typ, data, err := c.Read(rctx)
				at := time.Now()
				if err != nil {
					return
				}
				switch {
				case typ == websocket.MessageBinary && len(data) > 0 && data[0] == realtime.TagDelta:
					seq := deltaSeq(data)
					got <- rtArrival{socket: i, seq: seq, at: at}
					b, _ := ssp2.MarshalControl(&ssp2.Ack{Cursor: seq})
					_ = c.Write(rctx, websocket.MessageText, b)
				case typ == websocket.MessageText:
					if m, err := ssp2.ParseServerControl(data); err == nil {
						if w, ok := m.(*ssp2.Wake); ok {
							got <- rtArrival{socket: i, seq: w.Cursor, at: at, wake: true}
						}
					}
				}
			}
		}()
	}
	highest := make([]int64, n)
	var perSocket, last Hist
	var deltas, wakes int64
	var s0 cpuSnap
	// Commit 0 is unmeasured: it finds out whether commits reach the
	// sockets of every process.
	for j := 0; j <= commits; j++ {
		if j == 1 {
			s0 = d.snapCPU(ctx)
		}
		t0 := time.Now()
		if err := writer.round(ctx); err != nil {
			return res, fmt.Errorf("commit %d: %w", j, err)
		}
		seq := writer.cursor // the writer's pull returns its own commit: the partition's newest
		wait := 30 * time.Second
		if j == 0 {
			wait = relayWait
		}
		timeout := time.After(wait)
		missing := 0
		for _, h := range highest {
			if h < seq {
				missing++
			}
		}
		var slowest time.Duration
		for missing > 0 {
			select {
			case a := <-got:
				if a.seq < seq || highest[a.socket] >= seq {
					highest[a.socket] = max(highest[a.socket], a.seq)
					continue
				}
				highest[a.socket] = a.seq
				missing--
				if a.wake {
					wakes++
				} else {
					deltas++
				}
				if j > 0 {
					perSocket.Record(a.at.Sub(t0))
					slowest = max(slowest, a.at.Sub(t0))
				}
			case <-timeout:
				return realtimeTimeout(res, ids, wm, highest, seq, j, wait)
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
		if j > 0 {
			last.Record(slowest)
		}
	}
	use := cpuBetween(s0, d.snapCPU(ctx))
	res.add("delta p50", "ms", ms(perSocket.Quantile(0.5)))
	res.add("delta p99", "ms", ms(perSocket.Quantile(0.99)))
	res.add("all sockets p50", "ms", ms(last.Quantile(0.5)))
	res.add("all sockets p99", "ms", ms(last.Quantile(0.99)))
	res.add("members CPU/commit", "ms", ms(use.memberSum())/float64(commits))
	if use.pgOK {
		res.add("PostgreSQL CPU/commit", "ms", ms(use.pg)/float64(commits))
	}
	res.add("wake-ups instead of deltas", "", float64(wakes))
	res.add("deltas", "", float64(deltas))
	res.Notes = append(res.Notes, "latency from the writer's push request to each socket reading the delta (or wake-up); all sockets: the slowest socket of each commit; the writer is on "+
		map[bool]string{true: "the partition's owner", false: "the first process"}[k.clustered])
	if notLive > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d sockets connected with requiresSync (not live)", notLive))
	}
	return res, nil
}

// partitionOwner is the index in ids of partition's owner.
func partitionOwner(ids []string, partition string) int {
	v := cluster.View{}
	for _, id := range ids {
		v.Members = append(v.Members, cluster.Member{ID: id})
	}
	m, _ := cluster.Owner(v, partition)
	for i, id := range ids {
		if id == m.ID {
			return i
		}
	}
	return 0
}

// realtimeTimeout explains a commit that did not reach every socket: on
// the first commit, when exactly the sockets of the processes other than
// the writer's got nothing, commits are not relayed across processes (a
// build without cross-member realtime): the case is reported skipped.
func realtimeTimeout(res Result, ids []string, writer int, highest []int64, seq int64, commit int, wait time.Duration) (Result, error) {
	missing := make([]int, len(ids))
	total := 0
	for i, h := range highest {
		if h < seq {
			missing[i%len(ids)]++
			total++
		}
	}
	onWriter := missing[writer]
	if commit == 0 && onWriter == 0 && len(ids) > 1 {
		others := 0
		for i := range ids {
			if i != writer {
				others += (len(highest) - i + len(ids) - 1) / len(ids) // sockets on process i
			}
		}
		if total == others {
			res.Notes = append(res.Notes, fmt.Sprintf("SKIPPED: the first commit reached the %d sockets on the writer's process within %s but none of the %d on the other processes: this build does not relay realtime commits across cluster members",
				len(highest)-others, wait, others))
			res.add("skipped", "", 1)
			return res, nil
		}
	}
	return res, fmt.Errorf("commit %d (seq %d): %d of %d sockets got neither delta nor wake-up within %s (missing per process %v, writer on process %d)",
		commit, seq, total, len(highest), wait, missing, writer)
}
