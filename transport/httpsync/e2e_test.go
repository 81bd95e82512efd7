package httpsync_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/ssp2/ssp2test"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/segstore"
	"github.com/synclane/synclane/storage/segstore/pgseg"
	"github.com/synclane/synclane/storage/segstore/sqlitefile"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// testStore is a store a test opens: a backend package's store, giving the
// engine its roles (Backend), with its handle.
type testStore interface {
	Backend() storage.Backend
	Close() error
}

// backend opens the same database again and again (a "restart").
type backend struct {
	name string
	open func(t *testing.T) testStore
}

func backends(t *testing.T) []backend {
	bs := []backend{{name: "sqlite", open: func() func(t *testing.T) testStore {
		dir := t.TempDir()
		return func(t *testing.T) testStore {
			st, err := sqlite.Open(context.Background(), filepath.Join(dir, "synclane.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
	}()}}
	if os.Getenv("SYNCLANE_TEST_POSTGRES") != "" || os.Getenv("SYNCLANE_REQUIRE_POSTGRES") == "1" {
		url := pgtest.URL(t)
		schemaName := pgtest.NewSchema(t)
		bs = append(bs, backend{name: "postgres", open: func(t *testing.T) testStore {
			st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schemaName, MaxConns: 8})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}})
	}
	return bs
}

// server is synclane over real HTTP (httptest on loopback).
type server struct {
	t      *testing.T
	be     backend
	schema *schema.Schema
	store  testStore
	eng    *engine.Engine
	http   *httptest.Server
	url    string
	mu     sync.Mutex
	grants map[string]map[string][]string
	// segDir holds the embedded segment file (kept across restarts);
	// configure, when set, adjusts the engine config before start.
	segDir    string
	configure func(*engine.Config)
}

func startServer(t *testing.T, be backend) *server {
	return startServerWith(t, be, nil)
}

// startServerWith is startServer with configure applied to the engine
// config (segment TTL, clock, inline limit).
func startServerWith(t *testing.T, be backend, configure func(*engine.Config)) *server {
	s := &server{t: t, be: be, schema: schema.MustDemo(), grants: map[string]map[string][]string{}, segDir: t.TempDir(), configure: configure}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) start() {
	s.store = s.be.open(s.t)
	cfg := engine.Config{Schema: s.schema, Backend: s.store.Backend(), Segments: segments.Options{Store: openSegments(s.t, s.store, s.segDir), Images: sqliteimage.Builder{}},
		Resolver: engine.ScopeResolverFunc(func(_ context.Context, id engine.Identity) (map[string][]string, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if g, ok := s.grants[id.ActorID]; ok {
				return g, nil
			}
			return map[string][]string{"list_id": {"*"}}, nil
		})}
	if s.configure != nil {
		s.configure(&cfg)
	}
	var err error
	s.eng, err = engine.New(context.Background(), cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	mux := httpsync.NewMux(s.eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}, MaxBodyBytes: 1 << 20}})
	if s.http == nil {
		s.http = httptest.NewServer(mux)
		s.url = s.http.URL + "/sync"
	} else {
		s.http.Config.Handler = mux
	}
}

