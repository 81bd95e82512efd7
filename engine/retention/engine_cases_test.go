package retention_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/retention"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/protocol/yjs"
	"github.com/synclane/synclane/storage"
)

// Retention through the protocol: the engine (partition actors, pulls,
// pushes, pruning batches) on the store under test, so every backend shows
// the same SPEC §4.6 behaviour: a cursor below the horizon resets, a
// cursor at it is served incrementally, a bootstrap whose pin fell below
// it restarts, pruning under load leaves no gap, and what a retried commit
// gets once its idempotency record was pruned. backends_test.go runs these
// cases on every backend (they moved here from storage/storagetest, which
// imports no engine).

const day = 24 * time.Hour

// engEnv is an engine on the store under test, serving partition "p" with
// a clock the test moves.
type engEnv struct {
	*env
	eng   *engine.Engine
	clock atomic.Int64 // Unix ms
}

func (e *env) engine(mut ...func(*engine.Config)) *engEnv {
	e.t.Helper()
	return e.engineOn(e.b, mut...)
}

func (e *env) engineOn(st storage.Backend, mut ...func(*engine.Config)) *engEnv {
	e.t.Helper()
	x := &engEnv{env: e}
	x.clock.Store(base)
	cfg := engine.Config{Schema: e.sch, Backend: st, Resolver: engine.AllowAll(e.sch),
		Now: func() time.Time { return time.UnixMilli(x.clock.Load()) }, IdleTimeout: -1,
		Mergers: map[string]partition.Merger{yjs.CRDTType: yjs.Merger{}}} // items.c
	for _, m := range mut {
		m(&cfg)
	}
	eng, err := engine.New(e.ctx, cfg)
	if err != nil {
		e.t.Fatalf("engine.New: %v", err)
	}
	x.eng = eng
	return x
}

func (x *engEnv) close() { _ = x.eng.Close() }

func (x *engEnv) advance(d time.Duration) { x.clock.Add(d.Milliseconds()) }

func (x *engEnv) prune(p storage.RetentionPolicy) retention.PruneReport {
	x.t.Helper()
	r, err := x.eng.Retention().Prune(x.ctx, "p", p, false)
	if err != nil {
		x.t.Fatalf("Prune(%+v): %v", p, err)
	}
	return r
}

// engClient is one clientId of actor "ada" in partition "p".
type engClient struct {
	x     *engEnv
	cid   string
	epoch string
}

func (x *engEnv) client(cid string) *engClient {
	x.t.Helper()
	c := &engClient{x: x, cid: cid}
	c.acquire()
	return c
}

// acquire takes the partition's current log epoch (the handshake).
func (c *engClient) acquire() {
	c.x.t.Helper()
	rep, err := c.syncErr(&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows})
	if err != nil {
		c.x.t.Fatalf("epoch acquisition: %v", err)
	}
	h := rep.Header()
	if h == nil || !h.ResetRequired || h.LogEpoch == "" {
		c.x.t.Fatalf("epoch acquisition answered %+v", h)
	}
	c.epoch = h.LogEpoch
}

func (c *engClient) syncErr(frames ...ssp2.Frame) (*engine.Reply, error) {
	h := &ssp2.ReqHeader{ClientID: c.cid, SchemaVersion: c.x.sch.Version}
	if c.epoch != "" {
		ep := c.epoch
		h.LogEpoch = &ep
	}
	msg := &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: append([]ssp2.Frame{h}, frames...)}
	b, err := ssp2.Encode(msg)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	dec, err := ssp2.DecodeRequest(b)
	if err != nil {
		return nil, fmt.Errorf("decode request: %w", err)
	}
	return c.x.eng.Sync(c.x.ctx, engine.Identity{ActorID: "ada", Partition: "p"}, dec)
}

