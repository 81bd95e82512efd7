package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/cluster/etcdtest"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/httpsync"
)

// The cluster process harness: a real etcd (etcdtest) and several real
// `synclane serve --cluster-etcd` processes on one PostgreSQL schema, on
// loopback ports, each with its admin listener. Every member's stdout and
// stderr go to <name>.log in the test's temporary directory; their tails
// are printed when the test fails (and they are copied to
// $SYNCLANE_CLUSTER_TEST_LOGS/<test> when that is set). Every process is
// killed at cleanup.
//
// Every commit row the members insert is audited by a trigger the harness
// installs (test_commit_audit): the committing member (its PostgreSQL
// application_name) and the partition's owner and ownership generation as
// the committing transaction saw them. A member committing under a
// generation it does not hold shows up as a row whose committer is not the
// owner.

// clusterOptions configure startCluster.
type clusterOptions struct {
	// members is the number of members (default 3), named A, B, C, ...
	members int
	// leaseTTL is --cluster-lease-ttl (default 1s).
	leaseTTL time.Duration
	// args are more serve flags, for every member.
	args []string
	// etcdVia, when set, returns the etcd endpoint member name is given
	// (etcd's own endpoint: its argument), e.g. a proxy the test cuts.
	etcdVia func(name, endpoint string) string
}

// testCluster is etcd and the members of one cluster.
type testCluster struct {
	t       *testing.T
	bin     string
	etcd    *etcdtest.Server
	pgURL   string // the PostgreSQL server (SYNCLANE_TEST_POSTGRES)
	schema  string // the test's schema, every member's search_path
	secret  string // the cluster secret file
	dir     string
	opts    clusterOptions
	members []*clusterMember
}

// clusterMember is one member: its addresses stay the same across
// restarts (its advertise URL is its cluster ID).
type clusterMember struct {
	c    *testCluster
	name string
	// base is the sync listener's URL, which is also the member's
	// advertise URL (the default: the bound address); admin is the admin
	// listener's URL. Both are set by the first start and never change.
	base, admin     string
	addr, adminAddr string
	logPath         string
	// secret, when set, is the member's --cluster-secret file instead of
	// the cluster's.
	secret string

	mu  sync.Mutex
	run *memberRun // the current (or last) process
}

// memberRun is one process of a member.
type memberRun struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // cmd.Wait's result, set before done closes
}

// startCluster starts etcd and opts.members members on a fresh schema,
// all at once, and returns when every member's view lists all of them.
func startCluster(t *testing.T, opts clusterOptions) *testCluster {
	t.Helper()
	bin := synclaneBinary(t)
	if opts.members == 0 {
		opts.members = 3
	}
	if opts.leaseTTL == 0 {
		opts.leaseTTL = time.Second
	}
	c := &testCluster{t: t, bin: bin, opts: opts}
	c.etcd = etcdtest.Start(t)
	c.pgURL = pgtest.URL(t)
	c.schema = pgtest.NewSchema(t)
	c.dir = t.TempDir()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	c.secret = filepath.Join(c.dir, "cluster.secret")
	if err := os.WriteFile(c.secret, key, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range opts.members {
		name := string(rune('A' + i))
		c.members = append(c.members, &clusterMember{c: c, name: name, logPath: filepath.Join(c.dir, name+".log")})
	}
	// Runs before the schema is dropped and etcd is stopped (registered
	// after them).
	t.Cleanup(func() {
		for _, m := range c.members {
			m.cleanup()
		}
		if dir := os.Getenv("SYNCLANE_CLUSTER_TEST_LOGS"); dir != "" {
			c.keepLogs(t, filepath.Join(dir, t.Name()))
		}
		if t.Failed() {
			for _, m := range c.members {
				t.Logf("tail of member %s (%s) log %s:\n%s", m.name, m.base, m.logPath, fileTail(m.logPath, 60))
			}
		}
	})
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.start()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	c.waitViews(t, c.members...)
	c.installAudit(t)
	return c
}

// keepLogs copies the members' logs to dir (SYNCLANE_CLUSTER_TEST_LOGS,
// for a look after a run that passed).
func (c *testCluster) keepLogs(t *testing.T, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("keep the members' logs: %v", err)
		return
	}
	for _, m := range c.members {
		b, err := os.ReadFile(m.logPath)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, m.name+".log"), b, 0o644)
		}
		if err != nil {
			t.Logf("keep member %s's log: %v", m.name, err)
		}
	}
	t.Logf("the members' logs are in %s", dir)
}

