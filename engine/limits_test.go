package engine_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// Identifiers that can never be stored get a deterministic, non-retryable
// sync.invalid_request before anything is written, and the next request is
// served.
func TestIdentifierLimits(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("alice", "ca")
	long := strings.Repeat("x", partition.MaxIdentifierBytes+1)
	okRow := f.row("t1", "P", "x")
	cases := []struct {
		name   string
		cid    string
		frames []ssp2.Frame
	}{
		{"NUL clientCommitId", "ca", []ssp2.Frame{&ssp2.PushCommit{ClientCommitID: "c\x00", Operations: []ssp2.Operation{upsert("tasks", "t1", okRow, nil)}}}},
		{"long clientCommitId", "ca", []ssp2.Frame{&ssp2.PushCommit{ClientCommitID: long, Operations: []ssp2.Operation{upsert("tasks", "t1", okRow, nil)}}}},
		{"NUL rowId", "ca", []ssp2.Frame{&ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{upsert("tasks", "t\x00", okRow, nil)}}}},
		{"long rowId", "ca", []ssp2.Frame{&ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{upsert("tasks", long, okRow, nil)}}}},
		{"long clientId", long, []ssp2.Frame{&ssp2.PullHeader{Accept: 1}}},
		{"NUL clientId", "c\x00", []ssp2.Frame{&ssp2.PullHeader{Accept: 1}}},
		{"NUL scope value", "ca", []ssp2.Frame{&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P\x00")}},
		{"long scope value", "ca", []ssp2.Frame{&ssp2.PullHeader{Accept: 1}, sub("s", -1, long)}},
		{"long subscription id", "ca", []ssp2.Frame{&ssp2.PullHeader{Accept: 1}, sub(long, -1, "P")}},
		{"long table name", "ca", []ssp2.Frame{&ssp2.PullHeader{Accept: 1}, &ssp2.Subscription{ID: "s", Table: long, Scopes: map[string][]string{"project_id": {"P"}}, Cursor: -1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &client{f: f, id: a.id, cid: tc.cid, epoch: a.epoch, wire: ssp2.WireV3, sv: 1}
			_, err := c.sync(tc.frames...)
			wantCode(t, err, syncerr.InvalidRequest)
			if syncerr.As(err).Spec().Retryable {
				t.Fatal("an input that can never succeed must not be retryable")
			}
			if len(syncerr.As(err).Message) > 200 {
				t.Fatalf("error message echoes the oversized input: %d bytes", len(syncerr.As(err).Message))
			}
		})
	}
	// Nothing was written, and honest traffic goes on.
	if pr := a.push("c1", upsert("tasks", "t1", okRow, nil)); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 1 {
		t.Fatalf("honest push after the refusals: %+v", pr)
	}
	// A string value with U+0000 is a durable, non-retryable op rejection.
	pr := a.push("c2", upsert("tasks", "t2", f.row("t2", "P", "bad\x00title"), nil))
	if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.InvalidRequest) || pr.Results[0].Retryable {
		t.Fatalf("NUL in a string value: %+v", pr)
	}
	if pr := a.push("c2", upsert("tasks", "t2", f.row("t2", "P", "bad\x00title"), nil)); pr.Status != ssp2.CommitRejected {
		t.Fatalf("replayed rejection: %+v", pr)
	}
}

func TestIdentityLimits(t *testing.T) {
	f := newFixture(t, memory.New())
	msg := &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}}
	for _, id := range []engine.Identity{
		{ActorID: strings.Repeat("a", partition.MaxActorBytes+1), Partition: "p1"},
		{ActorID: "a", Partition: strings.Repeat("p", partition.MaxActorBytes+1)},
		{ActorID: "a\x00b", Partition: "p1"},
	} {
		_, err := f.eng.Sync(context.Background(), id, msg)
		wantCode(t, err, syncerr.InvalidRequest)
	}
}

// The 10,000-subscription request (which once produced a 950 MB reply) is
// refused under the default limits, and so is a subscription with 32,766+
// scope values (once "too many SQL variables" on SQLite).
func TestDefaultCapsRefuseHugeRequests(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("alice", "ca")
	frames := []ssp2.Frame{&ssp2.PullHeader{Accept: 1}}
	for i := range 10_000 {
		frames = append(frames, sub(fmt.Sprint("s", i), -1, "P"))
	}
	_, err := a.sync(frames...)
	wantCode(t, err, syncerr.InvalidRequest)
	vals := make([]string, 32_766)
	for i := range vals {
		vals[i] = fmt.Sprint("p", i)
	}
	_, err = a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, vals...))
	wantCode(t, err, syncerr.InvalidSubscription)
}

