package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
)

const testSchemaJSON = `{"version":1,"tables":[
 {"name":"tasks","columns":[
   {"name":"id","type":"string"},{"name":"project_id","type":"string"},
   {"name":"title","type":"string"},{"name":"code","type":"string","nullable":true}],
  "primaryKey":"id","scopes":["project:{project_id}"],
  "indexes":[{"name":"tasks_code","columns":["code"],"unique":true}]}]}`

// backend is what a fixture runs on: a store of a backend package, or a
// test wrapper around one, which builds the roles the engine gets.
type backend interface {
	Backend() storage.Backend
}

type fixture struct {
	t       *testing.T
	eng     *engine.Engine
	store   storage.Backend // the roles the engine runs on
	schema  *schema.Schema
	codec   *ssp2.RowCodec
	mu      sync.Mutex
	allowed map[string]map[string][]string // actor → allowed scopes
}

func newFixture(t *testing.T, st backend, mut ...func(*engine.Config)) *fixture {
	t.Helper()
	s, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, store: st.Backend(), schema: s, codec: ssp2.NewRowCodec(s.Table("tasks").Columns),
		allowed: map[string]map[string][]string{}}
	cfg := engine.Config{Schema: s, Backend: f.store, Resolver: engine.ScopeResolverFunc(f.resolve), Segments: segments.Options{Images: sqliteimage.Builder{}}}
	for _, m := range mut {
		m(&cfg)
	}
	f.eng, err = engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.eng.Close() })
	return f
}

func (f *fixture) resolve(_ context.Context, id engine.Identity) (map[string][]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.allowed[id.ActorID]
	if !ok {
		return map[string][]string{"project_id": {"*"}}, nil
	}
	if a == nil {
		return nil, errors.New("resolver down")
	}
	return a, nil
}

func (f *fixture) allow(actor string, scopes map[string][]string) {
	f.mu.Lock()
	f.allowed[actor] = scopes
	f.mu.Unlock()
}