// memberURL is member name's --postgres URL: the test's schema, and the
// member's name as application_name (the audit trigger's committer).
func (c *testCluster) memberURL(name string) string {
	sep := "?"
	if strings.Contains(c.pgURL, "?") {
		sep = "&"
	}
	return c.pgURL + sep + "search_path=" + url.QueryEscape(c.schema) + "&application_name=" + url.QueryEscape(auditName(name))
}

// auditName is the application_name of member name's connections.
func auditName(name string) string { return "synclane-member-" + name }

// byBase returns the member whose advertise URL is base, or nil.
func (c *testCluster) byBase(base string) *clusterMember {
	for _, m := range c.members {
		if m.base == base {
			return m
		}
	}
	return nil
}

// byAuditName returns the member whose application_name is name, or nil.
func (c *testCluster) byAuditName(name string) *clusterMember {
	for _, m := range c.members {
		if auditName(m.name) == name {
			return m
		}
	}
	return nil
}

// start starts the member's process: on free ports the first time, on the
// same addresses afterwards; it returns once the process announced its
// listeners (the first stdout line).
func (m *clusterMember) start() error {
	c := m.c
	listen, adminListen := m.addr, m.adminAddr
	if listen == "" {
		listen, adminListen = "127.0.0.1:0", "127.0.0.1:0"
	}
	etcdEndpoint := c.etcd.Endpoint
	if c.opts.etcdVia != nil {
		etcdEndpoint = c.opts.etcdVia(m.name, etcdEndpoint)
	}
	secret := c.secret
	if m.secret != "" {
		secret = m.secret
	}
	args := []string{"serve", "--listen", listen, "--admin-listen", adminListen, "--admin-token", adminTestToken,
		"--postgres", c.memberURL(m.name), "--pg-max-conns", "8",
		"--cluster-etcd", etcdEndpoint, "--cluster-name", "proctest", "--cluster-secret", secret,
		"--cluster-lease-ttl", c.opts.leaseTTL.String(), "--drain-delay", "1s", "--shutdown-timeout", "10s",
		"--log-level", "info"}
	args = append(args, c.opts.args...)
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s: member %s starts: synclane %s\n", time.Now().Format(time.RFC3339Nano), m.name, strings.Join(args, " "))
	cmd := exec.Command(c.bin, args...)
	first := &firstLineWriter{w: logf, line: make(chan string, 1)}
	cmd.Stdout, cmd.Stderr = first, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	run := &memberRun{cmd: cmd, done: make(chan struct{})}
	go func() { // owned by the member: ends when the process exits (cleanup kills it)
		run.err = cmd.Wait()
		fmt.Fprintf(logf, "=== %s: member %s exited: %v\n", time.Now().Format(time.RFC3339Nano), m.name, run.err)
		_ = logf.Close()
		close(run.done)
	}()
	m.mu.Lock()
	m.run = run
	m.mu.Unlock()
	select {
	case line := <-first.line:
		var ann struct {
			Listening string `json:"listening"`
			Admin     string `json:"admin"`
		}
		if err := json.Unmarshal([]byte(line), &ann); err != nil || ann.Listening == "" || ann.Admin == "" {
			return fmt.Errorf("member %s: first stdout line %q: %v", m.name, line, err)
		}
		if m.base == "" {
			m.base, m.admin = ann.Listening, ann.Admin
			m.addr, m.adminAddr = strings.TrimPrefix(ann.Listening, "http://"), strings.TrimPrefix(ann.Admin, "http://")
		} else if ann.Listening != m.base || ann.Admin != m.admin {
			return fmt.Errorf("member %s restarted on %s (admin %s), want %s (admin %s)", m.name, ann.Listening, ann.Admin, m.base, m.admin)
		}
		return nil
	case <-run.done:
		return fmt.Errorf("member %s exited before announcing its address (%v):\n%s", m.name, run.err, fileTail(m.logPath, 30))
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("member %s did not announce its address within 30s:\n%s", m.name, fileTail(m.logPath, 30))
	}
}

// current returns the member's current (or last) process.
func (m *clusterMember) current() *memberRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.run
}

// running reports whether the member's process runs (possibly stopped by
// SIGSTOP).
func (m *clusterMember) running() bool {
	r := m.current()
	if r == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// pid is the process ID of the member's current process.
func (m *clusterMember) pid() int { return m.current().cmd.Process.Pid }

// signal sends sig to the member's running process.
func (m *clusterMember) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if !m.running() {
		t.Fatalf("member %s: %v: not running", m.name, sig)
	}
	if err := m.current().cmd.Process.Signal(sig); err != nil {
		t.Fatalf("member %s: %v: %v", m.name, sig, err)
	}
}

