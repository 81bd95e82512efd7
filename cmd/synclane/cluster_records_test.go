package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/ssp2"
)

// Client records across hand-overs (docs/cluster.md, "Client records"):
// clients doing push-and-pull rounds keep, on the partition's final owner,
// the record of their last answered round (the cursor watermark and every
// subscription's cursor) through a kill -9 and rejoin of an owner and a
// SIGSTOP past the lease and SIGCONT of another.

// roundSub is a subscription as the client record stores it (the fields
// the test compares).
type roundSub struct {
	ID      string `json:"id"`
	Cursor  int64  `json:"cursor"`
	Pending bool   `json:"pending,omitempty"`
}

// wantRecord is what a client's record must say after its last answered
// round.
type wantRecord struct {
	subs      []roundSub
	watermark int64
	round     int
	via       string
	at        time.Time
}

// roundClient is one client doing rounds: each pushes a new todo into its
// own list and pulls its list incrementally ("todos") plus a subscription
// whose id changes every round (so the stored subscription list changes
// too). Not safe for concurrent use; want is read under mu.
type roundClient struct {
	cl     *clusterClient
	list   string
	cursor int64 // the "todos" subscription's cursor
	n      int   // rounds answered

	mu   sync.Mutex
	want wantRecord
}

func newRoundClient(id, partition string) *roundClient {
	return &roundClient{cl: newClusterClient(nil, "rec", id, partition), list: "list-" + id, cursor: -1, want: wantRecord{watermark: -1}}
}

// round runs the client's next round through m. It returns how the
// request ended; on answered the expectation has moved to this round.
func (rc *roundClient) round(ctx context.Context, m *clusterMember) (answer, error) {
	cl := rc.cl
	cl.c.URL = m.base + "/sync"
	if cl.c.Epoch == "" {
		if err := cl.c.Handshake(ctx); err != nil {
			return cl.classify(err), err
		}
	}
	id := fmt.Sprintf("%s-%04d", cl.clientID, rc.n)
	extra := fmt.Sprintf("x%d", rc.n%3)
	subs := []*ssp2.Subscription{
		{ID: "todos", Table: "todos", Scopes: map[string][]string{"list_id": {rc.list}}, Cursor: rc.cursor},
		{ID: extra, Table: "todos", Scopes: map[string][]string{"list_id": {"none-" + extra}}, Cursor: -1},
	}
	frames := []ssp2.Frame{todoCommit("c-"+id, id, rc.list),
		&ssp2.PullHeader{LimitCommits: 200, LimitSnapshotRows: 500, MaxSnapshotPages: 4, Accept: ssp2.AcceptInlineRows}}
	for _, s := range subs {
		frames = append(frames, s)
	}
	msg, err := cl.c.Do(ctx, frames...)
	if a := cl.classify(err); a != answered {
		return a, err
	}
	var pushed bool
	next := map[string]int64{}
	active := map[string]bool{}
	pending := map[string]bool{}
	var cur *ssp2.SubStart
	for _, f := range msg.Frames {
		switch x := f.(type) {
		case *ssp2.PushResult:
			pushed = x.Status == ssp2.CommitApplied || x.Status == ssp2.CommitCached
		case *ssp2.SubStart:
			cur = x
		case *ssp2.SubEnd:
			if cur != nil {
				next[cur.ID] = x.NextCursor
				active[cur.ID] = cur.Status == ssp2.SubActive
				pending[cur.ID] = cur.Status != ssp2.SubActive || x.BootstrapState != nil
			}
		}
	}
	if !pushed || len(next) != len(subs) || pending["todos"] {
		return badAnswer, fmt.Errorf("round %s: pushed %v, sections %v (pending %v) of %d subscriptions", id, pushed, next, pending, len(subs))
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	w := wantRecord{watermark: rc.want.watermark, round: rc.n, via: m.name, at: time.Now()}
	anyActive := false
	for _, s := range subs {
		w.subs = append(w.subs, roundSub{ID: s.ID, Cursor: next[s.ID], Pending: pending[s.ID]})
		if active[s.ID] && (!anyActive || next[s.ID] < w.watermark) {
			w.watermark, anyActive = next[s.ID], true
		}
	}
	rc.want = w
	rc.cursor = next["todos"]
	rc.n++
	return answered, nil
}

// expected returns the record the client's last answered round implies.
func (rc *roundClient) expected() wantRecord {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.want
}

// rounds answered so far.
func (rc *roundClient) answered() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.n
}