// fullRow is the full-row encoding of a task: the payload of wire
// versions 1 and 2.
func (f *fixture) fullRow(id, project, title string) []byte {
	b, err := f.codec.Append(nil, ssp2.Row{id, project, title, nil})
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// patch is a wire-v3 sparse payload of task id presenting only the key
// and the given columns (by index) of row.
func (f *fixture) patch(row ssp2.Row, cols ...int) []byte {
	present := ssp2.NewColumnSet(len(row))
	present.Add(0)
	for _, c := range cols {
		present.Add(c)
	}
	b, err := f.codec.AppendSparse(nil, row, present, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// row is the wire-v3 payload of a whole task (every column present).
func (f *fixture) row(id, project, title string) []byte {
	b, err := f.codec.AppendSparse(nil, ssp2.Row{id, project, title, nil}, nil, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// client is a test client: one clientId for one actor in one partition.
type client struct {
	f     *fixture
	id    engine.Identity
	cid   string
	epoch *string
	wire  uint16
	sv    int32
	// lastDetails is the PUSH_RESULT_DETAILS detailsJson of the last
	// push's answer ("" when none).
	lastDetails string
}

func (f *fixture) client(actor, cid string) *client {
	c := &client{f: f, id: engine.Identity{ActorID: actor, Partition: "p1"}, cid: cid, wire: ssp2.WireV3, sv: 1}
	rep, err := c.sync(&ssp2.PullHeader{Accept: 1})
	if err != nil {
		f.t.Fatalf("epoch acquisition: %v", err)
	}
	h := rep.Header()
	if !h.ResetRequired || h.LogEpoch == "" {
		f.t.Fatalf("epoch acquisition answered %+v", h)
	}
	c.epoch = &h.LogEpoch
	return c
}

func (c *client) sync(frames ...ssp2.Frame) (*engine.Reply, error) {
	h := &ssp2.ReqHeader{ClientID: c.cid, SchemaVersion: c.sv}
	if c.wire >= 2 {
		h.LogEpoch = c.epoch
	}
	msg := &ssp2.Message{WireVersion: c.wire, Kind: ssp2.KindRequest, Frames: append([]ssp2.Frame{h}, frames...)}
	// Round-trip through the codec so every reply is wire-valid.
	b, err := ssp2.Encode(msg)
	if err != nil {
		c.f.t.Fatalf("encode request: %v", err)
	}
	dec, err := ssp2.DecodeRequest(b)
	if err != nil {
		c.f.t.Fatalf("decode request: %v", err)
	}
	rep, err := c.f.eng.Sync(context.Background(), c.id, dec)
	if err != nil {
		return nil, err
	}
	var buf writerBuf
	if _, err := rep.WriteTo(&buf); err != nil {
		c.f.t.Fatalf("write reply: %v", err)
	}
	dec2, err := ssp2.DecodeResponse(buf.b)
	if err != nil {
		c.f.t.Fatalf("reply does not decode: %v", err)
	}
	// Streamed bootstrap pages exist only in the written bytes: inspect
	// what the client received.
	rep.Frames = dec2.Frames
	for _, f := range dec2.Frames {
		if ef, ok := f.(*ssp2.ErrorFrame); ok {
			return rep, &syncerr.Error{Code: syncerr.Code(ef.Code), Message: ef.Message, Details: ef.Details}
		}
	}
	return rep, nil
}

type writerBuf struct{ b []byte }

func (w *writerBuf) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

func upsert(table, id string, payload []byte, base *int64) ssp2.Operation {
	return ssp2.Operation{Table: table, RowID: id, Op: ssp2.OpUpsert, BaseVersion: base, Payload: payload}
}

func del(id string) ssp2.Operation {
	return ssp2.Operation{Table: "tasks", RowID: id, Op: ssp2.OpDelete}
}

func ver(v int64) *int64 { return &v }

func (c *client) push(ccid string, ops ...ssp2.Operation) *ssp2.PushResult {
	c.f.t.Helper()
	rep, err := c.sync(&ssp2.PushCommit{ClientCommitID: ccid, Operations: ops})
	if err != nil {
		c.f.t.Fatalf("push %s: %v", ccid, err)
	}
	rs := results(rep)
	if len(rs) != 1 {
		c.f.t.Fatalf("push %s: %d results", ccid, len(rs))
	}
	c.lastDetails = ""
	for _, fr := range rep.Frames {
		if d, ok := fr.(*ssp2.PushResultDetails); ok && len(d.Entries) == 1 {
			c.lastDetails = d.Entries[0].DetailsJSON
		}
	}
	return rs[0]
}

func results(rep *engine.Reply) []*ssp2.PushResult {
	var out []*ssp2.PushResult
	for _, f := range rep.Frames {
		if pr, ok := f.(*ssp2.PushResult); ok {
			out = append(out, pr)
		}
	}
	return out
}

type section struct {
	start   *ssp2.SubStart
	commits []*ssp2.Commit
	rows    []ssp2.SegmentRow
	end     *ssp2.SubEnd
}

func sections(t *testing.T, rep *engine.Reply) map[string]*section {
	t.Helper()
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
				t.Fatalf("inline segment: %v", err)
			}
			for _, b := range seg.Blocks {
				cur.rows = append(cur.rows, b...)
			}
		case *ssp2.SubEnd:
			cur.end = x
		}
	}
	return out
}

func (c *client) pull(limits ssp2.PullHeader, subs ...*ssp2.Subscription) map[string]*section {
	c.f.t.Helper()
	frames := []ssp2.Frame{&limits}
	for _, s := range subs {
		frames = append(frames, s)
	}
	rep, err := c.sync(frames...)
	if err != nil {
		c.f.t.Fatalf("pull: %v", err)
	}
	return sections(c.f.t, rep)
}

func sub(id string, cursor int64, projects ...string) *ssp2.Subscription {
	return &ssp2.Subscription{ID: id, Table: "tasks", Scopes: map[string][]string{"project_id": projects}, Cursor: cursor}
}

func wantCode(t *testing.T, err error, code syncerr.Code) *syncerr.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got success, want %s", code)
	}
	if got := syncerr.CodeOf(err); got != code {
		t.Fatalf("got %s (%v), want %s", got, err, code)
	}
	return syncerr.As(err)
}