// wait waits up to timeout for the member's process to exit and returns
// its exit error (nil: exit status 0).
func (m *clusterMember) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	r := m.current()
	select {
	case <-r.done:
		return r.err
	case <-time.After(timeout):
		t.Fatalf("member %s (pid %d) did not exit within %v", m.name, r.cmd.Process.Pid, timeout)
		return nil
	}
}

// stop sends SIGTERM and waits for the member to exit; a graceful stop
// must end with exit status 0.
func (m *clusterMember) stop(t *testing.T) {
	t.Helper()
	m.signal(t, syscall.SIGTERM)
	if err := m.wait(t, 30*time.Second); err != nil {
		t.Fatalf("member %s after SIGTERM: %v, want exit status 0", m.name, err)
	}
}

// logSize returns the size of the member's log so far (an offset for
// logSince).
func (m *clusterMember) logSize() int64 {
	fi, err := os.Stat(m.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns the messages (field "msg") of the member's JSON log
// lines written after offset, each with its line.
func (m *clusterMember) logSince(t *testing.T, offset int64) (msgs, lines []string) {
	t.Helper()
	b, err := os.ReadFile(m.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b[min(offset, int64(len(b))):]), "\n") {
		var l struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg != "" {
			msgs, lines = append(msgs, l.Msg), append(lines, line)
		}
	}
	return msgs, lines
}

// kill sends SIGKILL (kill -9) and waits for the process to end.
func (m *clusterMember) kill(t *testing.T) {
	t.Helper()
	m.signal(t, syscall.SIGKILL)
	_ = m.wait(t, 10*time.Second)
}

// pause stops the process (SIGSTOP): it holds its sockets, connections and
// transactions, and runs nothing.
func (m *clusterMember) pause(t *testing.T) { t.Helper(); m.signal(t, syscall.SIGSTOP) }

// resume continues a paused process (SIGCONT).
func (m *clusterMember) resume(t *testing.T) { t.Helper(); m.signal(t, syscall.SIGCONT) }

// restart starts the member again on its addresses; it must not be
// running.
func (m *clusterMember) restart(t *testing.T) {
	t.Helper()
	if m.running() {
		t.Fatalf("member %s: restart while it runs", m.name)
	}
	if err := m.start(); err != nil {
		t.Fatal(err)
	}
}

// cleanup kills the member's process if it runs (continuing it first, in
// case it is paused).
func (m *clusterMember) cleanup() {
	r := m.current()
	if r == nil || !m.running() {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
	_ = r.cmd.Process.Kill()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
	}
}

// clusterView is the admin API's GET /api/cluster answer.
type clusterView struct {
	Self    string `json:"self"`
	Healthy bool   `json:"healthy"`
	Leaving bool   `json:"leaving"`
	Members []struct {
		ID        string               `json:"id"`
		Self      bool                 `json:"self"`
		Reachable bool                 `json:"reachable"`
		Error     string               `json:"error"`
		Stats     *engine.ClusterStats `json:"stats"`
	} `json:"members"`
	Forwarded map[string]uint64 `json:"forwarded"`
	Served    map[string]uint64 `json:"served"`
	Partition string            `json:"partition"`
	Owner     string            `json:"owner"`
}

// ids returns the members' IDs, sorted.
func (v clusterView) ids() []string {
	out := make([]string, len(v.Members))
	for i, mb := range v.Members {
		out[i] = mb.ID
	}
	slices.Sort(out)
	return out
}

// self returns this member's own counters.
func (v clusterView) self() engine.ClusterStats {
	for _, mb := range v.Members {
		if mb.Self && mb.Stats != nil {
			return *mb.Stats
		}
	}
	return engine.ClusterStats{}
}

var adminHTTP = &http.Client{Timeout: 5 * time.Second}

// view asks the member's GET /api/cluster (with ?partition= when
// partition is not empty).
func (m *clusterMember) view(partition string) (clusterView, error) {
	u := m.admin + "/api/cluster"
	if partition != "" {
		u += "?partition=" + url.QueryEscape(partition)
	}
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return clusterView{}, err
	}
	req.Header.Set("Authorization", "Bearer "+adminTestToken)
	res, err := adminHTTP.Do(req)
	if err != nil {
		return clusterView{}, err
	}
	defer res.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(res.Body); err != nil {
		return clusterView{}, err
	}
	if res.StatusCode != http.StatusOK {
		return clusterView{}, fmt.Errorf("GET %s: %s: %s", u, res.Status, b.String())
	}
	var v clusterView
	if err := json.Unmarshal(b.Bytes(), &v); err != nil {
		return clusterView{}, fmt.Errorf("GET %s: %w in %s", u, err, b.String())
	}
	return v, nil
}

