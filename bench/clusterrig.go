package main

// The processes of the cluster workload (cluster.go): an etcd, `synclane
// serve` members on one PostgreSQL database (a fresh schema per
// deployment, dropped after), and what is sampled from them: each
// process's CPU time from /proc/<pid>/stat, the CPU time of the
// PostgreSQL backends serving the members' connections (found by their
// application_name in pg_stat_activity), and the members' backends
// waiting on a heavyweight lock (pg_stat_activity, every 10 ms).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// parseProcStatCPU returns utime+stime of a /proc/<pid>/stat line. The
// command name (field 2) is parenthesized and may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseProcStatCPU(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("no command field")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command, want at least 13", len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * clockTick, nil
}

// procCPU is process pid's user+system CPU time (all its threads).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	d, err := parseProcStatCPU(string(b))
	return d, err == nil
}

// childProc is a process the harness started and stops.
type childProc struct {
	name    string
	cmd     *exec.Cmd
	pid     int
	logPath string
	done    chan struct{} // closed once the process has exited
}

func startChild(name, logPath string, cmd *exec.Cmd) (*childProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &childProc{name: name, cmd: cmd, pid: cmd.Process.Pid, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM and waits grace for the exit, then kills it.
func (p *childProc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has ended.
func (p *childProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail is the end of the process's log, for error messages.
func (p *childProc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// freeLoopbackPort returns a port free on 127.0.0.1 when asked (etcd
// binds it itself, so another process may take it first: callers retry).
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startEtcd starts a single-node etcd on free loopback ports with its data
// in dir, with the raft timings and --unsafe-no-fsync of package
// engine/cluster/etcdtest, and returns once /health answers true.
func startEtcd(ctx context.Context, bin, dir string) (*childProc, string, error) {
	var lastErr error
	for attempt := range 3 {
		client, err1 := freeLoopbackPort()
		peerPort, err2 := freeLoopbackPort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, "", err
		}
		endpoint := "http://127.0.0.1:" + strconv.Itoa(client)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		data := filepath.Join(dir, fmt.Sprintf("etcd-data-%d", attempt))
		cmd := exec.Command(bin, "--name", "bench", "--data-dir", data,
			"--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "bench="+peerURL, "--initial-cluster-token", "bench", "--initial-cluster-state", "new",
			"--heartbeat-interval", "50", "--election-timeout", "250", "--unsafe-no-fsync", "--logger", "zap")
		p, err := startChild("etcd", filepath.Join(dir, fmt.Sprintf("etcd-%d.log", attempt)), cmd)
		if err != nil {
			return nil, "", err
		}
		if lastErr = waitEtcdHealthy(ctx, p, endpoint); lastErr == nil {
			return p, endpoint, nil
		}
		p.stop(5 * time.Second)
		lastErr = fmt.Errorf("%w\n%s", lastErr, p.logTail())
	}
	return nil, "", fmt.Errorf("etcd did not start: %w", lastErr)
}

func waitEtcdHealthy(ctx context.Context, p *childProc, endpoint string) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if p.exited() {
			return errors.New("etcd exited")
		}
		var h struct {
			Health string `json:"health"`
		}
		if err := getJSON(ctx, endpoint+"/health", "", &h); err == nil && h.Health == "true" {
			return nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return errors.New("etcd /health not true within 20s")
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// getJSON GETs u (with a bearer token unless empty) and decodes the JSON
// answer into out.
func getJSON(ctx context.Context, u, token string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", u, res.Status, strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, out)
}

// clusterRig is what every case of the cluster workload shares: the
// synclane binary, the etcd, the PostgreSQL server and a directory for
// logs, the schema file and the cluster secret.
type clusterRig struct {
	cfg        *Config
	bin        serverBin
	dir        string
	etcd       *childProc
	etcdURL    string
	schemaPath string
	secretPath string
	token      string // admin API token of every member
}

// deployment is N `synclane serve` processes on a fresh schema, as
// cluster members or as plain processes.
type deployment struct {
	rig       *clusterRig
	schema    string // PostgreSQL schema; also the members' application_name and the cluster's name
	clustered bool
	members   []*clusterMember
	mon       *pgxpool.Pool // the harness's own connections (sampling)
}

// clusterMember is one `synclane serve` process.
type clusterMember struct {
	*childProc
	url   string // http://127.0.0.1:PORT: its cluster ID, and where clients reach it
	admin string // admin API base URL
}

// withQuery adds query parameters to a PostgreSQL URL.
func withQuery(pgURL string, kv ...string) (string, error) {
	u, err := url.Parse(pgURL)
	if err != nil {
		return "", fmt.Errorf("--postgres: %w", err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// deploy creates a schema and starts n members on it (cluster members
// when clustered), and in cluster mode waits until every member sees all n.
func (r *clusterRig) deploy(ctx context.Context, n int, clustered bool) (*deployment, error) {
	d := &deployment{rig: r, schema: "synclane_bench_" + randHex(6), clustered: clustered}
	if err := pgExec(ctx, r.cfg.PostgresURL, "CREATE SCHEMA "+pgx.Identifier{d.schema}.Sanitize()); err != nil {
		return nil, err
	}
	var err error
	if d.mon, err = pgxpool.New(ctx, r.cfg.PostgresURL); err != nil {
		d.close()
		return nil, err
	}
	memberURL, err := withQuery(r.cfg.PostgresURL, "search_path", d.schema, "application_name", d.schema)
	if err != nil {
		d.close()
		return nil, err
	}
	for i := range n {
		m, err := r.startMember(ctx, memberURL, d.schema, clustered, len(d.members))
		if err != nil {
			d.close()
			return nil, fmt.Errorf("member %d: %w", i, err)
		}
		d.members = append(d.members, m)
	}
	if clustered {
		if err := d.waitMembers(ctx, n); err != nil {
			d.close()
			return nil, err
		}
	}
	return d, nil
}

func (r *clusterRig) startMember(ctx context.Context, pgURL, clusterName string, clustered bool, i int) (*clusterMember, error) {
	args := []string{"serve", "--postgres", pgURL, "--pg-max-conns", strconv.Itoa(r.cfg.PGMaxConns),
		"--listen", "127.0.0.1:0", "--schema", r.schemaPath, "--log-level", "warn",
		"--drain-delay", "0s", "--shutdown-timeout", "5s", "--idle-timeout", "10m",
		"--admin-listen", "127.0.0.1:0", "--admin-token", r.token,
		"--max-websockets", strconv.Itoa(r.cfg.FanoutSockets + 100)}
	if clustered {
		args = append(args, "--cluster-etcd", r.etcdURL, "--cluster-name", clusterName, "--cluster-secret", r.secretPath)
	}
	if r.cfg.ClusterDebug {
		args = append(args, "--debug-listen", "127.0.0.1:"+strconv.Itoa(6060+i))
	}
	cmd := exec.Command(r.bin.path, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p, err := startChild(fmt.Sprintf("member %d", i), filepath.Join(r.dir, fmt.Sprintf("%s-member-%d.log", clusterName, i)), cmd)
	if err != nil {
		return nil, err
	}
	type first struct {
		Listening string `json:"listening"`
		Admin     string `json:"admin"`
	}
	got := make(chan first, 1)
	go func() {
		br := bufio.NewReader(out)
		line, err := br.ReadString('\n')
		var f first
		if err == nil {
			_ = json.Unmarshal([]byte(line), &f)
		}
		got <- f
		_, _ = io.Copy(io.Discard, br) // until the process exits
	}()
	select {
	case f := <-got:
		if f.Listening == "" {
			p.stop(5 * time.Second)
			return nil, fmt.Errorf("serve printed no listening line:\n%s", p.logTail())
		}
		return &clusterMember{childProc: p, url: f.Listening, admin: f.Admin}, nil
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
	}
	p.stop(5 * time.Second)
	return nil, fmt.Errorf("serve did not start within 60s:\n%s", p.logTail())
}

// memberView is the part of GET /api/cluster the harness reads.
type memberView struct {
	Healthy   bool              `json:"healthy"`
	Members   []json.RawMessage `json:"members"`
	Forwarded map[string]uint64 `json:"forwarded"`
	Served    map[string]uint64 `json:"served"`
	Owner     string            `json:"owner"`
}

// view asks member i's admin API for its cluster view (with partition's
// owner unless partition is empty).
func (d *deployment) view(ctx context.Context, i int, partition string) (memberView, error) {
	var v memberView
	u := d.members[i].admin + "/api/cluster"
	if partition != "" {
		u += "?partition=" + url.QueryEscape(partition)
	}
	err := getJSON(ctx, u, d.rig.token, &v)
	return v, err
}

func (d *deployment) waitMembers(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := range d.members {
		for {
			v, err := d.view(ctx, i, "")
			if err == nil && v.Healthy && len(v.Members) == n {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("member %d does not see %d healthy members within 30s (last: %d members, healthy %v, err %v)", i, n, len(v.Members), v.Healthy, err)
			}
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// ids are the members' cluster IDs (their URLs), in start order.
func (d *deployment) ids() []string {
	out := make([]string, len(d.members))
	for i, m := range d.members {
		out[i] = m.url
	}
	return out
}

// close stops the members and drops the schema.
func (d *deployment) close() {
	var wg sync.WaitGroup
	for _, m := range d.members {
		wg.Add(1)
		go func() { defer wg.Done(); m.stop(15 * time.Second) }()
	}
	wg.Wait()
	if d.mon != nil {
		d.mon.Close()
	}
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgExec(dctx, d.rig.cfg.PostgresURL, "DROP SCHEMA IF EXISTS "+pgx.Identifier{d.schema}.Sanitize()+" CASCADE"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: drop schema %s: %v\n", d.schema, err)
	}
}

// cpuSnap is the CPU time of a deployment's processes at one instant.
type cpuSnap struct {
	members []time.Duration
	pg      map[int]time.Duration // backend pid → CPU time
	etcd    time.Duration
	ok      bool
}

// snapCPU reads every member's, the etcd's and the members' PostgreSQL
// backends' CPU time.
func (d *deployment) snapCPU(ctx context.Context) cpuSnap {
	s := cpuSnap{ok: true, pg: map[int]time.Duration{}}
	for _, m := range d.members {
		c, ok := procCPU(m.pid)
		s.ok = s.ok && ok
		s.members = append(s.members, c)
	}
	if c, ok := procCPU(d.rig.etcd.pid); ok {
		s.etcd = c
	}
	rows, err := d.mon.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", d.schema)
	if err != nil {
		s.pg = nil
		return s
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		s.pg = nil
		return s
	}
	for _, pid := range pids {
		if c, ok := procCPU(int(pid)); ok {
			s.pg[int(pid)] = c
		}
	}
	return s
}

// cpuUse is the CPU a deployment spent between two snapshots.
type cpuUse struct {
	members []time.Duration
	pg      time.Duration
	pgOK    bool
	etcd    time.Duration
}

func (u cpuUse) memberSum() time.Duration {
	var t time.Duration
	for _, m := range u.members {
		t += m
	}
	return t
}

// cpuBetween is b − a. A PostgreSQL backend only in b started in
// between (all its CPU counts); one only in a ended in between (its last
// moments are lost: pools keep their connections, so this is rare).
func cpuBetween(a, b cpuSnap) cpuUse {
	u := cpuUse{etcd: b.etcd - a.etcd, pgOK: a.pg != nil && b.pg != nil}
	for i := range b.members {
		if i < len(a.members) {
			u.members = append(u.members, b.members[i]-a.members[i])
		}
	}
	if u.pgOK {
		for pid, c := range b.pg {
			u.pg += c - a.pg[pid]
		}
	}
	return u
}

// lockStats aggregates samples of the members' backends waiting on a
// heavyweight lock (pg_stat_activity.wait_event_type = 'Lock'), by
// wait_event: transactionid and tuple are row-lock waits (a SELECT … FOR
// UPDATE or UPDATE behind another transaction's row lock).
type lockStats struct {
	samples    int
	withWaiter int            // samples with at least one waiter
	waiters    int            // waiting backends summed over samples
	rowWaiters int            // of which transactionid or tuple
	maxWaiters int            // most waiters in one sample
	byEvent    map[string]int // waiting backends by wait_event, summed over samples
}

// add records one sample: waiting backends by wait_event.
func (s *lockStats) add(byEvent map[string]int) {
	s.samples++
	n := 0
	for ev, k := range byEvent {
		n += k
		if ev == "transactionid" || ev == "tuple" {
			s.rowWaiters += k
		}
		if s.byEvent == nil {
			s.byEvent = map[string]int{}
		}
		s.byEvent[ev] += k
	}
	s.waiters += n
	s.maxWaiters = max(s.maxWaiters, n)
	if n > 0 {
		s.withWaiter++
	}
}

// meanWaiters is the mean number of waiting backends per sample (the
// backend-seconds spent waiting per second).
func (s *lockStats) meanWaiters() float64 {
	if s.samples == 0 {
		return 0
	}
	return float64(s.waiters) / float64(s.samples)
}

// meanRowWaiters is meanWaiters for row-lock waits only.
func (s *lockStats) meanRowWaiters() float64 {
	if s.samples == 0 {
		return 0
	}
	return float64(s.rowWaiters) / float64(s.samples)
}

// waitingShare is the fraction of samples with a waiter.
func (s *lockStats) waitingShare() float64 {
	if s.samples == 0 {
		return 0
	}
	return float64(s.withWaiter) / float64(s.samples)
}

// eventsNote names the wait events seen, most frequent first.
func (s *lockStats) eventsNote() string {
	if len(s.byEvent) == 0 {
		return "none"
	}
	evs := make([]string, 0, len(s.byEvent))
	for ev := range s.byEvent {
		evs = append(evs, ev)
	}
	sort.Slice(evs, func(i, j int) bool {
		if s.byEvent[evs[i]] != s.byEvent[evs[j]] {
			return s.byEvent[evs[i]] > s.byEvent[evs[j]]
		}
		return evs[i] < evs[j]
	})
	parts := make([]string, len(evs))
	for i, ev := range evs {
		parts[i] = fmt.Sprintf("%s %.0f%%", ev, 100*float64(s.byEvent[ev])/float64(s.waiters))
	}
	return strings.Join(parts, ", ")
}

// lockSampler samples lock waits every 10 ms on a goroutine it owns
// until stop.
type lockSampler struct {
	stats lockStats
	errs  int
	stopc chan struct{}
	done  chan struct{}
}

// lockSamplePeriod is how often the lock sampler looks.
const lockSamplePeriod = 10 * time.Millisecond

func (d *deployment) sampleLocks(ctx context.Context) *lockSampler {
	ls := &lockSampler{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(ls.done)
		t := time.NewTicker(lockSamplePeriod)
		defer t.Stop()
		for {
			select {
			case <-ls.stopc:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := d.mon.Query(ctx, `SELECT coalesce(wait_event, ''), count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND wait_event_type = 'Lock' GROUP BY 1`, d.schema)
			if err != nil {
				ls.errs++
				continue
			}
			ev := map[string]int{}
			var name string
			var n int64
			_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error { ev[name] += int(n); return nil })
			if err != nil {
				ls.errs++
				continue
			}
			ls.stats.add(ev)
		}
	}()
	return ls
}

// stop ends the sampling and returns its figures and how many samples
// failed.
func (ls *lockSampler) stop() (lockStats, int) {
	close(ls.stopc)
	<-ls.done
	return ls.stats, ls.errs
}