func TestPushPullBootstrapAndIncremental(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("alice", "ca")
	if pr := a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "one"), nil)); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 1 {
		t.Fatalf("first push: %+v", pr)
	}
	b := f.client("bob", "cb")
	s := b.pull(ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))["s"]
	if !s.start.Bootstrap || len(s.rows) != 1 || s.end.NextCursor != 1 || s.end.BootstrapState != nil {
		t.Fatalf("bootstrap section: start=%+v rows=%d end=%+v", s.start, len(s.rows), s.end)
	}
	if s.rows[0].ServerVersion != 1 || s.rows[0].Values[2] != "one" {
		t.Fatalf("bootstrap row = %+v", s.rows[0])
	}
	a.push("c2", upsert("tasks", "t1", f.row("t1", "P", "two"), ver(1)))
	a.push("c3", upsert("tasks", "t2", f.row("t2", "Q", "other project"), nil))
	s = b.pull(ssp2.PullHeader{Accept: 1}, sub("s", 1, "P"))["s"]
	if s.start.Bootstrap || len(s.commits) != 1 || s.end.NextCursor != 3 {
		t.Fatalf("incremental: commits=%d end=%+v", len(s.commits), s.end)
	}
	ch := s.commits[0].Changes[0]
	if s.commits[0].CommitSeq != 2 || *ch.RowVersion != 2 || ch.Scopes["project_id"] != "P" || s.commits[0].ActorID != "alice" {
		t.Fatalf("commit = %+v change = %+v", s.commits[0], ch)
	}
	// Caught up: no commits, cursor stays at max.
	s = b.pull(ssp2.PullHeader{Accept: 1}, sub("s", 3, "P"))["s"]
	if len(s.commits) != 0 || s.end.NextCursor != 3 {
		t.Fatalf("caught-up pull: %d commits, cursor %d", len(s.commits), s.end.NextCursor)
	}
}

func TestIdempotentReplayIsCached(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("alice", "ca")
	first := a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil), upsert("tasks", "t2", f.row("t2", "P", "y"), nil))
	again := a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil), upsert("tasks", "t2", f.row("t2", "P", "y"), nil))
	if again.Status != ssp2.CommitCached || *again.CommitSeq != *first.CommitSeq || len(again.Results) != 2 {
		t.Fatalf("replay = %+v, want cached seq %d", again, *first.CommitSeq)
	}
	info, _ := f.store.Log.ReadPartition(context.Background(), "p1")
	if info.MaxCommitSeq != 1 {
		t.Fatalf("max seq %d after replay, want 1", info.MaxCommitSeq)
	}
	// A duplicate id inside one request is processed once.
	rep, err := a.sync(
		&ssp2.PushCommit{ClientCommitID: "c9", Operations: []ssp2.Operation{upsert("tasks", "t3", f.row("t3", "P", "z"), nil)}},
		&ssp2.PushCommit{ClientCommitID: "c9", Operations: []ssp2.Operation{upsert("tasks", "t3", f.row("t3", "P", "z"), nil)}})
	if err != nil {
		t.Fatal(err)
	}
	rs := results(rep)
	if rs[0].Status != ssp2.CommitApplied || rs[1].Status != ssp2.CommitCached || *rs[0].CommitSeq != *rs[1].CommitSeq {
		t.Fatalf("duplicate in request: %+v %+v", rs[0], rs[1])
	}
}

func TestConflictRollsBackSiblingsAndKeepsNeighbours(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "v1"), nil))
	a.push("c2", upsert("tasks", "t1", f.row("t1", "P", "v2"), nil))
	rep, err := a.sync(
		&ssp2.PushCommit{ClientCommitID: "bad", Operations: []ssp2.Operation{
			upsert("tasks", "t9", f.row("t9", "P", "sibling"), nil),
			upsert("tasks", "t1", f.row("t1", "P", "stale"), ver(1)),
		}},
		&ssp2.PushCommit{ClientCommitID: "good", Operations: []ssp2.Operation{upsert("tasks", "t8", f.row("t8", "P", "fine"), nil)}})
	if err != nil {
		t.Fatal(err)
	}
	rs := results(rep)
	bad, good := rs[0], rs[1]
	if bad.Status != ssp2.CommitRejected || bad.CommitSeq != nil || len(bad.Results) != 1 {
		t.Fatalf("bad commit: %+v", bad)
	}
	r := bad.Results[0]
	if r.OpIndex != 1 || r.Status != ssp2.OpConflict || r.Code != "sync.version_conflict" || r.ServerVersion != 2 {
		t.Fatalf("conflict record: %+v", r)
	}
	row, err := f.codec.Decode(r.ServerRow)
	if err != nil || row[2] != "v2" {
		t.Fatalf("serverRow = %v, %v", row, err)
	}
	if good.Status != ssp2.CommitApplied || *good.CommitSeq != 3 {
		t.Fatalf("neighbour commit: %+v", good)
	}
	rows, _ := f.store.Rows.ScanRows(context.Background(), "p1", storage.RowQuery{Table: f.schema.Table("tasks"), Scopes: map[string][]string{"project_id": {"P"}}, Limit: 100})
	for _, rr := range rows {
		if rr.RowID == "t9" {
			t.Fatal("sibling op of a rejected commit was written")
		}
	}
	// The rejection is durable: replay answers rejected again.
	if again := a.push("bad", upsert("tasks", "t9", f.row("t9", "P", "sibling"), nil)); again.Status != ssp2.CommitRejected || again.Results[0].Code != "sync.version_conflict" {
		t.Fatalf("replayed rejection: %+v", again)
	}
	// Rebase using serverVersion applies.
	if pr := a.push("rebased", upsert("tasks", "t1", f.row("t1", "P", "v3"), ver(r.ServerVersion))); pr.Status != ssp2.CommitApplied {
		t.Fatalf("rebased push: %+v", pr)
	}
	// baseVersion on a missing row.
	if pr := a.push("missing", upsert("tasks", "nope", f.row("nope", "P", "x"), ver(4))); pr.Results[0].Code != "sync.row_missing" {
		t.Fatalf("row_missing: %+v", pr)
	}
}