// mustView is view failing t on error.
func (m *clusterMember) mustView(t *testing.T, partition string) clusterView {
	t.Helper()
	v, err := m.view(partition)
	if err != nil {
		t.Fatalf("member %s: %v", m.name, err)
	}
	return v
}

// waitUntil polls cond every 50ms until it holds or timeout passes; then
// it fails t with what and cond's last explanation.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitViews waits until each of ms sees exactly ms as the cluster's
// members, healthy, each reachable.
func (c *testCluster) waitViews(t *testing.T, ms ...*clusterMember) {
	t.Helper()
	want := make([]string, len(ms))
	names := make([]string, len(ms))
	for i, m := range ms {
		want[i], names[i] = m.base, m.name
	}
	slices.Sort(want)
	waitUntil(t, 20*time.Second, fmt.Sprintf("every member of %v sees exactly %v", names, names), func() (bool, string) {
		for _, m := range ms {
			v, err := m.view("")
			if err != nil {
				return false, fmt.Sprintf("member %s: %v", m.name, err)
			}
			if !v.Healthy || !slices.Equal(v.ids(), want) {
				return false, fmt.Sprintf("member %s: healthy %v, members %v, want %v", m.name, v.Healthy, v.ids(), want)
			}
			for _, mb := range v.Members {
				if !mb.Reachable {
					return false, fmt.Sprintf("member %s: %s unreachable: %s", m.name, mb.ID, mb.Error)
				}
			}
		}
		return true, ""
	})
}

// ownedPartition returns the first partition prefix+N that every running
// member's view (GET /api/cluster?partition=) gives to owner.
func (c *testCluster) ownedPartition(t *testing.T, owner *clusterMember, prefix string) string {
	t.Helper()
	for i := range 200 {
		p := fmt.Sprintf("%s%d", prefix, i)
		agree := true
		for _, m := range c.members {
			if !m.running() {
				continue
			}
			if v := m.mustView(t, p); v.Owner != owner.base {
				agree = false
				break
			}
		}
		if agree {
			return p
		}
	}
	t.Fatalf("no partition %sN among 200 is owned by member %s", prefix, owner.name)
	return ""
}

// connect opens a connection to the test's database.
func (c *testCluster) connect(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.pgURL)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	return conn
}

// table is the test schema's table name, quoted.
func (c *testCluster) table(name string) string { return pgx.Identifier{c.schema, name}.Sanitize() }

// query runs fn with a connection to the test's database.
func (c *testCluster) query(t *testing.T, fn func(ctx context.Context, conn *pgx.Conn) error) {
	t.Helper()
	conn := c.connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer conn.Close(ctx)
	if err := fn(ctx, conn); err != nil {
		t.Fatalf("PostgreSQL: %v", err)
	}
}