func (c *engClient) note(id, body string) ssp2.Operation {
	c.x.t.Helper()
	payload, err := ssp2.NewRowCodec(c.x.notes.Columns).AppendSparse(nil, note(id, "p1", body), nil, 0)
	if err != nil {
		c.x.t.Fatal(err)
	}
	return ssp2.Operation{Table: "notes", RowID: id, Op: ssp2.OpUpsert, Payload: payload}
}

func (c *engClient) pushErr(ccid string, ops ...ssp2.Operation) (*ssp2.PushResult, error) {
	rep, err := c.syncErr(&ssp2.PushCommit{ClientCommitID: ccid, Operations: ops})
	if err != nil {
		return nil, err
	}
	for _, f := range rep.Frames {
		if pr, ok := f.(*ssp2.PushResult); ok {
			return pr, nil
		}
	}
	return nil, fmt.Errorf("push %s: no PUSH_RESULT", ccid)
}

func (c *engClient) push(ccid string, ops ...ssp2.Operation) *ssp2.PushResult {
	c.x.t.Helper()
	pr, err := c.pushErr(ccid, ops...)
	if err != nil {
		c.x.t.Fatalf("push %s: %v", ccid, err)
	}
	return pr
}

// section is one subscription's part of a pull reply.
type section struct {
	start   *ssp2.SubStart
	commits []*ssp2.Commit
	rows    []ssp2.SegmentRow
	end     *ssp2.SubEnd
}

func parseSections(rep *engine.Reply) (map[string]*section, error) {
	out := map[string]*section{}
	var cur *section
	for _, f := range rep.Frames {
		switch x := f.(type) {
		case *ssp2.SubStart:
			cur = &section{start: x}
			out[x.ID] = cur
		case *ssp2.Commit:
			cur.commits = append(cur.commits, x)
		case *ssp2.SegmentInline:
			seg, err := ssp2.DecodeSegment(x.Payload)
			if err != nil {
				return nil, err
			}
			for _, b := range seg.Blocks {
				cur.rows = append(cur.rows, b...)
			}
		case *ssp2.SubEnd:
			cur.end = x
		}
	}
	return out, nil
}

func (c *engClient) pullErr(lim ssp2.PullHeader, s *ssp2.Subscription) (*section, error) {
	rep, err := c.syncErr(&lim, s)
	if err != nil {
		return nil, err
	}
	secs, err := parseSections(rep)
	if err != nil {
		return nil, err
	}
	sec := secs[s.ID]
	if sec == nil || sec.start == nil || sec.end == nil {
		return nil, fmt.Errorf("no section %q in the reply", s.ID)
	}
	return sec, nil
}

func (c *engClient) pull(lim ssp2.PullHeader, s *ssp2.Subscription) *section {
	c.x.t.Helper()
	sec, err := c.pullErr(lim, s)
	if err != nil {
		c.x.t.Fatalf("pull %s from %d: %v", s.ID, s.Cursor, err)
	}
	return sec
}

var wideLimits = ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitCommits: 10_000, LimitSnapshotRows: 10_000, MaxSnapshotPages: 10}

func notesSub(cursor int64) *ssp2.Subscription {
	return &ssp2.Subscription{ID: "n", Table: "notes", Scopes: map[string][]string{"project": {"p1"}}, Cursor: cursor}
}

func wantReset(x *engEnv, what string, sec *section, cursor int64) {
	x.t.Helper()
	if sec.start.Status != ssp2.SubReset || sec.start.ReasonCode != string(syncerr.CursorExpired) || len(sec.start.EffectiveScopes) != 0 ||
		len(sec.commits) != 0 || len(sec.rows) != 0 || sec.end.NextCursor != cursor {
		x.t.Fatalf("%s: SUB_START %+v, %d commits, %d rows, next cursor %d; want status reset, sync.cursor_expired, {}, nothing, cursor %d echoed",
			what, sec.start, len(sec.commits), len(sec.rows), sec.end.NextCursor, cursor)
	}
}