func TestWriteAuthorizationAndScopeColumnsAreFixed(t *testing.T) {
	f := newFixture(t, memory.New())
	f.allow("mallory", map[string][]string{"project_id": {"M"}})
	a := f.client("alice", "ca")
	m := f.client("mallory", "cm")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "secret"), nil))
	for name, op := range map[string]ssp2.Operation{
		"insert into foreign scope": upsert("tasks", "t2", f.row("t2", "P", "x"), nil),
		"update a foreign row":      upsert("tasks", "t1", f.row("t1", "M", "stolen"), nil),
		"delete a foreign row":      del("t1"),
	} {
		pr := m.push("m-"+name, op)
		if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "sync.forbidden" {
			t.Fatalf("%s: %+v", name, pr)
		}
	}
	// Moving a row to another scope on update is refused (SPEC §3.4 rule
	// 5, §6.2 step 2: a present scope column may not change); presenting
	// the stored value is a no-op.
	if pr := a.push("c2", upsert("tasks", "t1", f.row("t1", "Z", "moved?"), nil)); pr.Status != ssp2.CommitRejected ||
		pr.Results[0].Code != string(syncerr.InvalidRequest) || !strings.Contains(pr.Results[0].Message, "project_id") {
		t.Fatalf("scope-moving update: %+v", pr)
	}
	a.push("c2-same", upsert("tasks", "t1", f.row("t1", "P", "moved?"), nil))
	rows, _ := f.store.Rows.ScanRows(context.Background(), "p1", storage.RowQuery{Table: f.schema.Table("tasks"), Scopes: map[string][]string{"project_id": {"P"}}, Limit: 10})
	if len(rows) != 1 || rows[0].Values[1] != "P" || rows[0].Values[2] != "moved?" || rows[0].Version != 2 {
		t.Fatalf("row after the updates: %+v", rows)
	}
	// The emitted change carries the stored scope too.
	s := a.pull(ssp2.PullHeader{Accept: 1}, sub("s", 1, "P"))["s"]
	got, err := f.codec.Decode(s.commits[0].Changes[0].Row)
	if err != nil || got[1] != "P" {
		t.Fatalf("emitted row %v, %v", got, err)
	}
	// A failing resolver denies writes and revokes reads.
	f.allow("broken", nil)
	br := f.client("broken", "cbr")
	if pr := br.push("b1", upsert("tasks", "t5", f.row("t5", "P", "x"), nil)); pr.Results[0].Code != "sync.forbidden" {
		t.Fatalf("write with failing resolver: %+v", pr)
	}
	if s := br.pull(ssp2.PullHeader{Accept: 1}, sub("s", 0, "P"))["s"]; s.start.Status != ssp2.SubRevoked {
		t.Fatalf("read with failing resolver: %+v", s.start)
	}
}