// installAudit installs the commit audit trigger (see the top of this
// file) on the members' sync_commits.
func (c *testCluster) installAudit(t *testing.T) {
	t.Helper()
	audit, fn := c.table("test_commit_audit"), pgx.Identifier{c.schema, "test_audit_commit"}.Sanitize()
	stmts := []string{
		`CREATE TABLE ` + audit + ` (partition text NOT NULL, seq bigint NOT NULL, committer text NOT NULL, owner text NOT NULL, generation bigint NOT NULL)`,
		`CREATE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ` + audit + ` (partition, seq, committer, owner, generation)
	SELECT NEW.partition, NEW.seq, current_setting('application_name'), p.owner, p.owner_generation
	FROM ` + c.table("sync_partitions") + ` p WHERE p.partition = NEW.partition;
	RETURN NEW;
END $$`,
		`CREATE TRIGGER test_audit_commit AFTER INSERT ON ` + c.table("sync_commits") + ` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
	}
	c.query(t, func(ctx context.Context, conn *pgx.Conn) error {
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
}

// ownerRow reads partition p's registry row: its owner, ownership
// generation and max commit seq (zeros when it has none).
func (c *testCluster) ownerRow(t *testing.T, p string) (owner string, gen, maxSeq int64) {
	t.Helper()
	c.query(t, func(ctx context.Context, conn *pgx.Conn) error {
		err := conn.QueryRow(ctx, `SELECT owner, owner_generation, max_commit_seq FROM `+c.table("sync_partitions")+` WHERE partition = $1`, p).
			Scan(&owner, &gen, &maxSeq)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return owner, gen, maxSeq
}

// loggedCommit is one commit of a partition's log, with its audit row.
type loggedCommit struct {
	seq                int64
	clientID, commitID string
	// committer is the member that inserted it; owner and generation the
	// registry row its transaction saw (committer "" when unaudited).
	committer, owner string
	generation       int64
}

// commitLog reads partition p's log in seq order, each commit with its
// audit row.
func (c *testCluster) commitLog(t *testing.T, p string) []loggedCommit {
	t.Helper()
	var out []loggedCommit
	c.query(t, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT c.seq, c.client_id, c.client_commit_id, coalesce(a.committer, ''), coalesce(a.owner, ''), coalesce(a.generation, 0)
FROM `+c.table("sync_commits")+` c LEFT JOIN `+c.table("test_commit_audit")+` a ON a.partition = c.partition AND a.seq = c.seq
WHERE c.partition = $1 ORDER BY c.seq`, p)
		if err != nil {
			return err
		}
		for rows.Next() {
			var lc loggedCommit
			if err := rows.Scan(&lc.seq, &lc.clientID, &lc.commitID, &lc.committer, &lc.owner, &lc.generation); err != nil {
				return err
			}
			out = append(out, lc)
		}
		return rows.Err()
	})
	return out
}

// checkLog checks partition p's log against the commits acknowledged for
// it: seqs dense from 1 to the registry's max commit seq, no
// clientCommitId twice, every acknowledged commit there at the seq its
// acknowledgement named, and every commit made by the member holding the
// partition's current ownership generation (the audit). It returns the
// log.
func (c *testCluster) checkLog(t *testing.T, p string, acks []pushAck) []loggedCommit {
	t.Helper()
	log := c.commitLog(t, p)
	_, _, maxSeq := c.ownerRow(t, p)
	if int64(len(log)) != maxSeq {
		t.Errorf("partition %s: %d commits in the log, max commit seq %d", p, len(log), maxSeq)
	}
	type key struct{ client, commit string }
	bySeq := map[key]int64{}
	dups, gaps, unaudited, stale := 0, 0, 0, 0
	for i, lc := range log {
		if lc.seq != int64(i+1) {
			if gaps++; gaps <= 5 {
				t.Errorf("partition %s: commit %d of the log has seq %d: seqs are not dense", p, i+1, lc.seq)
			}
		}
		k := key{lc.clientID, lc.commitID}
		if first, ok := bySeq[k]; ok {
			if dups++; dups <= 5 {
				t.Errorf("partition %s: clientCommitId %s of %s twice in the log: seqs %d and %d", p, lc.commitID, lc.clientID, first, lc.seq)
			}
			continue
		}
		bySeq[k] = lc.seq
		committer := c.byAuditName(lc.committer)
		switch {
		case lc.committer == "":
			if unaudited++; unaudited <= 5 {
				t.Errorf("partition %s: commit %d has no audit row", p, lc.seq)
			}
		case committer == nil || committer.base != lc.owner:
			if stale++; stale <= 5 {
				t.Errorf("partition %s: commit %d (%s) was made by %s while %s held generation %d: a commit under a stale generation",
					p, lc.seq, lc.commitID, lc.committer, lc.owner, lc.generation)
			}
		}
	}
	lost := 0
	for _, a := range acks {
		seq, ok := bySeq[key{a.clientID, a.commitID}]
		switch {
		case !ok:
			if lost++; lost <= 5 {
				t.Errorf("partition %s: acknowledged commit %s of %s (status %v, seq %d, via %s) is not in the log", p, a.commitID, a.clientID, a.status, a.seq, a.via.name)
			}
		case seq != a.seq:
			t.Errorf("partition %s: commit %s of %s acknowledged (status %v via %s) as seq %d, at seq %d in the log", p, a.commitID, a.clientID, a.status, a.via.name, a.seq, seq)
		}
	}
	t.Logf("partition %s: %d commits in the log, %d acknowledged; lost %d, duplicated %d, seq gaps %d, unaudited %d, under a stale generation %d",
		p, len(log), len(acks), lost, dups, gaps, unaudited, stale)
	return log
}

// fileTail returns the last n lines of the file at path.
func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// firstLineWriter writes everything to w and sends the first line on
// line.
type firstLineWriter struct {
	w    *os.File
	line chan string
	buf  []byte
	sent bool
}

