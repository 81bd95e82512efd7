package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
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

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
)

// Edges of cluster mode with real processes (docs/cluster.md, "Failure
// behaviour"): an owner that stops answering (SIGSTOP) without leaving
// the membership, and a member started with another cluster secret.

// timedPush is one push through a member and how it ended.
type timedPush struct {
	took   time.Duration
	ans    answer
	status int // HTTP status when ans is httpError
	res    *ssp2.PushResult
	err    error
}

func (p timedPush) String() string {
	switch {
	case p.ans == answered:
		return fmt.Sprintf("answered %s after %v", commitStatusName(p.res.Status), p.took.Round(10*time.Millisecond))
	case p.ans == httpError:
		return fmt.Sprintf("HTTP %d %s after %v: %v", p.status, syncerr.CodeOf(p.err), p.took.Round(10*time.Millisecond), p.err)
	default:
		return fmt.Sprintf("%s after %v: %v", p.ans, p.took.Round(10*time.Millisecond), p.err)
	}
}

// commitStatusName names a PUSH_RESULT status.
func commitStatusName(s ssp2.CommitStatus) string {
	switch s {
	case ssp2.CommitApplied:
		return "applied"
	case ssp2.CommitCached:
		return "cached"
	case ssp2.CommitRejected:
		return "rejected"
	}
	return fmt.Sprintf("status %d", s)
}

// moving reports whether the push was answered 503 sync.internal_error
// with details.reason partition_moving (retryLater).
func (p timedPush) moving() bool {
	e := syncerr.As(p.err)
	if p.ans != httpError || p.status != http.StatusServiceUnavailable || e == nil || e.Code != syncerr.InternalError {
		return false
	}
	var d struct {
		Reason string `json:"reason"`
	}
	return json.Unmarshal(e.Details, &d) == nil && d.Reason == "partition_moving" && e.Spec().RecommendedAction == "retryLater"
}

// pushTimed pushes commit through m (bounded by limit) and measures it.
func pushTimed(cl *clusterClient, m *clusterMember, commit *ssp2.PushCommit, limit time.Duration) timedPush {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	res, a, err := cl.push(ctx, m, commit)
	return timedPush{took: time.Since(start), ans: a, status: cl.rec.status, res: res, err: err}
}

// An owner frozen (SIGSTOP) while etcd still lists it (a lease of 30 s):
// a push for its partition through another member gets a bounded wait —
// 503 partition_moving (retryLater) within the move timeout plus the
// unresponsive timeout, not a hang for as long as the owner is frozen —
// and a second one is refused as quickly; once the owner continues, the
// push is applied.
func TestClusterFrozenOwnerStillListed(t *testing.T) {
	c := startCluster(t, clusterOptions{leaseTTL: 30 * time.Second})
	a, b := c.members[0], c.members[1]
	p := c.ownedPartition(t, b, "frozen-")
	cl := newClusterClient(nil, "ada", "frozen-client", p)
	if r := pushTimed(cl, a, todoCommit("frozen-0", "frozen-0", "L"), 10*time.Second); r.ans != answered || r.res.Status != ssp2.CommitApplied {
		t.Fatalf("push through %s before the freeze: %s", a.name, r)
	}

	b.pause(t)
	frozenAt := time.Now()
	first := pushTimed(cl, a, todoCommit("frozen-1", "frozen-1", "L"), 45*time.Second)
	second := pushTimed(cl, a, todoCommit("frozen-2", "frozen-2", "L"), 45*time.Second)
	frozenFor := time.Since(frozenAt)
	b.resume(t)
	third := pushTimed(cl, a, todoCommit("frozen-1", "frozen-1", "L"), 20*time.Second)
	t.Logf("owner %s frozen for %v (etcd still lists it): first push through %s: %s; second: %s; after SIGCONT, the first again: %s",
		b.name, frozenFor.Round(10*time.Millisecond), a.name, first, second, third)

	for _, r := range []timedPush{first, second} {
		if !r.moving() {
			t.Errorf("a push for the frozen owner's partition: %s, want 503 sync.internal_error partition_moving", r)
		}
		if r.took > 10*time.Second {
			t.Errorf("a push for the frozen owner's partition waited %v, want at most 10s (move timeout 5s + unresponsive timeout 2s, with margin)", r.took)
		}
	}
	if third.ans != answered || (third.res.Status != ssp2.CommitApplied && third.res.Status != ssp2.CommitCached) {
		t.Errorf("the push again after SIGCONT: %s, want applied (or cached)", third)
	}
}