func TestRevocationAndEffectiveScopes(t *testing.T) {
	f := newFixture(t, memory.New())
	f.allow("bob", map[string][]string{"project_id": {"P", "Q"}})
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	a.push("c2", upsert("tasks", "t2", f.row("t2", "R", "y"), nil))
	b := f.client("bob", "cb")
	secs := b.pull(ssp2.PullHeader{Accept: 1}, sub("ok", 0, "P", "R"), sub("gone", 0, "R"))
	if s := secs["ok"]; s.start.Status != ssp2.SubActive || fmt.Sprint(s.start.EffectiveScopes) != "map[project_id:[P]]" || len(s.commits) != 1 {
		t.Fatalf("narrowed subscription: %+v commits=%d", s.start, len(s.commits))
	}
	if s := secs["gone"]; s.start.Status != ssp2.SubRevoked || s.start.ReasonCode != "sync.scope_revoked" || s.end.NextCursor != 0 || len(s.start.EffectiveScopes) != 0 {
		t.Fatalf("revoked subscription: %+v %+v", s.start, s.end)
	}
}

func TestEpochRulesAndSchemaFloor(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	// Wrong epoch: reset, nothing else.
	wrong := "not-the-epoch"
	good := a.epoch
	a.epoch = &wrong
	rep, err := a.sync(&ssp2.PushCommit{ClientCommitID: "c2", Operations: []ssp2.Operation{upsert("tasks", "t2", f.row("t2", "P", "x"), nil)}})
	if err != nil || !rep.Header().ResetRequired || rep.Header().LogEpoch != *good || len(rep.Frames) != 1 {
		t.Fatalf("epoch mismatch: %v %+v", err, rep)
	}
	info, _ := f.store.Log.ReadPartition(context.Background(), "p1")
	if info.MaxCommitSeq != 1 {
		t.Fatal("a push with a mismatched epoch was applied")
	}
	// Epoch-less push is refused.
	a.epoch = nil
	_, err = a.sync(&ssp2.PushCommit{ClientCommitID: "c3", Operations: []ssp2.Operation{upsert("tasks", "t3", f.row("t3", "P", "x"), nil)}})
	wantCode(t, err, syncerr.InvalidRequest)
	a.epoch = good
	if _, err := f.store.Log.RotateLogEpoch(context.Background(), "p1", 0); err != nil {
		t.Fatal(err)
	}
	// After rotation the old epoch gets a reset with the new epoch.
	rep, err = a.sync(&ssp2.PullHeader{Accept: 1})
	if err != nil || !rep.Header().ResetRequired || rep.Header().LogEpoch == *good {
		t.Fatalf("after rotation: %v %+v", err, rep.Header())
	}
	// Schema floor: an unknown newer schema version.
	a.epoch = &rep.Header().LogEpoch
	a.sv = 7
	rep, err = a.sync(&ssp2.PullHeader{Accept: 1})
	if err != nil || rep.Header().RequiredSchemaVersion == nil || *rep.Header().RequiredSchemaVersion != 1 || len(rep.Frames) != 1 {
		t.Fatalf("schema floor: %v %+v", err, rep)
	}
}