// Subscriptions per request and scope values per subscription are capped
// with protocol errors.
func TestSubscriptionCaps(t *testing.T) {
	f := newFixture(t, memory.New(), func(c *engine.Config) {
		c.Limits = partition.Limits{MaxSubscriptions: 8, MaxScopeValues: 100}
	})
	a := f.client("alice", "ca")
	frames := []ssp2.Frame{&ssp2.PullHeader{Accept: 1}}
	for i := range 9 {
		frames = append(frames, sub(fmt.Sprint("s", i), -1, "P"))
	}
	_, err := a.sync(frames...)
	wantCode(t, err, syncerr.InvalidRequest)
	vals := make([]string, 101)
	for i := range vals {
		vals[i] = fmt.Sprint("p", i)
	}
	_, err = a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, vals...))
	wantCode(t, err, syncerr.InvalidSubscription)
	// At the caps, the request is served.
	if s := a.pull(ssp2.PullHeader{Accept: 1}, sub("s", -1, vals[:100]...))["s"]; s.start.Status != ssp2.SubActive {
		t.Fatalf("100 scope values: %+v", s.start)
	}
}

// A reply stops adding commits and pages at its byte budget; the client
// converges by pulling again, and every reply makes progress.
func TestResponseByteBudget(t *testing.T) {
	f := newFixture(t, memory.New(), func(c *engine.Config) {
		c.Limits = partition.Limits{MaxResponseBytes: 2000}
	})
	a := f.client("alice", "ca")
	title := strings.Repeat("t", 200)
	for i := range 40 {
		id := fmt.Sprintf("r%02d", i)
		if pr := a.push("c"+id, upsert("tasks", id, f.row(id, "P", title), nil)); pr.Status != ssp2.CommitApplied {
			t.Fatal(pr)
		}
	}
	// Incremental: two subscriptions from cursor 0; the first fills the reply,
	// the second keeps its cursor; pulling again finishes both.
	cur := map[string]int64{"a": 0, "b": 0}
	seen := map[string]int{}
	for round := 0; round < 100 && (cur["a"] < 40 || cur["b"] < 40); round++ {
		got := a.pull(ssp2.PullHeader{Accept: 1, LimitCommits: 1000}, sub("a", cur["a"], "P"), sub("b", cur["b"], "P"))
		progressed := false
		for id, s := range got {
			if s.end.NextCursor > cur[id] {
				progressed = true
			}
			if n := len(s.commits); n > 0 && s.end.NextCursor != s.commits[n-1].CommitSeq {
				t.Fatalf("sub %s: nextCursor %d after commit %d", id, s.end.NextCursor, s.commits[n-1].CommitSeq)
			}
			seen[id] += len(s.commits)
			cur[id] = s.end.NextCursor
		}
		if !progressed {
			t.Fatalf("round %d made no progress: %v", round, cur)
		}
		if total := len(got["a"].commits) + len(got["b"].commits); total > 12 {
			t.Fatalf("round %d carried %d commits; the budget fits about 8", round, total)
		}
	}
	if seen["a"] != 40 || seen["b"] != 40 {
		t.Fatalf("commits seen %v, want 40 each", seen)
	}
	// Bootstrap: pages stop at the budget and the token resumes.
	var token []byte
	rows := 0
	for round := 0; round < 100; round++ {
		s := sub("bs", -1, "P")
		s.BootstrapState = token
		got := a.pull(ssp2.PullHeader{Accept: 1, LimitSnapshotRows: 4, MaxSnapshotPages: 50}, s)["bs"]
		rows += len(got.rows)
		if len(got.rows) == 0 || len(got.rows) > 16 {
			t.Fatalf("bootstrap round %d carried %d rows", round, len(got.rows))
		}
		if token = got.end.BootstrapState; token == nil {
			break
		}
	}
	if rows != 40 {
		t.Fatalf("bootstrap delivered %d rows, want 40", rows)
	}
}