// roundRunner runs clients' rounds until stopped: each client sends
// through the members targets returns, moving to the next one when a
// member does not answer and retrying a round that got a retryable error.
// A client waits pace between its rounds and stops for good once halt
// reports true for it (checked before each round).
type roundRunner struct {
	stop chan struct{}
	wg   sync.WaitGroup
	pace atomic.Int64 // time.Duration between a client's rounds

	mu       sync.Mutex
	failures []string
}

func runRounds(t *testing.T, clients []*roundClient, targets func() []*clusterMember, halt func(*roundClient) bool) *roundRunner {
	r := &roundRunner{stop: make(chan struct{})}
	r.pace.Store(int64(10 * time.Millisecond)) // the machine is shared
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); r.finish() })
	for i, rc := range clients {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			shift := i
			for {
				select {
				case <-r.stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				if halt != nil && halt(rc) {
					return
				}
				ms := targets()
				if len(ms) == 0 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				m := ms[shift%len(ms)]
				rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
				a, err := rc.round(rctx, m)
				rcancel()
				switch {
				case a == answered:
					time.Sleep(time.Duration(r.pace.Load()))
				case a.transportFailure():
					shift++
				case retryableErr(err):
					shift++
					time.Sleep(50 * time.Millisecond)
				default:
					r.mu.Lock()
					r.failures = append(r.failures, fmt.Sprintf("%s via %s: %s: %v", rc.cl.clientID, m.name, a, err))
					r.mu.Unlock()
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	return r
}

// claimWatch follows the ownership of partitions in the database (every
// 10ms) and tells when member m has claimed each at a generation above
// the one given for it.
type claimWatch struct {
	mu      sync.Mutex
	claimed map[string]bool
	done    chan struct{}
	err     error
}

func (c *testCluster) watchClaims(t *testing.T, m *clusterMember, above map[string]int64) *claimWatch {
	t.Helper()
	w := &claimWatch{claimed: map[string]bool{}, done: make(chan struct{})}
	conn := c.connect(t)
	go func() { // ends when every partition is claimed or after 30s
		defer close(w.done)
		defer conn.Close(context.Background())
		deadline := time.Now().Add(30 * time.Second)
		for {
			left := 0
			for p, gen := range above {
				var owner string
				var g int64
				if err := conn.QueryRow(context.Background(), `SELECT owner, owner_generation FROM `+c.table("sync_partitions")+` WHERE partition = $1`, p).Scan(&owner, &g); err != nil {
					w.err = err
					return
				}
				w.mu.Lock()
				if owner == m.base && g > gen {
					w.claimed[p] = true
				}
				if !w.claimed[p] {
					left++
				}
				w.mu.Unlock()
			}
			if left == 0 {
				return
			}
			if time.Now().After(deadline) {
				w.err = fmt.Errorf("%d partitions not claimed by %s within 30s", left, m.name)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return w
}

// has reports whether p has been claimed.
func (w *claimWatch) has(p string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.claimed[p]
}

// wait waits until every partition has been claimed; it fails t if not.
func (w *claimWatch) wait(t *testing.T, what string) {
	t.Helper()
	<-w.done
	if w.err != nil {
		t.Fatalf("%s: %v", what, w.err)
	}
}

// finish stops the rounds after the one each client is in and waits.
func (r *roundRunner) finish() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.wg.Wait()
}

// storedClients reads the client records of partitions from the members'
// database: subscriptions and cursor by client id.
func (c *testCluster) storedClients(t *testing.T, partitions []string) map[string]struct {
	subs   []roundSub
	cursor int64
	raw    string
} {
	t.Helper()
	out := map[string]struct {
		subs   []roundSub
		cursor int64
		raw    string
	}{}
	c.query(t, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT client_id, coalesce(subscriptions, ''), cursor FROM `+c.table("sync_clients")+` WHERE partition = ANY($1)`, partitions)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id, raw string
			var cursor int64
			if err := rows.Scan(&id, &raw, &cursor); err != nil {
				return err
			}
			var subs []roundSub
			_ = json.Unmarshal([]byte(raw), &subs)
			out[id] = struct {
				subs   []roundSub
				cursor int64
				raw    string
			}{subs, cursor, raw}
		}
		return rows.Err()
	})
	return out
}

// checkRecords waits (up to 10s: the members write back buffered records
// every second) until every client's stored record is the one its last
// answered round implies, and fails t naming the others after that. It
// returns how many were not current.
func (c *testCluster) checkRecords(t *testing.T, what string, partitions []string, clients []*roundClient) int {
	t.Helper()
	var stale []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		stored := c.storedClients(t, partitions)
		stale = stale[:0]
		for _, rc := range clients {
			w := rc.expected()
			got, ok := stored[rc.cl.clientID]
			switch {
			case !ok:
				stale = append(stale, fmt.Sprintf("%s: no record (last round %d via %s)", rc.cl.clientID, w.round, w.via))
			case got.cursor != w.watermark || !slices.Equal(got.subs, w.subs):
				stale = append(stale, fmt.Sprintf("%s: stored cursor %d subscriptions %s; its last round (%d, via %s at %s) left cursor %d subscriptions %+v",
					rc.cl.clientID, got.cursor, got.raw, w.round, w.via, w.at.Format("15:04:05.000"), w.watermark, w.subs))
			}
		}
		if len(stale) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s: %d of %d client records current, %d not", what, len(clients)-len(stale), len(clients), len(stale))
	for _, s := range stale {
		t.Errorf("%s: %s", what, s)
	}
	return len(stale)
}

// TestClusterClientRecordsSurviveHandOvers: 12 clients on 4 partitions (2
// owned by member C, 2 by member A) doing push-and-pull rounds.
//
//  1. C is killed (kill -9) while they run, its partitions move to the
//     survivors, C is started again and takes them back while the rounds
//     go on (the interim owner holds the records of their last rounds
//     when C claims); the rounds stop as C's claims land. Every client's
//     record is then the one of its last answered round.
//  2. The rounds start again. The clients of A's partitions stop, their
//     last rounds served (and their records buffered) by A; A is paused
//     (SIGSTOP) past its lease; its partitions move; half of those clients
//     do rounds on the interim owner; A is continued (SIGCONT), rejoins and
//     takes its partitions back while they go on. Every record is the one
//     of the client's last round: the records A buffered before the pause
//     land (the interim owner never saw those clients), and never over the
//     newer ones of the clients that went on.
func TestClusterClientRecordsSurviveHandOvers(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	a, k := c.members[0], c.members[2]
	pk := []string{c.ownedPartition(t, k, "rk-a-"), c.ownedPartition(t, k, "rk-b-")}
	pa := []string{c.ownedPartition(t, a, "ra-a-"), c.ownedPartition(t, a, "ra-b-")}
	parts := slices.Concat(pk, pa)
	var clients, ofK, ofA []*roundClient
	for i, p := range parts {
		for j := range 3 {
			rc := newRoundClient(fmt.Sprintf("rc-%d-%d", i, j), p)
			clients = append(clients, rc)
			if i < len(pk) {
				ofK = append(ofK, rc)
			} else {
				ofA = append(ofA, rc)
			}
		}
	}
	var downMu sync.Mutex
	down := map[*clusterMember]bool{}
	setDown := func(m *clusterMember, d bool) { downMu.Lock(); down[m] = d; downMu.Unlock() }
	up := func() []*clusterMember {
		downMu.Lock()
		defer downMu.Unlock()
		var out []*clusterMember
		for _, m := range c.members {
			if !down[m] {
				out = append(out, m)
			}
		}
		return out
	}
	waitRounds := func(what string, rcs []*roundClient, n int) {
		t.Helper()
		from := make([]int, len(rcs))
		for i, rc := range rcs {
			from[i] = rc.answered()
		}
		waitUntil(t, 30*time.Second, what, func() (bool, string) {
			for i, rc := range rcs {
				if rc.answered()-from[i] < n {
					return false, fmt.Sprintf("%s answered %d rounds", rc.cl.clientID, rc.answered()-from[i])
				}
			}
			return true, ""
		})
	}
	lostTo := func(what string, m *clusterMember, ps []string) map[string]int64 {
		t.Helper()
		gens := map[string]int64{}
		waitUntil(t, 30*time.Second, what, func() (bool, string) {
			for _, p := range ps {
				owner, gen, _ := c.ownerRow(t, p)
				if owner == m.base || owner == "" {
					return false, fmt.Sprintf("%s owned by %q at generation %d", p, owner, gen)
				}
				gens[p] = gen
			}
			return true, ""
		})
		return gens
	}

	var runners []*roundRunner
	start := func(rcs []*roundClient, halt func(*roundClient) bool) *roundRunner {
		r := runRounds(t, rcs, up, halt)
		runners = append(runners, r)
		return r
	}
	// A hand-back stops each client as soon as its partition is claimed
	// back, after rounds paced 250ms apart: its last round is then, most
	// often, one the interim owner served and holds buffered.
	var back *claimWatch
	handedBack := func(rc *roundClient) bool { return back != nil && back.has(rc.cl.partition) }
	var backMu sync.Mutex
	halt := func(rc *roundClient) bool { backMu.Lock(); defer backMu.Unlock(); return handedBack(rc) }
	watchBack := func(m *clusterMember, above map[string]int64) {
		backMu.Lock()
		back = c.watchClaims(t, m, above)
		backMu.Unlock()
	}

	// 1. kill -9 and rejoin of C.
	run := start(clients, halt)
	waitRounds("every client answered 3 rounds", clients, 3)
	setDown(k, true)
	k.kill(t)
	interim := lostTo("the survivors claim C's partitions", k, pk)
	waitRounds("C's clients answered 3 rounds on the interim owners", ofK, 3)
	run.pace.Store(int64(250 * time.Millisecond))
	watchBack(k, interim)
	k.restart(t)
	setDown(k, false)
	back.wait(t, "C claims its partitions back")
	run.finish()
	lost1 := c.checkRecords(t, "after kill -9 and rejoin of "+k.name, parts, clients)

	// 2. SIGSTOP past the lease and SIGCONT of A.
	c.waitViews(t, c.members...)
	backMu.Lock()
	back = nil
	backMu.Unlock()
	run = start(clients, nil)
	waitRounds("every client answered 3 rounds", clients, 3)
	var quiet, going []*roundClient
	for i, rc := range ofA {
		if i%2 == 0 {
			quiet = append(quiet, rc)
		} else {
			going = append(going, rc)
		}
	}
	others := slices.DeleteFunc(slices.Clone(clients), func(rc *roundClient) bool { return slices.Contains(ofA, rc) })
	run.finish()
	// A's clients' last rounds go to A (their owner) and A is frozen right
	// after, its write-back of them still to come.
	for _, rc := range ofA {
		for try := 0; ; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ans, err := rc.round(ctx, a)
			cancel()
			if ans == answered {
				break
			}
			if !retryableErr(err) || try == 20 {
				t.Fatalf("%s: a round on %s: %s %v", rc.cl.clientID, a.name, ans, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	setDown(a, true)
	a.pause(t)
	run = start(slices.Concat(others, going), halt)
	interim = lostTo("the survivors claim A's partitions", a, pa)
	waitRounds("A's going clients answered 3 rounds on the interim owners", going, 3)
	run.pace.Store(int64(250 * time.Millisecond))
	watchBack(a, interim)
	a.resume(t)
	setDown(a, false)
	back.wait(t, "A claims its partitions back")
	run.finish()
	lost2 := c.checkRecords(t, "after SIGSTOP past the lease and SIGCONT of "+a.name, parts, clients)
	for _, r := range runners {
		r.mu.Lock()
		for _, f := range r.failures {
			t.Errorf("round failed: %s", f)
		}
		r.mu.Unlock()
	}
	// What the members logged about write-backs the fence refused.
	handed, written := 0, 0
	for _, m := range c.members {
		msgs, lines := m.logSince(t, 0)
		for i, msg := range msgs {
			switch {
			case strings.HasPrefix(msg, "client records dropped"):
				t.Errorf("member %s: %s", m.name, lines[i])
			case strings.HasPrefix(msg, "client records handed over"):
				var l struct {
					Written int `json:"written"`
				}
				_ = json.Unmarshal([]byte(lines[i]), &l)
				handed++
				written += l.Written
			}
		}
	}
	t.Logf("client records not current: %d after the kill and rejoin, %d after the pause and resume (%d clients; %d quiet through the pause); "+
		"%d write-backs refused by the fence were handed over (%d records written)", lost1, lost2, len(clients), len(quiet), handed, written)
}