// TestWireVersionWindow: by default the engine reads wire version 3 alone
// (SPEC §9); a v1 or v2 request is sync.invalid_request before any frame
// is read, naming the version and the window, and touches nothing. An
// explicit window keeps older clients working under v3's rules, answered
// in their own layouts: no conflictColumns at v2, and
// sync.client_wire_unsupported for v1 after an epoch rotation only where v1
// is in the window.
func TestWireVersionWindow(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	for _, wire := range []uint16{1, 2} {
		old := &client{f: f, id: a.id, cid: "ca", epoch: a.epoch, wire: wire, sv: 1}
		_, err := old.sync(&ssp2.PushCommit{ClientCommitID: "old", Operations: []ssp2.Operation{upsert("tasks", "t9", f.fullRow("t9", "P", "x"), nil)}})
		e := wantCode(t, err, syncerr.InvalidRequest)
		if !strings.Contains(e.Message, fmt.Sprintf("unsupported wireVersion %d", wire)) || string(e.Details) != `{"supported":[3],"wireVersion":`+fmt.Sprint(wire)+`}` {
			t.Fatalf("v%d refusal: %q %s", wire, e.Message, e.Details)
		}
		body, _ := ssp2.Encode(&ssp2.Message{WireVersion: wire, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{&ssp2.ReqHeader{ClientID: "x", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
		body = append(body[:8], 0xEE) // frames that would not decode: refused for the version first
		_, _, err = f.eng.SyncEncoded(context.Background(), a.id, body)
		if e := wantCode(t, err, syncerr.InvalidRequest); !strings.Contains(e.Message, "unsupported wireVersion") {
			t.Fatalf("v%d body with bad frames: %q, want the version refusal", wire, e.Message)
		}
	}
	if info, _ := f.store.Log.ReadPartition(context.Background(), "p1"); info.MaxCommitSeq != 1 {
		t.Fatalf("a refused request was applied: max seq %d", info.MaxCommitSeq)
	}

	// An explicit window {1, 2, 3}.
	w := newFixture(t, memory.New(), func(c *engine.Config) { c.WireVersions = []uint16{3, 2, 1} })
	if got := w.eng.WireVersions(); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("WireVersions = %v", got)
	}
	v3 := w.client("alice", "c3")
	v2 := w.client("bob", "c2")
	v2.wire = 2
	v3.push("w1", upsert("tasks", "t1", w.row("t1", "P", "x"), nil))
	// A v2 push is a full row; v3's rules apply: the stale title conflicts,
	// answered in v2's layout (no conflictColumns).
	v3.push("w2", upsert("tasks", "t1", w.patch(ssp2.Row{"t1", nil, "y", nil}, 2), nil))
	pr := v2.push("b1", upsert("tasks", "t1", w.fullRow("t1", "P", "z"), ver(1)))
	if pr.Status != ssp2.CommitRejected || pr.Results[0].Status != ssp2.OpConflict || pr.Results[0].ConflictColumns != nil {
		t.Fatalf("v2 stale push = %+v, want a conflict without conflictColumns", pr)
	}
	// The same conflict replayed to a v3 client carries its columns.
	same := &client{f: w, id: v2.id, cid: "c2", epoch: v2.epoch, wire: ssp2.WireV3, sv: 1}
	if pr := same.push("b1", upsert("tasks", "t1", w.row("t1", "P", "z"), ver(1))); len(pr.Results) != 1 || pr.Results[0].ConflictColumns.Len() == 0 {
		t.Fatalf("v3 replay of the conflict = %+v, want conflictColumns", pr)
	}
	// v1 works until the epoch is rotated, then only v1 is refused with
	// sync.client_wire_unsupported.
	v1 := &client{f: w, id: v3.id, cid: "c1", wire: 1, sv: 1}
	if pr := v1.push("o1", upsert("tasks", "t4", w.fullRow("t4", "P", "x"), nil)); pr.Status != ssp2.CommitApplied {
		t.Fatalf("v1 push before rotation: %+v", pr)
	}
	if _, err := w.store.Log.RotateLogEpoch(context.Background(), "p1", 0); err != nil {
		t.Fatal(err)
	}
	_, err := v1.sync(&ssp2.PullHeader{Accept: 1})
	wantCode(t, err, syncerr.ClientWireUnsupported)
	// A window without 1 refuses v1 as an unknown version instead.
	n := newFixture(t, memory.New(), func(c *engine.Config) { c.WireVersions = []uint16{2, 3} })
	nv1 := &client{f: n, id: engine.Identity{ActorID: "alice", Partition: "p1"}, cid: "c1", wire: 1, sv: 1}
	_, err = nv1.sync(&ssp2.PullHeader{Accept: 1})
	if e := wantCode(t, err, syncerr.InvalidRequest); !strings.Contains(e.Message, "unsupported wireVersion 1") {
		t.Fatalf("v1 outside the window: %q", e.Message)
	}
	// New refuses a version it does not know.
	if _, err := engine.New(context.Background(), engine.Config{Schema: w.schema, Backend: memory.New().Backend(), Resolver: engine.AllowAll(w.schema), WireVersions: []uint16{4}}); err == nil {
		t.Fatal("engine.New accepted wire version 4")
	}
}

func TestRequestLevelRefusals(t *testing.T) {
	f := newFixture(t, memory.New(), func(c *engine.Config) { c.MaxOperations = 3 })
	a := f.client("alice", "ca")
	ops := []ssp2.Operation{}
	for i := range 4 {
		id := fmt.Sprintf("t%d", i)
		ops = append(ops, upsert("tasks", id, f.row(id, "P", "x"), nil))
	}
	_, err := a.sync(&ssp2.PushCommit{ClientCommitID: "big", Operations: ops})
	wantCode(t, err, syncerr.TooManyOperations)
	for _, table := range []string{"nope", "sync_backfill_checkpoints", "sync_writer_fence", "sync_commits"} {
		_, err = a.sync(&ssp2.PullHeader{Accept: 1}, &ssp2.Subscription{ID: "s", Table: table, Scopes: map[string][]string{}, Cursor: -1})
		wantCode(t, err, syncerr.UnknownTable)
	}
	_, err = a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"), sub("s", -1, "P"))
	wantCode(t, err, syncerr.InvalidSubscription)
	_, err = a.sync(&ssp2.PullHeader{Accept: 1}, &ssp2.Subscription{ID: "s", Table: "tasks", Scopes: map[string][]string{"nope": {"x"}}, Cursor: -1})
	wantCode(t, err, syncerr.InvalidSubscription)
	_, err = a.sync(&ssp2.PullHeader{Accept: 1}, sub("s", -1, "*"))
	wantCode(t, err, syncerr.InvalidSubscription)
	_, err = a.sync(&ssp2.PullHeader{Accept: ssp2.AcceptSQLite}, sub("s", -1, "P"))
	wantCode(t, err, syncerr.InvalidRequest)
	// Nothing was written by any refused request, and the engine still serves.
	if pr := a.push("ok", ops[0]); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 1 {
		t.Fatalf("push after refusals: %+v", pr)
	}
	// Once served, the clientId is bound to alice in this partition.
	m := f.client("mallory", "ca")
	_, err = m.sync(&ssp2.PullHeader{Accept: 1})
	wantCode(t, err, syncerr.InvalidClientID)
	_, err = m.sync(&ssp2.PushCommit{ClientCommitID: "m", Operations: []ssp2.Operation{ops[1]}})
	wantCode(t, err, syncerr.InvalidClientID)
}

func TestCommitLevelRejections(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("alice", "ca")
	withCode := func(id, code string) []byte {
		b, err := f.codec.AppendSparse(nil, ssp2.Row{id, "P", "x", code}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name string
		op   ssp2.Operation
		code string
	}{
		{"unknown table", upsert("nope", "x", f.row("x", "P", "x"), nil), "sync.unknown_table"},
		// System tables (checkpoints, fence, log) are never synced.
		{"checkpoint table", upsert("sync_backfill_checkpoints", "x", f.row("x", "P", "x"), nil), "sync.unknown_table"},
		{"fence table", ssp2.Operation{Table: "sync_writer_fence", RowID: "p1", Op: ssp2.OpDelete}, "sync.unknown_table"},
		{"payload fails the row codec", upsert("tasks", "x", []byte{0xff, 1, 2}, nil), "sync.invalid_request"},
		{"rowId differs from primary key", upsert("tasks", "x", f.row("y", "P", "x"), nil), "sync.invalid_request"},
	}
	for i, c := range cases {
		pr := a.push(fmt.Sprintf("r%d", i), c.op)
		if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != c.code || pr.Results[0].Retryable {
			t.Fatalf("%s: %+v", c.name, pr)
		}
	}
	a.push("u1", upsert("tasks", "k1", withCode("k1", "SAME"), nil))
	pr := a.push("u2", upsert("tasks", "k2", withCode("k2", "SAME"), nil))
	if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "sync.constraint_violation" {
		t.Fatalf("unique violation: %+v", pr)
	}
	if again := a.push("u2", upsert("tasks", "k2", withCode("k2", "SAME"), nil)); again.Status != ssp2.CommitRejected || again.Results[0].Code != "sync.constraint_violation" {
		t.Fatalf("constraint rejection not durable: %+v", again)
	}
	info, _ := f.store.Log.ReadPartition(context.Background(), "p1")
	if info.MaxCommitSeq != 1 {
		t.Fatalf("max seq %d, want 1 (only u1 applied)", info.MaxCommitSeq)
	}
}

func TestBootstrapPagesResumeAndIncrementalLimit(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("alice", "ca")
	for i := range 25 {
		id := fmt.Sprintf("t%02d", i)
		a.push("c"+id, upsert("tasks", id, f.row(id, "P", "x"), nil))
	}
	b := f.client("bob", "cb")
	lim := ssp2.PullHeader{Accept: 1, LimitSnapshotRows: 10, MaxSnapshotPages: 1, LimitCommits: 4}
	s := sub("s", -1, "P")
	seen := map[string]bool{}
	var pin int64 = -1
	for round := 0; ; round++ {
		if round > 5 {
			t.Fatal("bootstrap did not finish")
		}
		got := b.pull(lim, s)["s"]
		if pin >= 0 && got.end.NextCursor != pin {
			t.Fatalf("pin moved from %d to %d", pin, got.end.NextCursor)
		}
		pin = got.end.NextCursor
		for _, r := range got.rows {
			id := r.Values[0].(string)
			if seen[id] {
				t.Fatalf("row %s delivered twice", id)
			}
			seen[id] = true
		}
		if round == 0 {
			// A write after the pin must not disturb the resumed bootstrap.
			a.push("late", upsert("tasks", "t99", f.row("t99", "P", "late"), nil))
		}
		s.Cursor, s.BootstrapState = got.end.NextCursor, got.end.BootstrapState
		if got.end.BootstrapState == nil {
			break
		}
	}
	if pin != 25 || len(seen) < 25 {
		t.Fatalf("bootstrap finished at pin %d with %d rows", pin, len(seen))
	}
	// Incremental from the pin replays (pin, latest]: the late write.
	got := b.pull(lim, s)["s"]
	if len(got.commits) != 1 || got.commits[0].Changes[0].RowID != "t99" || got.end.NextCursor != 26 {
		t.Fatalf("post-bootstrap incremental: %d commits, cursor %d", len(got.commits), got.end.NextCursor)
	}
	// Limit: 4 changes per pull, commits never split.
	got = b.pull(lim, sub("s2", 0, "P"))["s2"]
	if len(got.commits) != 4 || got.end.NextCursor != 4 {
		t.Fatalf("limited incremental: %d commits, cursor %d", len(got.commits), got.end.NextCursor)
	}
}

func TestGroupCommitUnderConcurrency(t *testing.T) {
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("groupCommitDisabled=%v", disable), func(t *testing.T) {
			f := newFixture(t, memory.New(), func(c *engine.Config) { c.DisableGroupCommit = disable })
			const writers, each = 16, 20
			var wg sync.WaitGroup
			seqs := make(chan int64, writers*each)
			for w := range writers {
				c := f.client(fmt.Sprintf("actor%d", w), fmt.Sprintf("client%d", w))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						id := fmt.Sprintf("w%d-%d", w, i)
						rep, err := c.f.eng.Sync(context.Background(), c.id, mustMsg(t, c, &ssp2.PushCommit{ClientCommitID: id,
							Operations: []ssp2.Operation{upsert("tasks", id, f.row(id, "P", "x"), nil)}}))
						if err != nil {
							t.Error(err)
							return
						}
						pr := results(rep)[0]
						if pr.Status != ssp2.CommitApplied {
							t.Errorf("push %s: %+v", id, pr)
							return
						}
						seqs <- *pr.CommitSeq
					}
				}()
			}
			wg.Wait()
			close(seqs)
			var all []int64
			for s := range seqs {
				all = append(all, s)
			}
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			if len(all) != writers*each {
				t.Fatalf("%d commits applied, want %d", len(all), writers*each)
			}
			for i, s := range all {
				if s != int64(i+1) {
					t.Fatalf("commit seqs not dense: position %d has %d", i, s)
				}
			}
		})
	}
}