func (f *firstLineWriter) Write(p []byte) (int, error) {
	if !f.sent {
		f.buf = append(f.buf, p...)
		if i := bytes.IndexByte(f.buf, '\n'); i >= 0 {
			f.line <- string(f.buf[:i])
			f.sent, f.buf = true, nil
		}
	}
	return f.w.Write(p)
}

// The clients.

// answer is how a request ended, as a client sees it.
type answer int

const (
	answered   answer = iota // HTTP 200, decoded, no ERROR frame
	refused                  // connection refused: the member is down
	noAnswer                 // no HTTP answer: connection reset or closed, timeout
	cutAnswer                // HTTP 200 whose body broke off (connection or stream reset)
	httpError                // an HTTP answer other than 200 (the protocol's JSON error)
	errorFrame               // HTTP 200 with an ERROR frame
	badAnswer                // HTTP 200 whose body arrived whole but is not a valid answer
	numAnswers
)

var answerNames = [numAnswers]string{"answered", "refused", "noAnswer", "cutAnswer", "httpError", "errorFrame", "badAnswer"}

// transportFailure reports whether a ends without an answer a client can
// act on, so it sends the request again (to another member).
func (a answer) transportFailure() bool { return a == refused || a == noAnswer || a == cutAnswer }

func (a answer) String() string { return answerNames[a] }

// answerRecorder records whether the last request got an HTTP answer, and
// its status.
type answerRecorder struct {
	rt     http.RoundTripper
	got    bool
	status int
}

func (r *answerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got, r.status = false, 0
	res, err := r.rt.RoundTrip(req)
	if err == nil {
		r.got, r.status = true, res.StatusCode
	}
	return res, err
}

// loadTransport is the connection pool the load's clients share.
func loadTransport() *http.Transport {
	return &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}
}

// clusterClient is one SSP2 client (clientId, actor, partition) sending
// each request through the member the caller picks. Not safe for
// concurrent use.
type clusterClient struct {
	clientID, partition string
	rec                 *answerRecorder
	c                   *httpsync.Client
}

func newClusterClient(tr http.RoundTripper, actor, clientID, partition string) *clusterClient {
	if tr == nil {
		tr = http.DefaultTransport
	}
	rec := &answerRecorder{rt: tr}
	return &clusterClient{clientID: clientID, partition: partition, rec: rec,
		c: &httpsync.Client{HTTP: &http.Client{Transport: rec}, ClientID: clientID,
			Header: http.Header{"X-Actor": {actor}, "X-Partition": {partition}}}}
}

// classify returns how the last request ended, err being its call's
// result.
func (cl *clusterClient) classify(err error) answer {
	switch {
	case err == nil:
		return answered
	case !cl.rec.got && errors.Is(err, syscall.ECONNREFUSED):
		return refused
	case !cl.rec.got:
		return noAnswer
	case cl.rec.status != http.StatusOK:
		return httpError
	case strings.HasPrefix(err.Error(), "httpsync: read response"):
		return cutAnswer
	case strings.HasPrefix(err.Error(), "httpsync: decode response"), syncerr.As(err) == nil:
		return badAnswer
	default:
		return errorFrame
	}
}

// push sends commit through m (acquiring the partition's epoch first if
// the client has none) and returns its PUSH_RESULT.
func (cl *clusterClient) push(ctx context.Context, m *clusterMember, commit *ssp2.PushCommit) (*ssp2.PushResult, answer, error) {
	cl.c.URL = m.base + "/sync"
	rs, err := cl.c.Push(ctx, commit)
	if err == nil && (len(rs) != 1 || rs[0].ClientCommitID != commit.ClientCommitID) {
		return nil, badAnswer, fmt.Errorf("push of %s answered %d PUSH_RESULTs: %+v", commit.ClientCommitID, len(rs), rs)
	}
	if a := cl.classify(err); a != answered {
		return nil, a, err
	}
	return rs[0], answered, nil
}

// pull pulls list through m from scratch (a bootstrap of the list).
func (cl *clusterClient) pull(ctx context.Context, m *clusterMember, list string) (*ssp2.Message, answer, error) {
	cl.c.URL = m.base + "/sync"
	msg, err := cl.c.Pull(ctx, ssp2.PullHeader{LimitCommits: 50, LimitSnapshotRows: 200, MaxSnapshotPages: 1, Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "todos", Table: "todos", Scopes: map[string][]string{"list_id": {list}}, Cursor: -1})
	return msg, cl.classify(err), err
}

