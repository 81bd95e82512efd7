package opwatch_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/opwatch"
)

const twoTables = `{"version":1,"tables":[
 {"name":"todos","columns":[{"name":"id","type":"string"},{"name":"list_id","type":"string"},{"name":"title","type":"string"}],
  "primaryKey":"id","scopes":["list:{list_id}"]},
 {"name":"notes","columns":[{"name":"id","type":"string"},{"name":"list_id","type":"string"}],
  "primaryKey":"id","scopes":["list:{list_id}"]}]}`

type env struct {
	t   *testing.T
	srv *httptest.Server
	hub *opwatch.Hub
	s   *schema.Schema
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, func(st *sqlite.Store) storage.Backend { return st.Backend() })
}

// newEnvWith is newEnv with the engine's storage roles built from the
// store by wrap.
func newEnvWith(t *testing.T, wrap func(*sqlite.Store) storage.Backend) *env {
	t.Helper()
	s, err := schema.Parse([]byte(twoTables))
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := operations.NewRegistry(s)
	if err := reg.AddQuery(operations.Query{ID: "todos", SQL: "SELECT id, title FROM {todos} ORDER BY id", MaxRows: 100,
		Columns:  []operations.Column{{Name: "id", Type: ssp2.TypeString}, {Name: "title", Type: ssp2.TypeString}},
		Coverage: []operations.Coverage{{Table: "todos", Params: map[string]string{"list_id": "list"}}}}); err != nil {
		t.Fatal(err)
	}
	hub := opwatch.New(opwatch.Options{Auth: auth.DevAuth{}})
	cfg := engine.Config{Schema: s, Backend: wrap(st), Operations: operations.Options{Registry: reg},
		Resolver: engine.ScopeResolverFunc(func(context.Context, engine.Identity) (map[string][]string, error) {
			return map[string][]string{"list_id": {"L"}}, nil
		})}
	hub.Hooks(&cfg)
	eng, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	hub.Start(eng)
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}, OperationWatches: hub}))
	t.Cleanup(func() {
		srv.Close()
		hub.Close()
		_ = eng.Close()
		_ = st.Close()
	})
	return &env{t: t, srv: srv, hub: hub, s: s}
}

func (e *env) push(ctx context.Context, table, id string) {
	e.t.Helper()
	tb := e.s.Table(table)
	row := ssp2.Row{id, "L", "title " + id}[:len(tb.Columns)]
	payload, err := ssp2.NewRowCodec(tb.Columns).AppendSparse(nil, row, nil, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	c := &httpsync.Client{URL: e.srv.URL + "/sync", ClientID: "writer", Header: http.Header{"X-Actor": {"ada"}}}
	prs, err := c.Push(ctx, &ssp2.PushCommit{ClientCommitID: table + id,
		Operations: []ssp2.Operation{{Table: table, RowID: id, Op: ssp2.OpUpsert, Payload: payload}}})
	if err != nil || prs[0].Status != ssp2.CommitApplied {
		e.t.Fatalf("push %s/%s: %+v %v", table, id, prs, err)
	}
}

type sock struct {
	t  *testing.T
	ws *websocket.Conn
}

func (e *env) dial(ctx context.Context) *sock {
	e.t.Helper()
	url := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/operations/realtime"
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"X-Actor": {"ada"}}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = ws.CloseNow() })
	return &sock{t: e.t, ws: ws}
}

func (s *sock) send(ctx context.Context, o opwire.Object) {
	s.t.Helper()
	b, err := opwire.Encode(append(opwire.Object{{Key: "revision", Value: 1.0}}, o...))
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.ws.Write(ctx, websocket.MessageText, b); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sock) watch(ctx context.Context, id, list string) {
	s.send(ctx, opwire.Object{{Key: "kind", Value: "watch"}, {Key: "watchId", Value: id}, {Key: "clientId", Value: "watcher"},
		{Key: "operationId", Value: "todos"}, {Key: "params", Value: opwire.Object{{Key: "list", Value: list}}}})
}