func wantIncremental(x *engEnv, what string, sec *section, from, to int64) {
	x.t.Helper()
	if sec.start.Status != ssp2.SubActive || sec.start.Bootstrap || sec.end.NextCursor != to || int64(len(sec.commits)) != to-from {
		x.t.Fatalf("%s: SUB_START %+v, %d commits, next cursor %d; want active incremental (%d, %d]", what, sec.start, len(sec.commits), sec.end.NextCursor, from, to)
	}
	for i, c := range sec.commits {
		if c.CommitSeq != from+int64(i)+1 {
			x.t.Fatalf("%s: commit %d has seq %d, want %d", what, i, c.CommitSeq, from+int64(i)+1)
		}
	}
}

// noWindow is a policy with no active client and no age force: only the
// newest n commits are kept.
func keepNewest(n int64) storage.RetentionPolicy {
	return storage.RetentionPolicy{ActiveWindowMs: 0, AgeForceMs: (3650 * day).Milliseconds(), MinRetainedCommits: n}
}

var retentionEngineTests = []test{
	{name: "ResetBelowHorizonIncrementalAtHorizon", fn: func(e *env) {
		x := e.engine()
		defer x.close()
		w := x.client("writer")
		for i := range 10 {
			w.push("c"+strconv.Itoa(i), w.note("n"+strconv.Itoa(i), "v"))
		}
		r := x.prune(keepNewest(4))
		if r.HorizonAfter != 6 || r.Commits != 6 || r.Plan.Binding != storage.BindingMinRetained {
			x.t.Fatalf("prune: %+v", r)
		}
		b := x.client("reader")
		for _, cur := range []int64{0, 5} {
			wantReset(x, fmt.Sprintf("cursor %d below horizon 6", cur), b.pull(wideLimits, notesSub(cur)), cur)
		}
		wantIncremental(x, "cursor at the horizon", b.pull(wideLimits, notesSub(6)), 6, 10)
		wantIncremental(x, "cursor above the horizon", b.pull(wideLimits, notesSub(8)), 8, 10)
		// The client re-pulls from -1 and converges.
		boot := b.pull(wideLimits, notesSub(-1))
		if !boot.start.Bootstrap || boot.start.Status != ssp2.SubActive || len(boot.rows) != 10 || boot.end.NextCursor != 10 || boot.end.BootstrapState != nil {
			x.t.Fatalf("re-bootstrap after the reset: %+v, %d rows, cursor %d", boot.start, len(boot.rows), boot.end.NextCursor)
		}
		if st := x.eng.Metrics().Retention; st.Commits != 6 || st.Horizons["p"] != 6 {
			x.t.Fatalf("retention metrics: %+v", st)
		}
	}},
	{name: "BootstrapRestartsWhenPinBelowHorizon", fn: func(e *env) {
		x := e.engine()
		defer x.close()
		w := x.client("writer")
		for i := range 10 {
			w.push("c"+strconv.Itoa(i), w.note(fmt.Sprintf("n%02d", i), "v"))
		}
		b := x.client("reader")
		page := ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitCommits: 100, LimitSnapshotRows: 3, MaxSnapshotPages: 1}
		s := notesSub(-1)
		first := b.pull(page, s)
		if first.end.BootstrapState == nil || first.end.NextCursor != 10 || len(first.rows) != 3 {
			x.t.Fatalf("first bootstrap page: cursor %d, %d rows, token %s", first.end.NextCursor, len(first.rows), first.end.BootstrapState)
		}
		s.Cursor, s.BootstrapState = first.end.NextCursor, first.end.BootstrapState
		// The pin (10) is still at or above the horizon: the token resumes.
		for i := 10; i < 15; i++ {
			w.push("c"+strconv.Itoa(i), w.note(fmt.Sprintf("n%02d", i), "v"))
		}
		x.prune(keepNewest(5)) // horizon 10 == pin
		resumed := b.pull(page, s)
		if resumed.end.NextCursor != 10 || len(resumed.rows) != 3 || resumed.rows[0].Values[0] != "n03" {
			x.t.Fatalf("resume at pin 10 with horizon 10: cursor %d, first row %v", resumed.end.NextCursor, resumed.rows[0].Values)
		}
		// Prune past the pin: the next page restarts silently at a fresh pin.
		x.prune(keepNewest(2)) // horizon 13 > pin 10
		restarted := b.pull(page, s)
		if restarted.start.Status != ssp2.SubActive || !restarted.start.Bootstrap || restarted.end.NextCursor != 15 ||
			len(restarted.rows) != 3 || restarted.rows[0].Values[0] != "n00" || restarted.end.BootstrapState == nil {
			x.t.Fatalf("bootstrap with a pin below the horizon: %+v, cursor %d, rows %d (first %v); want a silent restart at pin 15 from the first row",
				restarted.start, restarted.end.NextCursor, len(restarted.rows), restarted.rows[0].Values)
		}
	}},
	{name: "ClockDrivesActiveWindowAndAgeForce", fn: func(e *env) {
		x := e.engine()
		defer x.close()
		w := x.client("writer")
		for i := range 10 {
			w.push("c"+strconv.Itoa(i), w.note("n"+strconv.Itoa(i), "v"))
		}
		// A reader pulls to cursor 4; its record is still buffered in the
		// partition's actor, which writes it back before planning.
		b := x.client("reader")
		wantIncremental(x, "reader", b.pull(ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitCommits: 4}, notesSub(0)), 0, 4)
		floors := storage.RetentionPolicy{ActiveWindowMs: (14 * day).Milliseconds(), AgeForceMs: (30 * day).Milliseconds(), MinRetainedCommits: 0}
		r := x.prune(floors)
		if r.HorizonAfter != 4 || r.Plan.Binding != storage.BindingActiveClient {
			x.t.Fatalf("prune with an active reader at 4: %+v", r)
		}
		// 14 days later the reader is no longer active; the writer pushes
		// again (and so is active at cursor -1, which holds nothing).
		x.advance(14*day + time.Millisecond)
		w.push("c10", w.note("n10", "v"))
		r = x.prune(floors)
		if r.HorizonAfter != 11 || r.Plan.Binding != storage.BindingMinRetained {
			x.t.Fatalf("prune after the reader went quiet: %+v", r)
		}
		wantReset(x, "the quiet reader", b.pull(wideLimits, notesSub(4)), 4)
		// Age force: an active reader at 12 holds commits back for 30 days.
		w.push("c11", w.note("n11", "v"))
		w.push("c12", w.note("n12", "v"))
		wantIncremental(x, "reader again", b.pull(wideLimits, notesSub(12)), 12, 13)
		x.advance(29 * day)
		wantIncremental(x, "reader stays active", b.pull(wideLimits, notesSub(13)), 13, 13)
		if r := x.prune(floors); r.HorizonAfter != 13 {
			x.t.Fatalf("29 days: %+v", r)
		}
		// A commit at day 44, then quiet; the reader (active, last seen at
		// day 43) stays at 13. At day 75 a new commit arrives: commit 14
		// is 31 days old and may be forced out past the reader, 15 not.
		x.advance(day)
		w.push("c13", w.note("n13", "v")) // seq 14
		x.advance(31 * day)
		w.push("c14", w.note("n14", "v")) // seq 15, recent
		r = x.prune(storage.RetentionPolicy{ActiveWindowMs: (60 * day).Milliseconds(), AgeForceMs: (30 * day).Milliseconds()})
		if r.HorizonAfter != 14 || r.Plan.Binding != storage.BindingAgeForce {
			x.t.Fatalf("age force past an active reader at 13 (commit 14 is 31 days old, 15 is new): %+v", r)
		}
	}},
	{name: "PrunedWhileScanning", fn: func(e *env) {
		// Another process prunes while this one scans the log for a pull:
		// the scan misses the pruned commits, and the pull must answer
		// cursor_expired rather than a window with a gap.
		w := e.engine()
		c := w.client("writer")
		for i := range 10 {
			c.push("c"+strconv.Itoa(i), c.note("n"+strconv.Itoa(i), "v"))
		}
		w.close()
		st := &pruneDuringScan{Log: e.b.Log, retention: e.b.Retention}
		wrapped := e.b
		wrapped.Log = st
		x := e.engineOn(wrapped) // a fresh actor: no log tail, pulls scan storage
		defer x.close()
		b := x.client("reader")
		st.through.Store(6)
		wantReset(x, "cursor 3, pruned through 6 during the scan", b.pull(wideLimits, notesSub(3)), 3)
		st.through.Store(8)
		wantIncremental(x, "cursor 8, pruned through 8 during the scan", b.pull(wideLimits, notesSub(8)), 8, 10)
		if st.through.Load() != 0 {
			x.t.Fatal("the scan did not run (the prune hook was not used)")
		}
	}},
	{name: "PruneConcurrentWithPushesAndPulls", fn: func(e *env) {
		x := e.engine(func(c *engine.Config) { c.Retention.BatchCommits = 3 })
		defer x.close()
		const writers, perWriter = 4, 40
		var wg sync.WaitGroup
		errs := make(chan error, writers+4)
		done := make(chan struct{})
		for wr := range writers {
			c := x.client("w" + strconv.Itoa(wr))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWriter {
					id := fmt.Sprintf("w%d-%d", wr, i%7)
					if pr, err := c.pushErr(fmt.Sprintf("c%d", i), c.note(id, strconv.Itoa(i))); err != nil || pr.Status != ssp2.CommitApplied {
						errs <- fmt.Errorf("writer %d push %d: %v %+v", wr, i, err, pr)
						return
					}
				}
			}()
		}
		var pruned atomic.Int64
		var bg sync.WaitGroup
		bg.Add(1)
		go func() { // the pruner: through the partition's actor, and directly
			// on the store as another process (or synclane prune) would,
			// racing the actor's pulls
			defer bg.Done()
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				if n%2 == 0 {
					r, err := x.eng.Retention().Prune(x.ctx, "p", keepNewest(5), false)
					if err != nil {
						errs <- err
						return
					}
					pruned.Add(r.Commits)
					continue
				}
				info, err := x.b.Log.ReadPartition(x.ctx, "p")
				if err != nil {
					errs <- err
					return
				}
				r, err := x.b.Retention.PruneBatch(x.ctx, "p", storage.PruneRequest{LogEpoch: info.LogEpoch, ThroughSeq: info.MaxCommitSeq - 5, MaxCommits: 2})
				if err != nil {
					errs <- err
					return
				}
				pruned.Add(r.Commits)
			}
		}()
		// The reader keeps a replica: every incremental section must be the
		// whole window (cursor, next] (every commit is in its scope) or a
		// reset, after which it bootstraps again.
		reader := x.client("reader")
		replica := map[string]string{}
		cursor := int64(-1)
		resets := 0
		bg.Add(1)
		go func() {
			defer bg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				next, reset, err := reader.syncReplica(replica, cursor)
				if err != nil {
					errs <- err
					return
				}
				if reset {
					resets++
				}
				cursor = next
			}
		}()
		wg.Wait()
		close(done)
		bg.Wait()
		close(errs)
		for err := range errs {
			x.t.Fatal(err)
		}
		pruned.Add(x.prune(keepNewest(5)).Commits)
		info := x.readPartition("p")
		if info.MaxCommitSeq != writers*perWriter || pruned.Load() != info.HorizonSeq || info.HorizonSeq != writers*perWriter-5 {
			x.t.Fatalf("after the run: %+v, pruned %d commits", info, pruned.Load())
		}
		// Nothing above the horizon was lost: catch up, then compare the
		// replica with the stored rows.
		for range 3 {
			next, _, err := reader.syncReplica(replica, cursor)
			if err != nil {
				x.t.Fatal(err)
			}
			cursor = next
		}
		rows := x.scanRows("p", storage.RowQuery{Table: x.notes, Scopes: map[string][]string{}, Limit: 1000})
		if len(rows) != len(replica) || cursor != info.MaxCommitSeq {
			x.t.Fatalf("replica has %d rows at cursor %d, store %d rows at max %d (resets %d)", len(replica), cursor, len(rows), info.MaxCommitSeq, resets)
		}
		for _, r := range rows {
			if replica[r.RowID] != r.Values[2] {
				x.t.Fatalf("row %s: replica %q, store %v", r.RowID, replica[r.RowID], r.Values[2])
			}
		}
	}},
	{name: "IdempotencyAfterPruning", fn: func(e *env) {
		x := e.engine()
		defer x.close()
		c := x.client("c")
		base1 := int64(1)
		later := c.note("x", "later")
		later.BaseVersion = &base1
		if pr := c.push("late", later); pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.RowMissing) {
			x.t.Fatalf("update of a missing row: %+v", pr)
		}
		first := c.push("first", c.note("a", "1"))
		if first.Status != ssp2.CommitApplied || *first.CommitSeq != 1 {
			x.t.Fatalf("first: %+v", first)
		}
		c.push("create-x", c.note("x", "0")) // seq 2: x now exists at version 1
		// Before pruning, retries replay the stored outcomes.
		if pr := c.push("first", c.note("a", "1")); pr.Status != ssp2.CommitCached || *pr.CommitSeq != 1 {
			x.t.Fatalf("retry before pruning: %+v", pr)
		}
		if pr := c.push("late", later); pr.Status != ssp2.CommitRejected {
			x.t.Fatalf("retry of the rejected commit before pruning: %+v", pr)
		}
		c.push("third", c.note("b", "1")) // seq 3
		if r := x.prune(keepNewest(1)); r.HorizonAfter != 2 || r.IdempotencyRecords != 3 {
			x.t.Fatalf("prune through 2: %+v (want the records of seqs 1 and 2 and the rejection written at 0)", r)
		}
		// Pruned records: the retry is a new commit.
		if pr := c.push("first", c.note("a", "1")); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 4 {
			x.t.Fatalf("retry after its record was pruned: %+v, want applied again as seq 4", pr)
		}
		if pr := c.push("late", later); pr.Status != ssp2.CommitApplied {
			x.t.Fatalf("retry of the pruned rejection: %+v, want evaluated again (x exists at version 1 now)", pr)
		}
		// A commit above the horizon still replays.
		if pr := c.push("third", c.note("b", "1")); pr.Status != ssp2.CommitCached || *pr.CommitSeq != 3 {
			x.t.Fatalf("retry above the horizon: %+v", pr)
		}
	}},
	{name: "TwoProcessesOneMaintenancePass", shared: true, fn: func(e *env) {
		other := e.share()
		x := e.engine(func(c *engine.Config) {
			c.Retention = retention.Options{Policy: keepNewest(10), BatchCommits: 7}
		})
		defer x.close()
		y := e.engineOn(other, func(c *engine.Config) {
			c.Retention = retention.Options{Policy: keepNewest(10), BatchCommits: 7}
		})
		defer y.close()
		w := x.client("writer")
		for i := range 120 {
			w.push("c"+strconv.Itoa(i), w.note("n"+strconv.Itoa(i%9), strconv.Itoa(i)))
		}
		// While one process holds the lock, the other's pass does nothing.
		unlock, ok, err := e.b.Retention.TryLockMaintenance(e.ctx)
		if err != nil || !ok {
			e.t.Fatalf("TryLockMaintenance: %v %v", ok, err)
		}
		if r, err := y.eng.Retention().MaintenancePass(e.ctx, false); err != nil || !r.Skipped || r.Commits() != 0 {
			e.t.Fatalf("pass while another process holds the lock: %+v, %v", r, err)
		}
		unlock()
		// Both passes at once: one does the work, the other is skipped or
		// finds nothing left.
		var wg sync.WaitGroup
		reps := make([]retention.MaintenanceReport, 2)
		errs := make([]error, 2)
		for i, eng := range []*engine.Engine{x.eng, y.eng} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reps[i], errs[i] = eng.Retention().MaintenancePass(e.ctx, false)
			}()
		}
		wg.Wait()
		worked := 0
		for i := range reps {
			if errs[i] != nil {
				e.t.Fatalf("pass %d: %v", i, errs[i])
			}
			if reps[i].Commits() > 0 {
				worked++
				if reps[i].Commits() != 110 || len(reps[i].Pruned) != 1 || reps[i].Pruned[0].Batches != 16 {
					e.t.Fatalf("the working pass: %+v", reps[i])
				}
			}
		}
		if worked != 1 {
			e.t.Fatalf("%d passes pruned something (%+v), want exactly one", worked, reps)
		}
		if info := e.readPartition("p"); info.HorizonSeq != 110 {
			e.t.Fatalf("horizon after the passes: %+v", info)
		}
	}},
}

