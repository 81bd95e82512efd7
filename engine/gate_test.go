package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
)

// openShared opens another handle on one SQLite file: one "process".
func openShared(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func wantNotReady(t *testing.T, err error, details string) {
	t.Helper()
	var e *syncerr.Error
	if !errors.As(err, &e) || e.Code != syncerr.SchemaNotReady {
		t.Fatalf("got %v, want sync.schema_not_ready", err)
	}
	if details != "" && string(e.Details) != details {
		t.Fatalf("details %s, want %s", e.Details, details)
	}
	if e.Spec().HTTPStatus != 503 || !e.Spec().Retryable {
		t.Fatalf("schema_not_ready must be a retryable 503: %+v", e.Spec())
	}
}

func TestGatePendingCheckpointRefusesOtherProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	decl := storage.CheckpointDeclaration{Partition: "p1", Name: "proj", SchemaVersion: 1}
	fa := newFixture(t, openShared(t, path), func(c *engine.Config) { c.Checkpoints = []storage.CheckpointDeclaration{decl} })
	fb := newFixture(t, openShared(t, path))

	a := fa.client("alice", "ca")
	if pr := a.push("c1", upsert("tasks", "t1", fa.row("t1", "P", "x"), nil)); pr.Status != ssp2.CommitApplied {
		t.Fatalf("declaring process must serve during its backfill: %+v", pr)
	}
	// The other process refuses before anything, even the epoch handshake.
	b := &client{f: fb, id: engine.Identity{ActorID: "bob", Partition: "p1"}, cid: "cb", wire: ssp2.WireV3, sv: 1}
	_, err := b.sync(&ssp2.PullHeader{Accept: 1})
	wantNotReady(t, err, `{"partition":"p1","projection":"proj"}`)
	// Other partitions are refused too: pending checks are server-wide.
	b.id.Partition = "p2"
	_, err = b.sync(&ssp2.PullHeader{Accept: 1})
	wantNotReady(t, err, `{"partition":"p1","projection":"proj"}`)
	b.id.Partition = "p1"

	out, err := fa.store.Checkpoints.ActivateCheckpoint(context.Background(), "p1", "proj", 0, 0, []string{"nothing_changed_here"}, 0)
	if err != nil || out != storage.Activated {
		t.Fatalf("activate: %v %v", out, err)
	}
	b = fb.client("bob", "cb")
	s := b.pull(ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))["s"]
	if len(s.rows) != 1 {
		t.Fatalf("after activation the other process serves: %d rows", len(s.rows))
	}
}

func TestGateSchemaBumpStopsOldProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	old := newFixture(t, openShared(t, path))
	a := old.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", old.row("t1", "P", "x"), nil))

	// A version-2 process migrates the database and declares a backfill.
	v2, err := schema.Parse([]byte(`{"version":2,"tables":[
	 {"name":"tasks","columns":[
	   {"name":"id","type":"string"},{"name":"project_id","type":"string"},
	   {"name":"title","type":"string"},{"name":"code","type":"string","nullable":true},
	   {"name":"note","type":"string","nullable":true}],
	  "primaryKey":"id","scopes":["project:{project_id}"],
	  "indexes":[{"name":"tasks_code","columns":["code"],"unique":true}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	stNew := openShared(t, path)
	newEng, err := engine.New(context.Background(), engine.Config{Schema: v2, Backend: stNew.Backend(), Resolver: engine.AllowAll(v2),
		Checkpoints: []storage.CheckpointDeclaration{{Partition: "p1", Name: "notes", SchemaVersion: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer newEng.Close()

	// The still-running version-1 process refuses and writes nothing.
	_, err = a.sync(&ssp2.PushCommit{ClientCommitID: "c2", Operations: []ssp2.Operation{upsert("tasks", "t2", old.row("t2", "P", "x"), nil)}})
	wantNotReady(t, err, `{"runningSchemaVersion":1,"storedSchemaVersion":2}`)
	_, err = a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", 0, "P"))
	wantNotReady(t, err, `{"runningSchemaVersion":1,"storedSchemaVersion":2}`)
	info, _ := stNew.ReadPartition(context.Background(), "p1")
	if info.MaxCommitSeq != 1 {
		t.Fatalf("the old process wrote: max seq %d", info.MaxCommitSeq)
	}
	// An old writer that bypasses the gate is stopped by the fence itself.
	tx, err := old.store.Log.BeginPush(context.Background(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	err = tx.AppendCommit(context.Background(), storage.CommitRecord{Seq: tx.Partition().MaxCommitSeq + 1, ActorID: "x", ClientID: "x", ClientCommitID: "raw"})
	if err == nil {
		err = tx.Commit(context.Background())
	}
	tx.Rollback(context.Background())
	if !errors.Is(err, storage.ErrWriterFenced) {
		t.Fatalf("old raw append: %v, want ErrWriterFenced", err)
	}
}

// hookStore runs a hook in the middle of building a pull reply.
type hookStore struct {
	*sqlite.Store
	mid func()
}

// Backend gives the engine the store with the hooked Log and Rows roles
// and without the bootstrap fast paths, so every bootstrap page reads
// through the hooked VisitRows.
func (h *hookStore) Backend() storage.Backend {
	b := h.Store.Backend()
	b.Log, b.Rows, b.RowEncoder, b.ImageCopier = h, h, nil, nil
	return b
}

func (h *hookStore) ScanChanges(ctx context.Context, p string, q storage.ChangeQuery) (storage.ChangeScan, error) {
	if h.mid != nil {
		h.mid()
	}
	return h.Store.ScanChanges(ctx, p, q)
}

// ScanRows and VisitRows are always a storage read (incremental pulls may
// be answered from the actor's in-memory log tail), so bootstrap pulls
// drive the hook.
func (h *hookStore) ScanRows(ctx context.Context, p string, q storage.RowQuery) ([]storage.RowRecord, error) {
	if h.mid != nil {
		h.mid()
	}
	return h.Store.ScanRows(ctx, p, q)
}

func (h *hookStore) VisitRows(ctx context.Context, p string, q storage.RowQuery, fn func(storage.RowRecord) error) error {
	if h.mid != nil {
		h.mid()
	}
	return h.Store.VisitRows(ctx, p, q, fn)
}

func TestGateEpochRotationDuringBuildIsRefused(t *testing.T) {
	hs := &hookStore{Store: openShared(t, filepath.Join(t.TempDir(), "db.sqlite"))}
	f := newFixture(t, hs)
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))

	rotated := false
	hs.mid = func() {
		if !rotated {
			rotated = true
			if _, err := hs.Store.RotateLogEpoch(context.Background(), "p1", 0); err != nil {
				t.Error(err)
			}
		}
	}
	// Mixed push + pull: the push is durable, the reply is refused.
	_, err := a.sync(&ssp2.PushCommit{ClientCommitID: "c2", Operations: []ssp2.Operation{upsert("tasks", "t2", f.row("t2", "P", "y"), nil)}},
		&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
	wantNotReady(t, err, `{"logEpochChanged":true}`)
	// The retry is told to reset, and after the handshake the push replays as cached.
	rep, err := a.sync(&ssp2.PullHeader{Accept: 1})
	if err != nil || !rep.Header().ResetRequired {
		t.Fatalf("retry after rotation: %v %+v", err, rep)
	}
	a.epoch = &rep.Header().LogEpoch
	if pr := a.push("c2", upsert("tasks", "t2", f.row("t2", "P", "y"), nil)); pr.Status != ssp2.CommitCached || *pr.CommitSeq != 2 {
		t.Fatalf("replayed push: %+v", pr)
	}
}

// Races epoch rotations and a schema migration against pulls and pushes:
// every rotation or migration that lands while a reply is being built must
// refuse that reply, and no reply is released under a changed token.
func TestGateRaceRotationsAndMigrationAgainstTraffic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	hs := &hookStore{Store: openShared(t, path)}
	// One request per build, so each mid-build rotation refuses exactly one
	// reply (with group commit, a rotation refuses its whole batch); no
	// inline page kept, so every request builds its page from rows (a kept
	// page would be reused or patched forward, with no row read to land a
	// rotation in).
	f := newFixture(t, hs, func(c *engine.Config) { c.DisableGroupCommit = true; c.Segments.InlinePageBytes = -1 })
	var hookRotations, midBuilds atomic.Int64
	var inject atomic.Int64
	var mu sync.Mutex
	hs.mid = func() {
		midBuilds.Add(1)
		// Every third build gets an epoch rotation in its middle.
		if inject.Add(1)%3 == 0 {
			mu.Lock()
			defer mu.Unlock()
			if _, err := hs.Store.RotateLogEpoch(context.Background(), "p1", 0); err != nil {
				t.Error(err)
				return
			}
			hookRotations.Add(1)
		}
	}
	const workers, rounds = 4, 30
	var refusedEpoch, served, resets atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &client{f: f, id: engine.Identity{ActorID: fmt.Sprintf("a%d", w), Partition: "p1"}, cid: fmt.Sprintf("c%d", w), wire: ssp2.WireV3, sv: 1}
			for i := range rounds {
				if c.epoch == nil {
					rep, err := c.sync(&ssp2.PullHeader{Accept: 1})
					if err != nil {
						t.Error(err)
						return
					}
					c.epoch = &rep.Header().LogEpoch
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				// A bootstrap (one page: one ScanRows call) is built per request.
				rep, err := c.sync(&ssp2.PushCommit{ClientCommitID: id, Operations: []ssp2.Operation{upsert("tasks", id, f.row(id, "P", "x"), nil)}},
					&ssp2.PullHeader{Accept: 1, MaxSnapshotPages: 1, LimitSnapshotRows: 50000}, sub("s", -1, "P"))
				var e *syncerr.Error
				switch {
				case errors.As(err, &e) && e.Code == syncerr.SchemaNotReady:
					var d map[string]any
					if json.Unmarshal(e.Details, &d) == nil && d["logEpochChanged"] == true {
						refusedEpoch.Add(1)
					}
					c.epoch = nil
				case err != nil:
					t.Error(err)
					return
				case rep.Header().ResetRequired:
					resets.Add(1)
					c.epoch = nil
				default:
					served.Add(1)
					if rep.Header().LogEpoch != *c.epoch {
						t.Errorf("reply released under epoch %s, request epoch %s", rep.Header().LogEpoch, *c.epoch)
					}
				}
			}
		}()
	}
	wg.Wait()
	if hookRotations.Load() == 0 || served.Load() == 0 {
		t.Fatalf("the race did not exercise both paths: rotations=%d served=%d resets=%d refused=%d builds=%d", hookRotations.Load(), served.Load(), resets.Load(), refusedEpoch.Load(), midBuilds.Load())
	}
	if refusedEpoch.Load() != hookRotations.Load() {
		t.Fatalf("%d rotations landed mid-build but %d replies were refused", hookRotations.Load(), refusedEpoch.Load())
	}

	// A migration in the middle of a build refuses that reply and every later one.
	v2 := `{"version":2,"tables":[{"name":"tasks","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"title","type":"string"},{"name":"code","type":"string","nullable":true}],"primaryKey":"id","scopes":["project:{project_id}"],"indexes":[{"name":"tasks_code","columns":["code"],"unique":true}]}]}`
	s2, err := schema.Parse([]byte(v2))
	if err != nil {
		t.Fatal(err)
	}
	migrated := false
	hs.mid = func() {
		if !migrated {
			migrated = true
			if err := openShared(t, path).EnsureSchema(context.Background(), s2); err != nil {
				t.Error(err)
			}
		}
	}
	c := f.client("late", "late")
	_, err = c.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
	wantNotReady(t, err, `{"runningSchemaVersion":1,"storedSchemaVersion":2}`)
	_, err = c.sync(&ssp2.PullHeader{Accept: 1}, sub("s", 0, "P"))
	wantNotReady(t, err, `{"runningSchemaVersion":1,"storedSchemaVersion":2}`)
}

// panicStore panics inside the partition actor once.
type panicStore struct {
	*sqlite.Store
	armed atomic.Bool
}

// Backend gives the engine the store with the panicking Rows role and
// without the bootstrap fast paths, so bootstrap pages read through it.
func (p *panicStore) Backend() storage.Backend {
	b := p.Store.Backend()
	b.Rows, b.RowEncoder, b.ImageCopier = p, nil, nil
	return b
}

func (p *panicStore) ScanRows(ctx context.Context, part string, q storage.RowQuery) ([]storage.RowRecord, error) {
	if p.armed.CompareAndSwap(true, false) {
		panic("storage driver bug")
	}
	return p.Store.ScanRows(ctx, part, q)
}

func (p *panicStore) VisitRows(ctx context.Context, part string, q storage.RowQuery, fn func(storage.RowRecord) error) error {
	if p.armed.CompareAndSwap(true, false) {
		panic("storage driver bug")
	}
	return p.Store.VisitRows(ctx, part, q, fn)
}

// A request that crashes its partition actor fails with a retryable
// sync.internal_error; the process and the partition keep serving, and
// nothing committed is lost.
func TestCrashingRequestFailsAloneAndActorRestarts(t *testing.T) {
	ps := &panicStore{Store: openShared(t, filepath.Join(t.TempDir(), "db.sqlite"))}
	f := newFixture(t, ps)
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	ps.armed.Store(true)
	_, err := a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
	var e *syncerr.Error
	if !errors.As(err, &e) || e.Code != syncerr.InternalError || !e.Spec().Retryable {
		t.Fatalf("crashing request answered %v, want retryable sync.internal_error", err)
	}
	// The retry is served by the restarted actor, with everything committed.
	s := a.pull(ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))["s"]
	if len(s.rows) != 1 || s.end.NextCursor != 1 {
		t.Fatalf("after the restart: %d rows, cursor %d", len(s.rows), s.end.NextCursor)
	}
	if pr := a.push("c2", upsert("tasks", "t2", f.row("t2", "P", "y"), nil)); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 2 {
		t.Fatalf("push after the restart: %+v", pr)
	}
	if f.eng.ActorStats().Restarts == 0 {
		t.Fatal("no actor restart was recorded")
	}
}