// next reads one message: its kind, watchId, maxCommitSeq (snapshots),
// row ids (snapshots) and code (errors).
func (s *sock) next(ctx context.Context) (kind, watchID string, seq int64, ids []string, code string) {
	s.t.Helper()
	_, data, err := s.ws.Read(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	v, err := opwire.Decode(data)
	if err != nil {
		s.t.Fatal(err)
	}
	o := v.(opwire.Object)
	get := func(k string) any { x, _ := o.Get(k); return x }
	kind, _ = get("kind").(string)
	watchID, _ = get("watchId").(string)
	code, _ = get("code").(string)
	seq, _ = opwire.SafeNumber(get("maxCommitSeq"))
	rows, _ := get("rows").([]any)
	for _, r := range rows {
		id, _ := r.(opwire.Object).Get("id")
		ids = append(ids, id.(string))
	}
	return
}

func (s *sock) wantSnapshot(ctx context.Context, watchID string, seq int64, n int) {
	s.t.Helper()
	kind, id, got, ids, code := s.next(ctx)
	if kind != "snapshot" || id != watchID || got != seq || len(ids) != n {
		s.t.Fatalf("got %s %s seq %d rows %v %s; want snapshot %s seq %d with %d rows", kind, id, got, ids, code, watchID, seq, n)
	}
}

func (s *sock) wantError(ctx context.Context, watchID string, code syncerr.Code) {
	s.t.Helper()
	kind, id, _, _, got := s.next(ctx)
	if kind != "error" || id != watchID || got != string(code) {
		s.t.Fatalf("got %s %s %s; want error %s %s", kind, id, got, watchID, code)
	}
}

func TestWatchSnapshotsAndReruns(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := e.dial(ctx)

	s.watch(ctx, "w1", "L")
	s.wantSnapshot(ctx, "w1", 0, 0)
	e.push(ctx, "todos", "t1")
	s.wantSnapshot(ctx, "w1", 1, 1)

	// A commit to another table does not rerun the query: the next
	// snapshot is the one for the following todos commit.
	e.push(ctx, "notes", "n1")
	e.push(ctx, "todos", "t2")
	s.wantSnapshot(ctx, "w1", 3, 2)

	// Refusals name the watch and leave the socket serving.
	s.watch(ctx, "w1", "L")
	s.wantError(ctx, "w1", syncerr.OperationInvalidRequest)
	s.watch(ctx, "w2", "M")
	s.wantError(ctx, "w2", syncerr.OperationForbidden)
	s.send(ctx, opwire.Object{{Key: "kind", Value: "watch"}, {Key: "watchId", Value: "w3"}, {Key: "clientId", Value: "c"},
		{Key: "operationId", Value: "nope"}})
	s.wantError(ctx, "w3", syncerr.OperationUnknown)
	if err := s.ws.Write(ctx, websocket.MessageText, []byte(`{"t":"nope"}`)); err != nil {
		t.Fatal(err)
	}
	s.wantError(ctx, "", syncerr.OperationInvalidRequest)

	// After unwatch, commits send nothing for w1: the next message is
	// w4's first snapshot, which already includes the new commit.
	s.send(ctx, opwire.Object{{Key: "kind", Value: "unwatch"}, {Key: "watchId", Value: "w1"}})
	e.push(ctx, "todos", "t3")
	s.watch(ctx, "w4", "L")
	s.wantSnapshot(ctx, "w4", 4, 3)

	// Closing the socket removes it (and its watches).
	_ = s.ws.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(10 * time.Second)
	for e.hub.Connections() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections left after close", e.hub.Connections())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWatchRefusesUnauthenticated(t *testing.T) {
	e := newEnv(t)
	url := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/operations/realtime"
	_, res, err := websocket.Dial(context.Background(), url, nil)
	if err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("dial without auth: %v %+v", err, res)
	}
}
