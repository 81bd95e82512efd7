package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/backfill"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
)

const backfillSchema = `{"version":1,"tables":[
 {"name":"todos","columns":[{"name":"id","type":"string"},{"name":"list_id","type":"string"},{"name":"title","type":"string"}],
  "primaryKey":"id","scopes":["list:{list_id}"]},
 {"name":"todo_index","columns":[{"name":"id","type":"string"},{"name":"list_id","type":"string"},{"name":"shout","type":"string"}],
  "primaryKey":"id","scopes":["list:{list_id}"]}]}`

// activateHook runs hooks before ActivateCheckpoint and BeginPush reach
// the store.
type activateHook struct {
	*sqlite.Store
	before      func() error
	beforeBegin func()
}

// Backend gives the engine the store with the hooked Log and Checkpoints
// roles.
func (h *activateHook) Backend() storage.Backend {
	b := h.Store.Backend()
	b.Log, b.Checkpoints = h, h
	return b
}

func (h *activateHook) BeginPush(ctx context.Context, p string) (storage.PushTx, error) {
	if h.beforeBegin != nil {
		h.beforeBegin()
	}
	return h.Store.BeginPush(ctx, p)
}

func (h *activateHook) ActivateCheckpoint(ctx context.Context, p, n string, epoch, wm int64, src []string, now int64) (storage.ActivationOutcome, error) {
	if h.before != nil {
		if err := h.before(); err != nil {
			return "", err
		}
	}
	return h.Store.ActivateCheckpoint(ctx, p, n, epoch, wm, src, now)
}

type bfFixture struct {
	t     *testing.T
	s     *schema.Schema
	store *activateHook
	eng   *engine.Engine
	codec *ssp2.RowCodec
}

func newBackfillFixture(t *testing.T, path string) *bfFixture {
	s, err := schema.Parse([]byte(backfillSchema))
	if err != nil {
		t.Fatal(err)
	}
	f := &bfFixture{t: t, s: s, store: &activateHook{Store: openShared(t, path)}, codec: ssp2.NewRowCodec(s.Table("todos").Columns)}
	f.eng, err = engine.New(context.Background(), engine.Config{Schema: s, Backend: f.store.Backend(), Resolver: engine.AllowAll(s),
		Checkpoints: []storage.CheckpointDeclaration{{Partition: "p1", Name: "shout", SchemaVersion: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.eng.Close() })
	return f
}

func (f *bfFixture) push(ccid string, ops ...ssp2.Operation) {
	f.t.Helper()
	epoch := ""
	c := &ssp2.ReqHeader{ClientID: "writer", SchemaVersion: 1}
	// acquire the epoch, then push
	rep, err := f.eng.Sync(context.Background(), engine.Identity{ActorID: "w", Partition: "p1"},
		&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{c, &ssp2.PullHeader{Accept: 1}}})
	if err != nil {
		f.t.Fatal(err)
	}
	epoch = rep.Header().LogEpoch
	c.LogEpoch = &epoch
	rep, err = f.eng.Sync(context.Background(), engine.Identity{ActorID: "w", Partition: "p1"},
		&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{c, &ssp2.PushCommit{ClientCommitID: ccid, Operations: ops}}})
	if err != nil || results(rep)[0].Status != ssp2.CommitApplied {
		f.t.Fatalf("push %s: %v %+v", ccid, err, rep)
	}
}

func (f *bfFixture) todo(id, title string) ssp2.Operation {
	b, err := f.codec.AppendSparse(nil, ssp2.Row{id, "L", title}, nil, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: b}
}

func (f *bfFixture) spec() backfill.Spec {
	return backfill.Spec{Partition: "p1", Name: "shout", Source: "todos", Target: "todo_index", BatchSize: 10,
		Project: func(src storage.RowRecord) (ssp2.Row, bool) {
			return ssp2.Row{src.RowID, src.Values[1], strings.ToUpper(src.Values[2].(string))}, true
		}}
}