// todoCommit is a commit upserting todo id in list.
func todoCommit(commitID, id, list string) *ssp2.PushCommit {
	row, err := todoCodec.AppendSparse(nil, ssp2.Row{id, list, "title " + id, false, int64(1), int64(2)}, nil, 0)
	if err != nil {
		panic(err) // a demo todo of strings, a bool and ints always encodes
	}
	return &ssp2.PushCommit{ClientCommitID: commitID, Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: row}}}
}

// retryableErr reports whether a client retries after err: a protocol
// error marked retryable.
func retryableErr(err error) bool {
	e := syncerr.As(err)
	return e != nil && e.Spec().Retryable
}

// The load.

// pushAck is one acknowledged push.
type pushAck struct {
	writer             int
	partition          string
	clientID, commitID string
	status             ssp2.CommitStatus
	seq                int64
	via                *clusterMember
	// sent is when the request that was answered was sent; at when the
	// answer came.
	sent, at time.Time
}

// loadConfig configures a pushLoad.
type loadConfig struct {
	// writers is the number of concurrent writers; writer w writes
	// partitions[w%len(partitions)], each commit a new todo in its own
	// list.
	writers    int
	partitions []string
	// targets returns the members writer w sends to, in order of
	// preference; it is called for every attempt (a load balancer's
	// healthy set may change).
	targets func(w int) []*clusterMember
	// roundRobin starts each commit at the next target (a round-robin
	// load balancer) instead of the writer's current one.
	roundRobin bool
	// pullEvery makes a writer pull its list after every pullEvery pushes
	// (0: never).
	pullEvery int
	// timeout bounds each request (default 20s).
	timeout time.Duration
	// commitTimeout bounds the attempts at one commit (default 30s).
	commitTimeout time.Duration
}

// pushLoad runs writers pushing commits through the members, as clients
// do: an attempt refused or without an answer moves the writer to its
// next target; an answer with a retryable error is retried on the same
// target after 100ms; each retry re-uses the commit's clientCommitId.
type pushLoad struct {
	cfg  loadConfig
	stop chan struct{}
	kill context.CancelFunc // cancels every request (cleanup)
	wg   sync.WaitGroup

	mu       sync.Mutex
	acks     []pushAck
	pulls    int
	counts   [numAnswers]int
	retryErr map[string]int // retryable errors answered, by code and member
	failures []string       // answers no client accepts: non-retryable errors, rejected commits
	gaveUp   int            // commits not acknowledged within commitTimeout
	// noAnswers are the first errors of requests that got no answer or a
	// cut one (refusals aside).
	noAnswers []string
}

// noteNoAnswer records err of a request through m that got no answer or a
// cut one; l.mu is held.
func (l *pushLoad) noteNoAnswer(what string, m *clusterMember, a answer, err error) {
	if (a == noAnswer || a == cutAnswer) && len(l.noAnswers) < 5 {
		l.noAnswers = append(l.noAnswers, fmt.Sprintf("%s via %s at %s: %s: %v", what, m.name, time.Now().Format("15:04:05.000"), a, err))
	}
}