// openSegments opens the segment store a process on st uses: the shared
// PostgreSQL table, or the SQLite file in dir.
func openSegments(t *testing.T, st testStore, dir string) segstore.Store {
	var segs segstore.Store
	var err error
	if pg, ok := st.(*postgres.Store); ok {
		segs, err = pgseg.Open(context.Background(), pg.Pool())
	} else {
		segs, err = sqlitefile.Open(context.Background(), filepath.Join(dir, "segments.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

func (s *server) stop() {
	if s.eng != nil {
		s.eng.Close()
		s.store.Close()
		s.eng = nil
	}
	if s.http != nil {
		s.http.Close()
	}
}

// restart closes the engine and the store and opens them again on the same
// database, keeping the listener.
func (s *server) restart() {
	s.eng.Close()
	if err := s.store.Close(); err != nil {
		s.t.Fatal(err)
	}
	s.start()
}

func (s *server) grant(actor string, lists ...string) {
	s.mu.Lock()
	s.grants[actor] = map[string][]string{"list_id": lists}
	s.mu.Unlock()
}

func (s *server) client(actor, clientID string) *httpsync.Client {
	return &httpsync.Client{URL: s.url, ClientID: clientID, Header: http.Header{"X-Actor": {actor}, "X-Partition": {"team"}}}
}

func (s *server) replica(actor, clientID string, lists ...string) *httpsynctest.Replica {
	r := httpsynctest.NewReplica(s.client(actor, clientID), s.schema)
	r.Subscribe("todos", "todos", map[string][]string{"list_id": lists})
	return r
}

var codec = ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)

func todo(t *testing.T, id, list, title string) []byte {
	b, err := codec.AppendSparse(nil, ssp2.Row{id, list, title, false, int64(1), int64(1000)}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func upsert(t *testing.T, id, list, title string, base *int64) ssp2.Operation {
	return ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: todo(t, id, list, title), BaseVersion: base}
}

func commit(id string, ops ...ssp2.Operation) *ssp2.PushCommit {
	return &ssp2.PushCommit{ClientCommitID: id, Operations: ops}
}

func push1(t *testing.T, c *httpsync.Client, cm *ssp2.PushCommit) *ssp2.PushResult {
	t.Helper()
	rs, err := c.Push(context.Background(), cm)
	if err != nil {
		t.Fatalf("push %s: %v", cm.ClientCommitID, err)
	}
	return rs[0]
}

func sameRows(t *testing.T, a, b *httpsynctest.Replica) {
	t.Helper()
	ra, rb := a.Rows["todos"], b.Rows["todos"]
	if len(ra) != len(rb) {
		t.Fatalf("replicas differ: %d vs %d rows", len(ra), len(rb))
	}
	for id, x := range ra {
		y, ok := rb[id]
		if !ok || x.Version != y.Version || fmt.Sprint(x.Values) != fmt.Sprint(y.Values) {
			t.Fatalf("row %s differs: %+v vs %+v", id, x, y)
		}
	}
}

func forEachBackend(t *testing.T, fn func(t *testing.T, s *server)) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) { fn(t, startServer(t, be)) })
	}
}

func TestE2EConvergenceOfflineReplayAndRestart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		a := s.replica("alice", "ca", "L1")
		b := s.replica("bob", "cb", "L1")
		// Alice was offline: her outbox replays in order, in one request.
		var outbox []ssp2.Frame
		for i := range 5 {
			outbox = append(outbox, commit(fmt.Sprintf("a%d", i), upsert(t, fmt.Sprintf("t%d", i), "L1", fmt.Sprintf("v%d", i), nil)))
		}
		if err := a.Client.Handshake(ctx); err != nil {
			t.Fatal(err)
		}
		resp, err := a.Client.Do(ctx, outbox...)
		if err != nil {
			t.Fatal(err)
		}
		for i, pr := range httpsync.PushResults(resp) {
			if pr.Status != ssp2.CommitApplied || *pr.CommitSeq != int64(i+1) {
				t.Fatalf("offline commit %d: %+v", i, pr)
			}
		}
		// Interleaved writes from both sides.
		push1(t, b.Client, commit("b1", upsert(t, "t0", "L1", "bob was here", nil)))
		push1(t, a.Client, commit("a9", ssp2.Operation{Table: "todos", RowID: "t1", Op: ssp2.OpDelete}))
		for _, r := range []*httpsynctest.Replica{a, b} {
			if err := r.SyncUntilIdle(ctx, 10); err != nil {
				t.Fatal(err)
			}
		}
		sameRows(t, a, b)
		if got := a.Rows["todos"]["t0"]; got.Values[2] != "bob was here" || got.Version != 2 {
			t.Fatalf("t0 = %+v", got)
		}
		if _, ok := a.Rows["todos"]["t1"]; ok {
			t.Fatal("deleted row t1 still present")
		}
		// Restart the server between steps: nothing is lost.
		s.restart()
		push1(t, b.Client, commit("b2", upsert(t, "t7", "L1", "after restart", nil)))
		if pr := push1(t, a.Client, commit("a0", upsert(t, "t0", "L1", "v0", nil))); pr.Status != ssp2.CommitCached || *pr.CommitSeq != 1 {
			t.Fatalf("replay after restart: %+v", pr)
		}
		for _, r := range []*httpsynctest.Replica{a, b} {
			if err := r.SyncUntilIdle(ctx, 10); err != nil {
				t.Fatal(err)
			}
		}
		sameRows(t, a, b)
		if len(a.Rows["todos"]) != 5 {
			t.Fatalf("%d rows after restart, want 5", len(a.Rows["todos"]))
		}
		// A fresh client bootstraps the same state.
		c := s.replica("carol", "cc", "L1")
		if err := c.SyncUntilIdle(ctx, 10); err != nil {
			t.Fatal(err)
		}
		sameRows(t, a, c)
	})
}