func (f *bfFixture) index() map[string]string {
	rows, err := f.store.ScanRows(context.Background(), "p1", storage.RowQuery{Table: f.s.Table("todo_index"), Scopes: map[string][]string{}, Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rows {
		out[r.RowID] = r.Values[2].(string)
	}
	return out
}

func TestBackfillRunsToActivationAndCatchesUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	f := newBackfillFixture(t, path)
	for i := range 25 {
		id := string(rune('a'+i)) + "-todo"
		f.push("c"+id, f.todo(id, "task "+id))
	}
	// A write lands after the full pass and before activation: the first
	// activation is stale and the runner catches up with just that change.
	late := false
	f.store.before = func() error {
		if !late {
			late = true
			f.push("late", f.todo("a-todo", "renamed"), ssp2.Operation{Table: "todos", RowID: "b-todo", Op: ssp2.OpDelete})
		}
		return nil
	}
	rep, err := f.eng.Backfill().Run(context.Background(), f.spec())
	if err != nil {
		t.Fatal(err)
	}
	// Seqs: 25 source commits, 3 full-pass projection batches (26-28) at pin
	// 25, the late write (29); the catch-up pins at 29.
	if rep.Outcome != storage.Activated || rep.Rounds != 2 || rep.ObservedRows != 27 || rep.Watermark != 29 || rep.OwnerEpoch != 1 {
		t.Fatalf("report %+v", rep)
	}
	idx := f.index()
	if len(idx) != 24 || idx["a-todo"] != "RENAMED" || idx["c-todo"] != "TASK C-TODO" {
		t.Fatalf("projection: %d rows, a=%q c=%q", len(idx), idx["a-todo"], idx["c-todo"])
	}
	if _, ok := idx["b-todo"]; ok {
		t.Fatal("deleted source row still projected")
	}
	cps, _ := f.store.ReadCheckpoints(context.Background())
	if len(cps) != 1 || cps[0].State != storage.CheckpointActivated || cps[0].Watermark != 29 {
		t.Fatalf("checkpoint after run: %+v", cps)
	}
	// Projection writes went through the log: a client pulls them.
	info, _ := f.store.ReadPartition(context.Background(), "p1")
	scan, err := f.store.ScanChanges(context.Background(), "p1", storage.ChangeQuery{Table: "todo_index", Scopes: map[string][]string{}, AfterSeq: 0, UpToSeq: info.MaxCommitSeq, LimitChanges: 1000})
	if err != nil || len(scan.Commits) != 4 { // 3 full-pass batches + 1 catch-up
		t.Fatalf("projection commits: %d, %v", len(scan.Commits), err)
	}
}

// seedAndCrashBeforeActivation pushes n todos (seqs 1..n), then runs a
// backfill that dies right before activating: its full pass is stored
// (watermark n), the checkpoint not activated.
func (f *bfFixture) seedAndCrashBeforeActivation(n int) {
	f.t.Helper()
	for i := range n {
		id := string(rune('a'+i)) + "-todo"
		f.push("c"+id, f.todo(id, "x"))
	}
	crash := errors.New("process died before activating")
	f.store.before = func() error { return crash }
	if _, err := f.eng.Backfill().Run(context.Background(), f.spec()); !errors.Is(err, crash) {
		f.t.Fatalf("first run: %v", err)
	}
}

func TestBackfillResumesFromStoredWatermarkAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	f := newBackfillFixture(t, path)
	f.seedAndCrashBeforeActivation(12)
	f.push("meanwhile", f.todo("z-todo", "new"))
	f.store.before = nil
	rep, err := f.eng.Backfill().Run(context.Background(), f.spec())
	if err != nil {
		t.Fatal(err)
	}
	// The second run claims a new epoch and only replays the one source
	// change since the stored watermark (12): no second full pass. Seqs: 12
	// source commits, 2 projection batches (13-14), the new write (15).
	if rep.Outcome != storage.Activated || rep.OwnerEpoch != 2 || rep.ObservedRows != 13 || rep.Watermark != 15 {
		t.Fatalf("resumed run: %+v", rep)
	}
	if idx := f.index(); len(idx) != 13 || idx["z-todo"] != "NEW" {
		t.Fatalf("projection after resume: %v", idx)
	}
}

func TestBackfillSupersededOwnerStops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.sqlite")
	f := newBackfillFixture(t, path)
	for i := range 15 {
		id := string(rune('a'+i)) + "-todo"
		f.push("c"+id, f.todo(id, "x"))
	}
	spec := f.spec()
	claimed := false
	f.store.beforeBegin = func() {
		if !claimed { // another runner takes over before the first batch commits
			claimed = true
			if _, err := f.store.Store.ClaimCheckpoint(context.Background(), storage.CheckpointDeclaration{Partition: "p1", Name: "shout", SchemaVersion: 1}, 0); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := f.eng.Backfill().Run(context.Background(), spec); !errors.Is(err, backfill.ErrSuperseded) {
		t.Fatalf("superseded runner: %v", err)
	}
	if idx := f.index(); len(idx) != 0 {
		t.Fatalf("a superseded batch wrote %d projection rows", len(idx))
	}
}
