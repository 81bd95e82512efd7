package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// The sizes of TestMoveTwentyOfTwoHundred.
const (
	mtPartitions = 200
	mtMoves      = 20
	mtWriters    = 64
	// mtMinCommits is the commits each writer makes at least; writers go
	// on until the last move has ended, so every move runs under the
	// whole load.
	mtMinCommits = 12
)

// The test of online moves under load, with real processes: two
// serve processes on two PostgreSQL databases (the --postgres one, home
// main, and a second database the test creates on the same server), 200
// partitions placed by the directory's rendezvous rule, 64 concurrent
// writers (each commit a new todo, every other commit to one of the
// partitions being moved) through both processes, while 20 partitions
// (ten of each home) are moved to the other home one after the other —
// even moves by synclane partitions move (a process of its own), odd
// ones by the admin API's route. A writer answered a retryable error (503
// partition_moving while a partition is fenced, or while a process's
// cached directory entry is stale) retries the same commit after a
// client's back-off, as a client does. Afterwards, for every partition:
// the directory names one home with no move under way, the moved ones
// the home they were moved to; all its commits, changes, idempotency and
// client records are in that home and none in the other; its log holds
// seqs 1..N with N the commits acknowledged to it, each acknowledged
// commit once, at the seq it was acknowledged with (0 lost, 0
// duplicates, dense); each moved partition keeps its log epoch; a client
// that pulled a moved partition before the moves pulls incrementally
// from its cursor after them (no reset, no bootstrap) and ends with
// exactly the partition's todos; the writers' clients, which carry the
// epoch they acquired, never meet a reset.
func TestMoveTwentyOfTwoHundred(t *testing.T) {
	u := pgtest.URL(t)
	pgSchema := pgtest.NewSchema(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	mainURL := u + sep + "search_path=" + pgSchema
	second := pgtest.NewDatabase(t, u)
	store := []string{"--postgres", mainURL, "--postgres-databases", "second=" + second.URL}
	serveFlags := append(slices.Clone(store), "--pg-max-conns", "6")
	procs := []*proc{
		startProc(t, append(serveFlags, "--admin-listen", "127.0.0.1:0", "--admin-token", adminTestToken)...),
		startProc(t, serveFlags...),
	}
	ctx := context.Background()
	conn := func(url string) *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(ctx) })
		return c
	}
	dbs := map[string]*pgx.Conn{homes.Main: conn(mainURL), "second": conn(second.URL)}
	other := map[string]string{homes.Main: "second", "second": homes.Main}

	// 200 partitions, placed by rendezvous; the first ten of each home
	// are the ones moved.
	parts := make([]string, mtPartitions)
	placed := map[string]string{}
	var moved []string
	perHome := map[string]int{}
	for i := range parts {
		p := fmt.Sprintf("mt-%03d", i)
		parts[i] = p
		placed[p] = homes.Rendezvous([]string{homes.Main, "second"}, p)
		if perHome[placed[p]]++; perHome[placed[p]] <= mtMoves/2 {
			moved = append(moved, p)
		}
	}
	if len(moved) != mtMoves {
		t.Fatalf("placement %v leaves fewer than %d partitions of a home to move", perHome, mtMoves/2)
	}
	t.Logf("placement: %v", perHome)

	tr := loadTransport()
	t.Cleanup(tr.CloseIdleConnections)
	httpc := &http.Client{Transport: tr}
	client := func(base, p, clientID string) *httpsync.Client {
		return &httpsync.Client{URL: base + "/sync", HTTP: httpc, ClientID: clientID,
			Header: http.Header{"X-Actor": {"ada"}, "X-Partition": {p}}}
	}

	// The load's bookkeeping.
	type ack struct {
		commitID string
		seq      int64
	}
	var (
		mu       sync.Mutex
		acks     = map[string][]ack{} // partition → acknowledged commits
		retries  = map[string]int{}   // retryable answers, by reason
		failures []string
	)
	// push pushes one commit (a new todo) until it is acknowledged,
	// retrying retryable answers after a client's back-off.
	push := func(c *httpsync.Client, p, id string) {
		commit := todoCommit("c-"+id, id, "L")
		deadline := time.Now().Add(60 * time.Second)
		for {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			rs, err := c.Push(rctx, commit)
			cancel()
			mu.Lock()
			switch e := syncerr.As(err); {
			case err == nil && len(rs) == 1 && rs[0].ClientCommitID == commit.ClientCommitID &&
				(rs[0].Status == ssp2.CommitApplied || rs[0].Status == ssp2.CommitCached) && rs[0].CommitSeq != nil:
				acks[p] = append(acks[p], ack{commit.ClientCommitID, *rs[0].CommitSeq})
				mu.Unlock()
				return
			case errors.Is(err, httpsync.ErrResetRequired):
				// The client's epoch changed: a reset, which a move must never cause.
				failures = append(failures, fmt.Sprintf("%s to %s: %v", commit.ClientCommitID, p, err))
				mu.Unlock()
				return
			case err != nil && e.Spec().Retryable && time.Now().Before(deadline):
				reason := string(e.Code)
				var d struct {
					Reason string `json:"reason"`
				}
				if json.Unmarshal(e.Details, &d) == nil && d.Reason != "" {
					reason += " " + d.Reason
				} else if len(e.Details) > 0 {
					reason += " " + string(e.Details)
				} else if e.Err != nil {
					reason += " " + e.Err.Error() // no answer, or not an SSP2 one
				}
				retries[reason]++
			default:
				failures = append(failures, fmt.Sprintf("%s to %s: %+v, %v", commit.ClientCommitID, p, rs, err))
				mu.Unlock()
				return
			}
			mu.Unlock()
			time.Sleep(50 * time.Millisecond) // the client's back-off after a retryable answer
		}
	}

	// Every partition gets its first commit (which places it), 16 at a
	// time; a client of each moved partition then pulls it.
	seedStart := time.Now()
	var next atomic.Int64
	var seedWG sync.WaitGroup
	for range 16 {
		seedWG.Add(1)
		go func() {
			defer seedWG.Done()
			for i := int(next.Add(1) - 1); i < len(parts); i = int(next.Add(1) - 1) {
				p := parts[i]
				push(client(procs[i%2].base, p, "seed"), p, "seed-"+p)
			}
		}()
	}
	seedWG.Wait()
	if len(failures) > 0 {
		t.Fatalf("seeding: %d failures, first %s", len(failures), failures[0])
	}
	replicas := map[string]*httpsynctest.Replica{}
	epochBefore := map[string]string{}
	for i, p := range moved {
		r := httpsynctest.NewReplica(client(procs[i%2].base, p, "puller"), schema.MustDemo())
		r.Subscribe("todos", "todos", map[string][]string{"list_id": {"L"}})
		if err := r.SyncUntilIdle(ctx, 20); err != nil || r.Subs[0].Cursor < 1 || len(r.Rows["todos"]) < 1 {
			t.Fatalf("pull of %s before the moves: cursor %d, %d todos, %v", p, r.Subs[0].Cursor, len(r.Rows["todos"]), err)
		}
		replicas[p] = r
		var epoch string
		if err := dbs[placed[p]].QueryRow(ctx, `SELECT log_epoch FROM sync_partitions WHERE partition = $1`, p).Scan(&epoch); err != nil || epoch == "" {
			t.Fatalf("%s's registry row in home %s: epoch %q, %v", p, placed[p], epoch, err)
		}
		epochBefore[p] = epoch
	}
	t.Logf("seeded %d partitions in %v", len(parts), time.Since(seedStart).Round(time.Millisecond))

	// 64 writers; every other commit goes to a partition being moved.
	loadStart := time.Now()
	movesDone := make(chan struct{})
	started := make(chan struct{})
	var firstAcks atomic.Int64
	var writersWG sync.WaitGroup
	for w := range mtWriters {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			clients := map[string]*httpsync.Client{} // one per partition: each carries its partition's epoch
			for n := 0; ; n++ {
				if n >= mtMinCommits {
					select {
					case <-movesDone:
						return
					default:
					}
				}
				p := parts[(w*29+n*7)%mtPartitions]
				if n%2 == 0 {
					p = moved[(w+n/2)%mtMoves]
				}
				c := clients[p]
				if c == nil {
					c = client(procs[(w+n)%2].base, p, fmt.Sprintf("w%02d", w))
					clients[p] = c
				}
				c.URL = procs[(w+n)%2].base + "/sync"
				push(c, p, fmt.Sprintf("w%02d-%05d", w, n))
				if n == 0 && firstAcks.Add(1) == mtWriters {
					close(started)
				}
			}
		}()
	}

	// The moves, one after the other, once every writer has had a commit
	// acknowledged.
	<-started
	var pauses, durations []float64
	movesStart := time.Now()
	for i, p := range moved {
		to := other[placed[p]]
		var rep moveReport
		if i%2 == 0 {
			cmd := exec.Command(synclaneBinary(t), append([]string{"partitions", "move", p, "--to", to, "--pg-max-conns", "2"}, store...)...)
			out, err := cmd.Output()
			if err != nil {
				close(movesDone)
				writersWG.Wait()
				t.Fatalf("partitions move %s --to %s: %v %s", p, to, err, errText(err))
			}
			if err := json.Unmarshal(out, &rep); err != nil {
				close(movesDone)
				writersWG.Wait()
				t.Fatalf("partitions move %s printed %q: %v", p, out, err)
			}
		} else {
			req, _ := http.NewRequest("POST", procs[0].admin+"/api/partitions/"+p+"/move?to="+to, nil)
			req.Header.Set("Authorization", "Bearer "+adminTestToken)
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				err = json.NewDecoder(res.Body).Decode(&rep)
				res.Body.Close()
				if err == nil && res.StatusCode != 200 {
					err = fmt.Errorf("status %d", res.StatusCode)
				}
			}
			if err != nil {
				close(movesDone)
				writersWG.Wait()
				t.Fatalf("POST move %s to %s: %v", p, to, err)
			}
		}
		if rep.Partition != p || rep.From != placed[p] || rep.To != to {
			close(movesDone)
			writersWG.Wait()
			t.Fatalf("move %d of %s: report %+v, want from %s to %s", i, p, rep, placed[p], to)
		}
		pauses = append(pauses, rep.PauseMs)
		durations = append(durations, rep.DurationMs)
	}
	movesTook := time.Since(movesStart)
	close(movesDone)
	writersWG.Wait()
	loadTook := time.Since(loadStart)

	total := 0
	for _, a := range acks {
		total += len(a)
	}
	sort.Float64s(pauses)
	sort.Float64s(durations)
	t.Logf("%d writers: %d commits acknowledged in %v (%.0f/s); %d moves in %v: pause median %.0f ms (max %.0f), duration median %.0f ms (max %.0f); retried answers: %v",
		mtWriters, total, loadTook.Round(time.Millisecond), float64(total)/loadTook.Seconds(), len(moved), movesTook.Round(time.Millisecond),
		pauses[len(pauses)/2], pauses[len(pauses)-1], durations[len(durations)/2], durations[len(durations)-1], retries)
	if len(failures) > 0 {
		t.Fatalf("%d commits not acknowledged (a client would drop or report them), first: %s", len(failures), failures[0])
	}

	// Every partition: one home, dense log, each acknowledged commit once.
	isMoved := map[string]bool{}
	for _, p := range moved {
		isMoved[p] = true
	}
	for _, p := range parts {
		var home, state string
		if err := dbs[homes.Main].QueryRow(ctx, `SELECT home, move_state FROM `+homes.DirectoryTable+` WHERE partition = $1`, p).Scan(&home, &state); err != nil {
			t.Fatalf("%s: directory: %v", p, err)
		}
		want := placed[p]
		if isMoved[p] {
			want = other[want]
		}
		if home != want || state != "" {
			t.Fatalf("%s: directory names %q (move state %q), want %q with no move under way", p, home, state, want)
		}
		for _, table := range []string{"sync_commits", "sync_changes", "sync_idempotency", "sync_clients"} {
			var n int
			if err := dbs[other[home]].QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE partition = $1`, p).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%s (home %s): %d rows of %s in %s (%v)", p, home, n, table, other[home], err)
			}
		}
		rows, err := dbs[home].Query(ctx, `SELECT seq, client_commit_id FROM sync_commits WHERE partition = $1 ORDER BY seq`, p)
		if err != nil {
			t.Fatal(err)
		}
		logged := map[string]int64{}
		var seq int64
		for rows.Next() {
			var s int64
			var id string
			if err := rows.Scan(&s, &id); err != nil {
				t.Fatal(err)
			}
			if seq++; s != seq {
				t.Fatalf("%s: seq %d after %d: the log is not dense", p, s, seq-1)
			}
			if _, dup := logged[id]; dup {
				t.Fatalf("%s: commit %s logged twice", p, id)
			}
			logged[id] = s
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(logged) != len(acks[p]) {
			t.Fatalf("%s: %d commits logged, %d acknowledged", p, len(logged), len(acks[p]))
		}
		for _, a := range acks[p] {
			if s, ok := logged[a.commitID]; !ok || s != a.seq {
				t.Fatalf("%s: commit %s acknowledged as seq %d, logged at %d (%v)", p, a.commitID, a.seq, s, ok)
			}
		}
		var maxSeq int64
		var epoch string
		if err := dbs[home].QueryRow(ctx, `SELECT max_commit_seq, log_epoch FROM sync_partitions WHERE partition = $1`, p).Scan(&maxSeq, &epoch); err != nil || maxSeq != seq {
			t.Fatalf("%s: registry max seq %d (%v), log ends at %d", p, maxSeq, err, seq)
		}
		if !isMoved[p] {
			continue
		}
		if epoch != epochBefore[p] {
			t.Fatalf("%s: log epoch %q after the move, %q before", p, epoch, epochBefore[p])
		}
		// The client that pulled before the moves pulls on from its cursor.
		r := replicas[p]
		cursor := r.Subs[0].Cursor
		for round := 0; ; round++ {
			st, err := r.Pull(ctx)
			if err != nil {
				t.Fatalf("%s: pull after the move: %v", p, err)
			}
			if c := r.Subs[0].Cursor; c < cursor || st.SegmentRows > 0 {
				t.Fatalf("%s: pull after the move went from cursor %d to %d with %d bootstrap rows: a reset", p, cursor, c, st.SegmentRows)
			}
			cursor = r.Subs[0].Cursor
			if st.Commits == 0 && !st.Incomplete {
				break
			}
			if round == 100 {
				t.Fatalf("%s: still pulling after 100 rounds", p)
			}
		}
		if cursor != seq || len(r.Rows["todos"]) != len(logged) {
			t.Fatalf("%s: the earlier client ends at cursor %d with %d todos; the log ends at %d with %d commits", p, cursor, len(r.Rows["todos"]), seq, len(logged))
		}
		for id := range logged {
			if _, ok := r.Rows["todos"][strings.TrimPrefix(id, "c-")]; !ok {
				t.Fatalf("%s: the earlier client lacks todo %s", p, id)
			}
		}
	}
}

// errText is the stderr of a failed exec.Cmd.Output, if any.
func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// A process whose cached directory entry went stale through a move made
// by another process (synclane partitions move), and which takes no
// write of the partition afterwards: a client that pulled the partition
// through it before the move pulls through it again after the move, from
// its cursor — no reset, no bootstrap, every todo (a retryable answer
// is retried, as a client does).
func TestMoveStaleEntryPull(t *testing.T) {
	u := pgtest.URL(t)
	pgSchema := pgtest.NewSchema(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	mainURL := u + sep + "search_path=" + pgSchema
	second := pgtest.NewDatabase(t, u)
	store := []string{"--postgres", mainURL, "--postgres-databases", "second=" + second.URL}
	a := startProc(t, append(slices.Clone(store), "--pg-max-conns", "4")...)
	b := startProc(t, append(slices.Clone(store), "--pg-max-conns", "4")...)
	var p string
	for i := 0; p == ""; i++ {
		if q := fmt.Sprint("stale-", i); homes.Rendezvous([]string{homes.Main, "second"}, q) == homes.Main {
			p = q
		}
	}
	pushTodos(t, a.base, p, "t1", "t2")
	ctx := context.Background()
	r := httpsynctest.NewReplica(partClient(b.base, p, "puller"), schema.MustDemo())
	r.Subscribe("todos", "todos", map[string][]string{"list_id": {"L"}})
	if err := r.SyncUntilIdle(ctx, 20); err != nil || r.Subs[0].Cursor != 2 {
		t.Fatalf("pull before the move: cursor %d, %v", r.Subs[0].Cursor, err)
	}
	cmd := exec.Command(synclaneBinary(t), append([]string{"partitions", "move", p, "--to", "second", "--pg-max-conns", "2"}, store...)...)
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("partitions move: %v %s %s", err, out, errText(err))
	}
	// A commit through the other process (its entry is stale too: its
	// first attempt meets the move guard, 503, and the retry routes anew).
	deadline := time.Now().Add(20 * time.Second)
	for {
		rs, err := partClient(a.base, p, "writer-"+p).Push(ctx, todoCommit("c-t3", "t3", "L"))
		if err == nil && len(rs) == 1 && rs[0].Status == ssp2.CommitApplied {
			break
		}
		if e := syncerr.As(err); err == nil || !e.Spec().Retryable || time.Now().After(deadline) {
			t.Fatalf("push after the move: %+v, %v", rs, err)
		}
		time.Sleep(50 * time.Millisecond) // the client's back-off
	}
	for {
		cursor := r.Subs[0].Cursor
		st, err := r.Pull(ctx)
		if err != nil {
			if e := syncerr.As(err); e == nil || !e.Spec().Retryable || time.Now().After(deadline) {
				t.Fatalf("pull after the move: %v", err)
			}
			t.Logf("pull after the move: retryable %v", err)
			time.Sleep(50 * time.Millisecond) // the client's back-off
			continue
		}
		if c := r.Subs[0].Cursor; c < cursor || st.SegmentRows > 0 {
			t.Fatalf("pull after the move went from cursor %d to %d with %d bootstrap rows: a reset", cursor, c, st.SegmentRows)
		}
		if st.Commits == 0 && !st.Incomplete {
			break
		}
	}
	if r.Subs[0].Cursor != 3 || len(r.Rows["todos"]) != 3 {
		t.Fatalf("after the move: cursor %d, %d todos, want 3 and 3", r.Subs[0].Cursor, len(r.Rows["todos"]))
	}
}