// TestE2ELostResponseRetryConflictAndRebase: a lost response is answered
// from the idempotency cache; then, under wire version 3's per-column
// rules (SPEC §6.2, §6.5), a stale patch of a column another client wrote
// conflicts with exactly that column marked, a stale patch of another
// column applies (Appendix B.21), and keep-local re-pushes the sparse op
// at the conflict's serverVersion.
func TestE2ELostResponseRetryConflictAndRebase(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		a := s.client("alice", "ca")
		b := s.client("bob", "cb")
		first := push1(t, a, commit("c1", upsert(t, "t1", "L", "one", nil)))
		// The response was lost: the retry is answered from the cache.
		again := push1(t, a, commit("c1", upsert(t, "t1", "L", "one", nil)))
		if again.Status != ssp2.CommitCached || *again.CommitSeq != *first.CommitSeq {
			t.Fatalf("retry: %+v", again)
		}
		if pr := push1(t, b, commit("b1", patch(t, "t1", map[int]any{2: "bob"}, ver(1)))); pr.Status != ssp2.CommitApplied {
			t.Fatalf("bob's title patch: %+v", pr)
		}
		conflict := push1(t, a, commit("c2", patch(t, "t1", map[int]any{2: "alice"}, ver(1))))
		if conflict.Status != ssp2.CommitRejected || conflict.Results[0].Code != "sync.version_conflict" || conflict.Results[0].ServerVersion != 2 {
			t.Fatalf("conflict: %+v", conflict)
		}
		row, err := codec.Decode(conflict.Results[0].ServerRow)
		if err != nil || row[2] != "bob" {
			t.Fatalf("serverRow: %v %v", row, err)
		}
		// conflictColumns marks title alone (decoded from the wire: needs
		// the codec's v3 PUSH_RESULT).
		if cc := conflict.Results[0].ConflictColumns; !cc.Has(2) || cc.Len() != 1 {
			t.Errorf("conflictColumns = %08b, want title (column 2) alone", []byte(cc))
		}
		// The same stale baseVersion on a column nobody else wrote applies.
		if pr := push1(t, a, commit("c3", patch(t, "t1", map[int]any{3: true}, ver(1)))); pr.Status != ssp2.CommitApplied || *pr.CommitSeq != 3 {
			t.Fatalf("stale patch of a disjoint column: %+v", pr)
		}
		// Keep-local: the same sparse op at the conflict's serverVersion.
		rebased := push1(t, a, commit("c4", patch(t, "t1", map[int]any{2: "alice+bob"}, ver(conflict.Results[0].ServerVersion))))
		if rebased.Status != ssp2.CommitApplied || *rebased.CommitSeq != 4 {
			t.Fatalf("rebase: %+v", rebased)
		}
		r := s.replica("carol", "cc", "L")
		if err := r.SyncUntilIdle(ctx, 5); err != nil {
			t.Fatal(err)
		}
		if got := r.Rows["todos"]["t1"]; got.Version != 4 || got.Values[2] != "alice+bob" || got.Values[3] != true || got.Values[5] != int64(1000) {
			t.Fatalf("converged row: %+v, want version 4, alice+bob, done, the rest as inserted", got)
		}
	})
}

// patch is a wire-v3 sparse upsert of todo id presenting the key and the
// given columns (index → value).
func patch(t *testing.T, id string, cols map[int]any, base *int64) ssp2.Operation {
	t.Helper()
	row := make(ssp2.Row, 6)
	row[0] = id
	present := ssp2.NewColumnSet(len(row))
	present.Add(0)
	for c, v := range cols {
		row[c] = v
		present.Add(c)
	}
	b, err := codec.AppendSparse(nil, row, present, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: b, BaseVersion: base}
}

func ver(v int64) *int64 { return &v }