// Client records of a partition that went quiet are written back within
// the flush interval, not only when its actor stops.
func TestIdleClientRecordsAreFlushed(t *testing.T) {
	st := memory.New()
	f := newFixture(t, st, func(c *engine.Config) {
		c.ClientFlushInterval = 20 * time.Millisecond
		c.IdleTimeout = time.Hour
	})
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	a.pull(ssp2.PullHeader{Accept: 1}, sub("s", 0, "P"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := st.GetClient(context.Background(), "p1", "ca")
		if err != nil {
			t.Fatal(err)
		}
		if rec != nil && rec.Cursor == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client record not written back while the partition is idle: %+v", rec)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Protocol details: the v2 floor reply carries the epoch verdict, the
// epoch handshake carries latestSchemaVersion, and effective scopes keep
// the requested order.
func TestFloorResetAndScopeOrder(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("alice", "ca")
	old := &client{f: f, id: a.id, cid: "cold", wire: ssp2.WireV3, sv: 9}
	rep, err := old.sync(&ssp2.PullHeader{Accept: 1})
	if err != nil {
		t.Fatal(err)
	}
	if h := rep.Header(); h.RequiredSchemaVersion == nil || !h.ResetRequired || h.LogEpoch == "" {
		t.Fatalf("floor reply without an epoch: %+v", h)
	}
	old.epoch = a.epoch
	if rep, err = old.sync(&ssp2.PullHeader{Accept: 1}); err != nil || rep.Header().ResetRequired {
		t.Fatalf("floor reply with the right epoch: %+v, %v", rep.Header(), err)
	}
	fresh := &client{f: f, id: a.id, cid: "cnew", wire: ssp2.WireV3, sv: 1}
	rep, err = fresh.sync(&ssp2.PullHeader{Accept: 1})
	if err != nil || rep.Header().LatestSchemaVersion == nil || *rep.Header().LatestSchemaVersion != 1 {
		t.Fatalf("handshake without latestSchemaVersion: %+v, %v", rep.Header(), err)
	}
	s := a.pull(ssp2.PullHeader{Accept: 1}, sub("s", -1, "zeta", "alpha", "mid"))["s"]
	if got := s.start.EffectiveScopes["project_id"]; strings.Join(got, ",") != "zeta,alpha,mid" {
		t.Fatalf("effective scopes %v, want the requested order", got)
	}
}

// Poison pushes (U+0000 or oversized keys PostgreSQL cannot store) sent
// concurrently with honest pushes to one partition on PostgreSQL: every
// honest commit is applied with dense seqs, every poison push gets a
// non-retryable answer, and none of them takes a group-commit batch down.
func TestPoisonPushesDoNotFailHonestOnesPostgres(t *testing.T) {
	f := newFixture(t, pgtest.OpenSchema(t, pgtest.NewSchema(t), postgres.Options{MaxConns: 8}))
	long := strings.Repeat("k", 8<<10)
	poison := []func(i int) (string, ssp2.Operation){
		func(i int) (string, ssp2.Operation) {
			return fmt.Sprint("p-nul-", i), upsert("tasks", fmt.Sprint("r\x00", i), f.row(fmt.Sprint("r\x00", i), "P", "x"), nil)
		},
		func(i int) (string, ssp2.Operation) {
			return fmt.Sprint("p-nulcc\x00", i), upsert("tasks", fmt.Sprint("ok", i), f.row(fmt.Sprint("ok", i), "P", "x"), nil)
		},
		func(i int) (string, ssp2.Operation) {
			return fmt.Sprint("p-long-", i), upsert("tasks", long+fmt.Sprint(i), f.row(long+fmt.Sprint(i), "P", "x"), nil)
		},
		func(i int) (string, ssp2.Operation) {
			return fmt.Sprint("p-title-", i), upsert("tasks", fmt.Sprint("t-nul-", i), f.row(fmt.Sprint("t-nul-", i), "P", "a\x00b"), nil)
		},
	}
	const honest, each = 16, 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var seqs []int64
	for w := range honest {
		c := f.client(fmt.Sprint("h", w), fmt.Sprint("ch", w))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("%s-%d", c.cid, i)
				rep, err := f.eng.Sync(context.Background(), c.id, mustMsg(t, c, &ssp2.PushCommit{ClientCommitID: id,
					Operations: []ssp2.Operation{upsert("tasks", id, f.row(id, "P", "x"), nil)}}))
				if err != nil {
					t.Errorf("honest push %s: %v", id, err)
					return
				}
				if pr := results(rep)[0]; pr.Status != ssp2.CommitApplied {
					t.Errorf("honest push %s: %+v", id, pr)
				} else {
					mu.Lock()
					seqs = append(seqs, *pr.CommitSeq)
					mu.Unlock()
				}
			}
		}()
	}
	for k, mk := range poison {
		c := f.client(fmt.Sprint("evil", k), fmt.Sprint("cevil", k))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				ccid, op := mk(i)
				rep, err := f.eng.Sync(context.Background(), c.id, mustMsg(t, c, &ssp2.PushCommit{ClientCommitID: ccid, Operations: []ssp2.Operation{op}}))
				if err != nil {
					if e := syncerr.As(err); e.Code != syncerr.InvalidRequest || e.Spec().Retryable {
						t.Errorf("poison %d/%d: %v, want non-retryable sync.invalid_request", k, i, err)
					}
					continue
				}
				if pr := results(rep)[0]; pr.Status != ssp2.CommitRejected || pr.Results[0].Retryable {
					t.Errorf("poison %d/%d answered %+v, want a non-retryable rejection", k, i, pr)
				}
			}
		}()
	}
	wg.Wait()
	if len(seqs) != honest*each {
		t.Fatalf("%d honest commits applied, want %d", len(seqs), honest*each)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("seqs not dense at %d: %d", i, s)
		}
	}
}