// An owner frozen for less than its lease makes a push wait until it
// continues (it is not declared gone); one frozen past its lease loses
// its partitions and the push is applied by the new owner about a lease
// after the freeze.
func TestClusterFrozenOwnerWithinAndPastLease(t *testing.T) {
	c := startCluster(t, clusterOptions{leaseTTL: 2 * time.Second})
	a, b := c.members[0], c.members[1]
	p := c.ownedPartition(t, b, "frozen-")
	cl := newClusterClient(nil, "ada", "frozen-client", p)
	if r := pushTimed(cl, a, todoCommit("frozen-0", "frozen-0", "L"), 10*time.Second); r.ans != answered || r.res.Status != ssp2.CommitApplied {
		t.Fatalf("push through %s before the freeze: %s", a.name, r)
	}

	// Frozen for 1.5 s (within the 2 s lease): the stimulus is the time.
	b.pause(t)
	cont := time.AfterFunc(1500*time.Millisecond, func() { _ = b.current().cmd.Process.Signal(syscall.SIGCONT) })
	short := pushTimed(cl, a, todoCommit("frozen-1", "frozen-1", "L"), 30*time.Second)
	cont.Stop()
	c.waitViews(t, c.members...)

	// Frozen past the lease: B's partitions move.
	b.pause(t)
	long := pushTimed(cl, a, todoCommit("frozen-2", "frozen-2", "L"), 30*time.Second)
	b.resume(t)
	t.Logf("owner %s frozen 1.5s (lease 2s): push through %s %s; frozen past the lease: %s", b.name, a.name, short, long)

	if short.ans != answered || short.res.Status != ssp2.CommitApplied {
		t.Errorf("push while the owner is frozen 1.5s: %s, want applied", short)
	} else if short.took > 5*time.Second {
		t.Errorf("push while the owner is frozen 1.5s took %v, want about 1.5s", short.took)
	}
	if long.ans != answered || long.res.Status != ssp2.CommitApplied {
		t.Errorf("push while the owner is frozen past its lease: %s, want applied by the new owner", long)
	} else if long.took > 8*time.Second {
		t.Errorf("push while the owner is frozen past its lease took %v, want about the lease (2s) plus the claim", long.took)
	}
	c.waitViews(t, c.members...)
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// etcdWatch watches the keys under prefix through etcd's JSON gateway
// (POST /v3/watch) until stop is called, which returns every key a PUT or
// DELETE event named.
func etcdWatch(t *testing.T, endpoint, prefix string) (stop func() []string) {
	t.Helper()
	end := []byte(prefix)
	end[len(end)-1]++
	body, _ := json.Marshal(map[string]any{"create_request": map[string]any{
		"key": base64.StdEncoding.EncodeToString([]byte(prefix)), "range_end": base64.StdEncoding.EncodeToString(end)}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/v3/watch", bytes.NewReader(body))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("etcd watch: %v", err)
	}
	var (
		mu      sync.Mutex
		keys    []string
		created = make(chan struct{})
		done    = make(chan struct{})
	)
	go func() { // owned by stop: ends when the request is cancelled
		defer close(done)
		defer res.Body.Close()
		dec := json.NewDecoder(res.Body)
		first := true
		for {
			var m struct {
				Result struct {
					Created bool `json:"created"`
					Events  []struct {
						Kv struct {
							Key string `json:"key"`
						} `json:"kv"`
					} `json:"events"`
				} `json:"result"`
			}
			if err := dec.Decode(&m); err != nil {
				if first {
					close(created)
				}
				return
			}
			if first && m.Result.Created {
				first = false
				close(created)
			}
			mu.Lock()
			for _, ev := range m.Result.Events {
				k, _ := base64.StdEncoding.DecodeString(ev.Kv.Key)
				keys = append(keys, string(k))
			}
			mu.Unlock()
		}
	}()
	<-created
	return func() []string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return keys
	}
}

// A member started with another --cluster-secret, while two members serve
// a write load, checks its secret against them before registering: it
// exits 1 naming the reason, is never registered in etcd (a watch of the
// members' keys sees no event of it), owns no partition (no
// sync_partitions.owner names it) and no client sees a 401. Started again
// with the cluster's secret, the same member joins.
func TestClusterWrongSecretRefusedAtStart(t *testing.T) {
	c := startCluster(t, clusterOptions{members: 2, leaseTTL: 2 * time.Second})
	var parts []string
	for i := range 12 {
		parts = append(parts, fmt.Sprintf("sec-%d", i))
	}
	serving := slices.Clone(c.members) // (c.members grows below)
	load := startLoad(t, loadConfig{writers: 12, partitions: parts, timeout: 10 * time.Second,
		targets: func(w int) []*clusterMember { return rotate(serving, w) }})
	load.waitAcks(t, 20*time.Second, "pushes acknowledged before the third member starts", 50, func(pushAck) bool { return true })

	addr, adminAddr := freeAddr(t), freeAddr(t) // the member's ID is known before it runs
	wrong := filepath.Join(c.dir, "other.secret")
	if err := os.WriteFile(wrong, []byte("another cluster secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := &clusterMember{c: c, name: "C", logPath: filepath.Join(c.dir, "C.log"), secret: wrong,
		addr: addr, adminAddr: adminAddr, base: "http://" + addr, admin: "http://" + adminAddr}
	c.members = append(c.members, bad)

	stopWatch := etcdWatch(t, c.etcd.Endpoint, "/synclane/proctest/members/")
	startedAt := time.Now()
	if err := bad.start(); err == nil {
		t.Fatalf("member %s with another secret started", bad.name)
	}
	exit := bad.wait(t, 30*time.Second)
	took := time.Since(startedAt)
	var ee *exec.ExitError
	if !errors.As(exit, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("member %s with another secret: exit %v, want status 1", bad.name, exit)
	}
	logged, _ := os.ReadFile(bad.logPath)
	named := false
	for _, m := range c.members[:2] {
		named = named || strings.Contains(string(logged), `synclane serve: cluster "proctest": refused to join the cluster: the cluster secret differs from member `+m.base+"'s")
	}
	if !named || strings.Contains(string(logged), "joined the cluster") {
		t.Fatalf("member %s's stderr does not name the reason, or says it joined:\n%s", bad.name, fileTail(bad.logPath, 20))
	}
	// More pushes after the refusal; then the member's trace in etcd and
	// in the partitions' registry.
	refusedAt := time.Now()
	load.waitAcks(t, 20*time.Second, "pushes acknowledged after the refusal", 50, func(a pushAck) bool { return a.sent.After(refusedAt) })
	for _, k := range stopWatch() {
		if strings.Contains(k, url.PathEscape(bad.base)) {
			t.Fatalf("etcd saw the refused member's key %s", k)
		}
	}
	var owned, rows int
	c.query(t, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE owner = $1), count(*) FROM `+c.table("sync_partitions"), bad.base).Scan(&owned, &rows)
	})
	if owned != 0 || rows < len(parts) {
		t.Fatalf("%d of %d partition rows name the refused member as owner, want 0 of at least %d", owned, rows, len(parts))
	}
	c.waitViews(t, c.members[:2]...)

	// Started with the cluster's secret, it joins.
	bad.secret = ""
	bad.restart(t)
	c.waitViews(t, c.members...)
	load.finish()

	t.Logf("member %s with another secret refused after %v; %s", bad.name, took.Round(time.Millisecond), load.summary())
	load.mu.Lock()
	defer load.mu.Unlock()
	for k := range load.retryErr {
		if strings.Contains(k, string(syncerr.AuthRequired)) {
			t.Errorf("a client got %s: %v", syncerr.AuthRequired, load.retryErr)
		}
	}
	if len(load.failures) > 0 || load.gaveUp > 0 {
		t.Errorf("failed pushes: %v, %d gave up", load.failures[:min(len(load.failures), 10)], load.gaveUp)
	}
}

// --cluster-unresponsive-timeout defaults to 2s, must be positive, and
// needs --cluster-etcd like every cluster flag.
func TestClusterUnresponsiveTimeoutFlag(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	base := []string{"--cluster-etcd", "http://127.0.0.1:2379", "--cluster-secret", secret}
	for _, tc := range []struct {
		name string
		args []string
		want time.Duration
		err  string
	}{
		{"default", base, 2 * time.Second, ""},
		{"set", append(base[:len(base):len(base)], "--cluster-unresponsive-timeout", "500ms"), 500 * time.Millisecond, ""},
		{"zero", append(base[:len(base):len(base)], "--cluster-unresponsive-timeout", "0s"), 0, "--cluster-unresponsive-timeout must be positive"},
		{"without etcd", []string{"--cluster-unresponsive-timeout", "1s"}, 0, "--cluster-unresponsive-timeout needs --cluster-etcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c clusterConfig
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			clusterFlags(fs, &c)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			given := map[string]bool{}
			fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
			err := c.validate(given, "postgres://x")
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("validate: %v, want %q", err, tc.err)
			case tc.err == "" && c.unresponsiveTO != tc.want:
				t.Fatalf("unresponsive timeout %v, want %v", c.unresponsiveTO, tc.want)
			}
		})
	}
}