func TestE2ERevocationAndEpochReset(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		w := s.client("writer", "cw")
		push1(t, w, commit("w1", upsert(t, "t1", "L1", "x", nil), upsert(t, "t2", "L2", "y", nil)))
		s.grant("eve", "L1", "L2")
		r := httpsynctest.NewReplica(s.client("eve", "ce"), s.schema)
		r.Subscribe("l1", "todos", map[string][]string{"list_id": {"L1"}})
		r.Subscribe("l2", "todos", map[string][]string{"list_id": {"L2"}})
		if err := r.SyncUntilIdle(ctx, 5); err != nil {
			t.Fatal(err)
		}
		if len(r.Rows["todos"]) != 2 {
			t.Fatalf("before revocation: %d rows", len(r.Rows["todos"]))
		}
		s.grant("eve", "L1")
		if _, err := r.Pull(ctx); err != nil {
			t.Fatal(err)
		}
		if r.Subs[1].Status != ssp2.SubRevoked || r.Subs[0].Status != ssp2.SubActive {
			t.Fatalf("statuses after revocation: %v %v", r.Subs[0].Status, r.Subs[1].Status)
		}
		// Eve may not write into the revoked list either; nothing is written.
		pr := push1(t, r.Client, commit("e1", upsert(t, "t3", "L2", "sneaky", nil)))
		if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "sync.forbidden" {
			t.Fatalf("unauthorized push: %+v", pr)
		}
		// Epoch mismatch → resetRequired and nothing else.
		c := s.client("alice", "ca")
		if err := c.Handshake(ctx); err != nil {
			t.Fatal(err)
		}
		real := c.Epoch
		c.Epoch = "stale-epoch"
		_, err := c.Do(ctx, commit("x1", upsert(t, "t9", "L1", "x", nil)))
		if !errors.Is(err, httpsync.ErrResetRequired) || c.Epoch != real {
			t.Fatalf("stale epoch: %v, epoch now %q want %q", err, c.Epoch, real)
		}
		info, _ := s.store.Backend().Log.ReadPartition(ctx, "team")
		if info.MaxCommitSeq != 1 {
			t.Fatalf("max seq %d: a refused push was written", info.MaxCommitSeq)
		}
	})
}

func TestE2EBootstrap10kRowsWithResumeAfterCut(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		w := s.client("writer", "cw")
		const n = 10_000
		var batch []ssp2.Frame
		for i := range n {
			id := fmt.Sprintf("t%05d", i)
			batch = append(batch, commit("c"+id, upsert(t, id, "L", "row "+id, nil)))
			if len(batch) == 400 {
				if _, err := w.Push(ctx, framesToCommits(batch)...); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		r := s.replica("reader", "cr", "L")
		r.Limits = ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitSnapshotRows: 1000, MaxSnapshotPages: 2}
		// First round: a partial bootstrap with a resume token.
		st, err := r.Pull(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Incomplete || st.SegmentRows != 2000 || r.Subs[0].Token == nil {
			t.Fatalf("first bootstrap round: %+v", st)
		}
		// The connection is cut mid-response: the client keeps its old state
		// (token from round one) and simply pulls again.
		cut := r.Subs[0].Token
		resp := cutResponse(t, s, r, cut)
		if resp != nil {
			t.Fatal("a cut response decoded")
		}
		// New writes during the bootstrap do not disturb the pin.
		push1(t, w, commit("late", upsert(t, "late", "L", "late row", nil)))
		if err := r.SyncUntilIdle(ctx, 20); err != nil {
			t.Fatal(err)
		}
		if got := len(r.Rows["todos"]); got != n+1 {
			t.Fatalf("replica has %d rows, want %d", got, n+1)
		}
		if r.Subs[0].Cursor != n+1 {
			t.Fatalf("cursor %d, want %d", r.Subs[0].Cursor, n+1)
		}
	})
}

func framesToCommits(fs []ssp2.Frame) []*ssp2.PushCommit {
	out := make([]*ssp2.PushCommit, len(fs))
	for i, f := range fs {
		out[i] = f.(*ssp2.PushCommit)
	}
	return out
}

// cutResponse sends the replica's next pull and reads only half of the
// response body before dropping the connection; it returns the decoded
// message if (wrongly) the half decodes.
func cutResponse(t *testing.T, s *server, r *httpsynctest.Replica, token []byte) *ssp2.Message {
	epoch := r.Client.Epoch
	h := &ssp2.ReqHeader{ClientID: r.Client.ClientID, SchemaVersion: 1, LogEpoch: &epoch}
	sub := &ssp2.Subscription{ID: "todos", Table: "todos", Scopes: map[string][]string{"list_id": {"L"}}, Cursor: r.Subs[0].Cursor, BootstrapState: token}
	body, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{h, &r.Limits, sub}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", httpsync.ContentType)
	req.Header.Set("X-Actor", "reader")
	req.Header.Set("X-Partition", "team")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m, err := ssp2.DecodeResponse(all[:len(all)/2])
	if err == nil {
		return m
	}
	return nil
}