// startLoad starts the writers; they stop at pushLoad.finish (or at the
// test's cleanup).
func startLoad(t *testing.T, cfg loadConfig) *pushLoad {
	t.Helper()
	if cfg.timeout == 0 {
		cfg.timeout = 20 * time.Second
	}
	if cfg.commitTimeout == 0 {
		cfg.commitTimeout = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &pushLoad{cfg: cfg, stop: make(chan struct{}), kill: cancel, retryErr: map[string]int{}}
	tr := loadTransport()
	t.Cleanup(func() {
		l.kill()
		l.finish()
		tr.CloseIdleConnections()
	})
	for w := range cfg.writers {
		p := cfg.partitions[w%len(cfg.partitions)]
		cl := newClusterClient(tr, "writer", fmt.Sprintf("w%02d", w), p)
		l.wg.Add(1)
		go l.write(ctx, w, cl)
	}
	return l
}

// finish stops the writers after the commit each is working on and waits
// for them. Calling it again does nothing.
func (l *pushLoad) finish() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *pushLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *pushLoad) write(ctx context.Context, w int, cl *clusterClient) {
	defer l.wg.Done()
	list := fmt.Sprintf("list-%s", cl.clientID)
	shift := 0
	for n := 0; !l.stopped() && ctx.Err() == nil; n++ {
		id := fmt.Sprintf("%s-%05d", cl.clientID, n)
		commit := todoCommit("c-"+id, id, list)
		if l.cfg.roundRobin {
			shift = n
		}
		deadline := time.Now().Add(l.cfg.commitTimeout)
		for acked := false; !acked; {
			if ctx.Err() != nil {
				return
			}
			if time.Now().After(deadline) {
				l.mu.Lock()
				l.gaveUp++
				l.mu.Unlock()
				break
			}
			targets := l.cfg.targets(w)
			if len(targets) == 0 {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			m := targets[shift%len(targets)]
			rctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
			sent := time.Now()
			res, a, err := cl.push(rctx, m, commit)
			cancel()
			l.mu.Lock()
			l.counts[a]++
			switch {
			case a == answered && (res.Status == ssp2.CommitApplied || res.Status == ssp2.CommitCached) && res.CommitSeq != nil:
				l.acks = append(l.acks, pushAck{writer: w, partition: cl.partition, clientID: cl.clientID, commitID: commit.ClientCommitID,
					status: res.Status, seq: *res.CommitSeq, via: m, sent: sent, at: time.Now()})
				acked = true
			case a == answered:
				l.failures = append(l.failures, fmt.Sprintf("%s via %s: PUSH_RESULT %+v", commit.ClientCommitID, m.name, res))
				acked = true // a client drops a rejected commit
			case a.transportFailure():
				l.noteNoAnswer(commit.ClientCommitID, m, a, err)
				shift++ // the next member
			case retryableErr(err):
				l.retryErr[fmt.Sprintf("%s via %s (%s)", syncerr.CodeOf(err), m.name, a)]++
			default:
				l.failures = append(l.failures, fmt.Sprintf("%s via %s: %s: %v", commit.ClientCommitID, m.name, a, err))
				acked = true // not retried: a client gives up on it
			}
			l.mu.Unlock()
			if !acked && !a.transportFailure() {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if l.cfg.pullEvery > 0 && (n+1)%l.cfg.pullEvery == 0 {
			l.pullOnce(ctx, w, cl, list, shift)
		}
	}
}

// pullOnce pulls the writer's list through its current target, moving on
// when a member is down, until one answers.
func (l *pushLoad) pullOnce(ctx context.Context, w int, cl *clusterClient, list string, shift int) {
	for try := 0; try < 20 && ctx.Err() == nil; try++ {
		targets := l.cfg.targets(w)
		if len(targets) == 0 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		m := targets[(shift+try)%len(targets)]
		rctx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
		_, a, err := cl.pull(rctx, m, list)
		cancel()
		l.mu.Lock()
		l.counts[a]++
		l.pulls++
		switch {
		case a == answered:
		case a.transportFailure():
			l.noteNoAnswer("pull of "+list, m, a, err)
		case retryableErr(err):
			l.retryErr[fmt.Sprintf("pull: %s via %s (%s)", syncerr.CodeOf(err), m.name, a)]++
		default:
			l.failures = append(l.failures, fmt.Sprintf("pull of %s via %s: %s: %v", list, m.name, a, err))
		}
		l.mu.Unlock()
		if a == answered || !(a.transportFailure() || retryableErr(err)) {
			return
		}
		if !a.transportFailure() {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// snapshot returns copies of the acknowledgements so far.
func (l *pushLoad) snapshot() []pushAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acks)
}

// acksFor returns the acknowledgements of partition p.
func acksFor(acks []pushAck, p string) []pushAck {
	var out []pushAck
	for _, a := range acks {
		if a.partition == p {
			out = append(out, a)
		}
	}
	return out
}

// waitAcks waits until at least n acknowledgements satisfy match.
func (l *pushLoad) waitAcks(t *testing.T, timeout time.Duration, what string, n int, match func(pushAck) bool) {
	t.Helper()
	waitUntil(t, timeout, what, func() (bool, string) {
		got := 0
		for _, a := range l.snapshot() {
			if match(a) {
				got++
			}
		}
		return got >= n, fmt.Sprintf("%d of %d acknowledgements; %s", got, n, l.summary())
	})
}

// summary describes the load's counters.
func (l *pushLoad) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d commits acknowledged, %d pulls;", len(l.acks), l.pulls)
	for a, n := range l.counts {
		fmt.Fprintf(&b, " %s %d", answer(a), n)
	}
	fmt.Fprintf(&b, "; retryable errors %v; failures %d; gave up %d", l.retryErr, len(l.failures), l.gaveUp)
	if len(l.noAnswers) > 0 {
		fmt.Fprintf(&b, "; requests without an answer: %q", l.noAnswers)
	}
	return b.String()
}