// pruneDuringScan prunes through the armed seq right before the next
// ScanChanges, as another process sharing the database could.
type pruneDuringScan struct {
	storage.Log
	retention storage.Retention
	through   atomic.Int64
}

func (p *pruneDuringScan) ScanChanges(ctx context.Context, partition string, q storage.ChangeQuery) (storage.ChangeScan, error) {
	if t := p.through.Swap(0); t > 0 {
		info, err := p.Log.ReadPartition(ctx, partition)
		if err != nil {
			return storage.ChangeScan{}, err
		}
		if _, err := p.retention.PruneBatch(ctx, partition, storage.PruneRequest{LogEpoch: info.LogEpoch, ThroughSeq: t, MaxCommits: 1000}); err != nil {
			return storage.ChangeScan{}, err
		}
	}
	return p.Log.ScanChanges(ctx, partition, q)
}

// syncReplica pulls once from cursor and applies the section to replica
// (notes body by id); a reset clears the replica and returns cursor -1.
// An incremental section must hold every commit of (cursor, next].
func (c *engClient) syncReplica(replica map[string]string, cursor int64) (int64, bool, error) {
	s := notesSub(cursor)
	for {
		sec, err := c.pullErr(wideLimits, s)
		if err != nil {
			return cursor, false, err
		}
		switch {
		case sec.start.Status == ssp2.SubReset:
			if sec.start.ReasonCode != string(syncerr.CursorExpired) || sec.end.NextCursor != cursor || len(sec.commits) != 0 {
				return cursor, false, fmt.Errorf("reset section from %d: %+v next %d", cursor, sec.start, sec.end.NextCursor)
			}
			clear(replica)
			return -1, true, nil
		case sec.start.Bootstrap:
			if s.BootstrapState == nil {
				clear(replica)
			}
			for _, r := range sec.rows {
				replica[r.Values[0].(string)] = r.Values[2].(string)
			}
			s.Cursor, s.BootstrapState = sec.end.NextCursor, sec.end.BootstrapState
			if s.BootstrapState == nil {
				return sec.end.NextCursor, false, nil
			}
			continue
		}
		next := sec.end.NextCursor
		if int64(len(sec.commits)) != next-cursor {
			return cursor, false, fmt.Errorf("incremental (%d, %d] holds %d commits: a gap", cursor, next, len(sec.commits))
		}
		for i, cm := range sec.commits {
			if cm.CommitSeq != cursor+int64(i)+1 {
				return cursor, false, fmt.Errorf("incremental (%d, %d]: commit %d has seq %d", cursor, next, i, cm.CommitSeq)
			}
			for _, ch := range cm.Changes {
				row, err := ssp2.NewRowCodec(c.x.notes.Columns).Decode(ch.Row)
				if err != nil {
					return cursor, false, err
				}
				replica[ch.RowID] = row[2].(string)
			}
		}
		return next, false, nil
	}
}