func TestE2EHostileInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		good := s.client("alice", "ca")
		push1(t, good, commit("g1", upsert(t, "t1", "L", "keep me", nil)))
		valid, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
			&ssp2.ReqHeader{ClientID: "ca", SchemaVersion: 1, LogEpoch: &good.Epoch},
			&ssp2.PullHeader{Accept: 1},
		}})
		if err != nil {
			t.Fatal(err)
		}
		post := func(ct string, body []byte, hdr map[string]string) (int, httperr.Body) {
			req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(body))
			req.Header.Set("Content-Type", ct)
			req.Header.Set("X-Actor", "alice")
			req.Header.Set("X-Partition", "team")
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var eb httperr.Body
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != 200 {
				if err := jsonUnmarshal(b, &eb); err != nil {
					t.Fatalf("status %d with a non-JSON error body %q", res.StatusCode, b)
				}
			}
			return res.StatusCode, eb
		}
		cases := []struct {
			name   string
			ct     string
			body   []byte
			hdr    map[string]string
			status int
			code   string
		}{
			{"wrong content type", "application/json", valid, nil, 415, "sync.invalid_request"},
			{"truncated body", httpsync.ContentType, valid[:len(valid)-3], nil, 400, "sync.invalid_request"},
			{"oversized body", httpsync.ContentType, bytes.Repeat([]byte{0}, 2<<20), nil, 413, "sync.invalid_request"},
			{"garbage", httpsync.ContentType, []byte("SSP2 not really"), nil, 400, "sync.invalid_request"},
			{"bad gzip", httpsync.ContentType, valid, map[string]string{"Content-Encoding": "gzip"}, 400, "sync.invalid_request"},
			{"unknown encoding", httpsync.ContentType, valid, map[string]string{"Content-Encoding": "br"}, 400, "sync.invalid_request"},
			{"no actor", httpsync.ContentType, valid, map[string]string{"X-Actor": " "}, 401, "sync.auth_required"},
		}
		for _, c := range cases {
			status, eb := post(c.ct, c.body, c.hdr)
			if status != c.status || eb.Code != c.code || eb.Category == "" || eb.RecommendedAction == "" || eb.Message == "" {
				t.Errorf("%s: HTTP %d %+v, want %d %s", c.name, status, eb, c.status, c.code)
			}
		}
		// Every vector in request/invalid is refused with its code.
		dir := ssp2test.VectorsDir(t)
		entries, _ := os.ReadDir(filepath.Join(dir, "request", "invalid"))
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(dir, "request", "invalid", e.Name()))
			if status, eb := post(httpsync.ContentType, b, nil); status != 400 || eb.Code != "sync.invalid_request" {
				t.Errorf("vector %s: HTTP %d %+v", e.Name(), status, eb)
			}
		}
		// Unknown table subscription, unknown table op, bad row payload.
		if _, err := good.Pull(ctx, ssp2.PullHeader{Accept: 1}, &ssp2.Subscription{ID: "x", Table: "nope", Scopes: map[string][]string{}, Cursor: -1}); syncerr.CodeOf(err) != syncerr.UnknownTable {
			t.Errorf("unknown table subscription: %v", err)
		}
		for name, op := range map[string]ssp2.Operation{
			"sync.unknown_table":   {Table: "nope", RowID: "x", Op: ssp2.OpUpsert, Payload: todo(t, "x", "L", "x")},
			"sync.invalid_request": {Table: "todos", RowID: "x", Op: ssp2.OpUpsert, Payload: []byte{0x00, 0xff, 0xff, 0xff, 0xff}},
		} {
			if pr := push1(t, good, commit("bad-"+name, op)); pr.Status != ssp2.CommitRejected || pr.Results[0].Code != name {
				t.Errorf("%s: %+v", name, pr)
			}
		}
		// Hostile payload strings round-trip untouched (no SQL interpretation).
		evil := "'); DROP TABLE todos; --"
		push1(t, good, commit("evil", upsert(t, evil, "L", evil, nil)))
		// The server still serves, and nothing committed was lost.
		r := s.replica("bob", "cb", "L")
		if err := r.SyncUntilIdle(ctx, 5); err != nil {
			t.Fatal(err)
		}
		if r.Rows["todos"]["t1"].Values[2] != "keep me" || r.Rows["todos"][evil].Values[2] != evil || len(r.Rows["todos"]) != 2 {
			t.Fatalf("state after hostile input: %+v", r.Rows["todos"])
		}
	})
}