func mustMsg(t *testing.T, c *client, frames ...ssp2.Frame) *ssp2.Message {
	h := &ssp2.ReqHeader{ClientID: c.cid, SchemaVersion: 1, LogEpoch: c.epoch}
	return &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: append([]ssp2.Frame{h}, frames...)}
}

func TestRestartLosesNothing(t *testing.T) {
	st := memory.New()
	f := newFixture(t, st)
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	a.pull(ssp2.PullHeader{Accept: 1}, sub("s", -1, "P"))
	if err := f.eng.Close(); err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetClient(context.Background(), "p1", "ca")
	if err != nil || rec == nil || rec.ActorID != "alice" || rec.Cursor != 1 {
		t.Fatalf("client record after close: %+v, %v", rec, err)
	}
	f2 := newFixture(t, st)
	a2 := &client{f: f2, id: a.id, cid: "ca", epoch: a.epoch, wire: ssp2.WireV3, sv: 1}
	if pr := a2.push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil)); pr.Status != ssp2.CommitCached {
		t.Fatalf("replay after restart: %+v", pr)
	}
	if s := a2.pull(ssp2.PullHeader{Accept: 1}, sub("s", 0, "P"))["s"]; len(s.commits) != 1 {
		t.Fatalf("log after restart: %d commits", len(s.commits))
	}
}
