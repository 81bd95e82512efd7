package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/engine"
	adminsvc "github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/engine/timeseries"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/admin"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

const testToken = "test-admin-token-0123456789"

const schemaJSON = `{"version":1,"tables":[
 {"name":"tasks","columns":[
   {"name":"id","type":"string"},{"name":"project_id","type":"string"},
   {"name":"title","type":"string"},{"name":"done","type":"boolean","nullable":true}],
  "primaryKey":"id","scopes":["project:{project_id}"]}]}`

// testStore is a store a test opens: a backend package's store, giving the
// engine its roles (Backend), with its handle.
type testStore interface {
	Backend() storage.Backend
	Close() error
}

// server is a real engine with the sync routes on one listener and the
// admin API and console on another.
type server struct {
	t       testing.TB
	eng     *engine.Engine
	ring    *events.Ring
	sch     *schema.Schema
	codec   *ssp2.RowCodec
	syncURL string
	admin   *httptest.Server
	handler *admin.Handler
	service *adminsvc.Service

	// failAPI, while set, makes every /api/ request answer 503 (the
	// console's stale-data handling is tested with it).
	failAPI atomic.Bool

	mu      sync.Mutex
	clients map[string]*httpsync.Client
}

// backends are the stores the API tests run on.
var backends = []struct {
	name string
	open func(t *testing.T) testStore
}{
	{"memory", func(t *testing.T) testStore { return memory.New() }},
	{"sqlite", func(t *testing.T) testStore {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db.sqlite"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
}

func newServer(t testing.TB, st testStore) *server {
	t.Helper()
	return newServerWith(t, st, nil)
}

// newServerWith is newServer with the engine config adjusted by tune
// (when non-nil) before the engine starts.
func newServerWith(t testing.TB, st testStore, tune func(*engine.Config)) *server {
	t.Helper()
	return newServerFull(t, st, tune, nil)
}

// newServerFull is newServerWith with the admin options adjusted by
// tuneAdmin (when non-nil) before the handler is made.
func newServerFull(t testing.TB, st testStore, tune func(*engine.Config), tuneAdmin func(*admin.Options, *engine.Engine)) *server {
	t.Helper()
	sch, err := schema.Parse([]byte(schemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	ring := events.NewRing(256, nil)
	cfg := engine.Config{Schema: sch, Backend: st.Backend(), Resolver: engine.AllowAll(sch), Events: ring, SlowRequest: -1}
	if tune != nil {
		tune(&cfg)
	}
	eng, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	series := timeseries.New(timeseries.Options{})
	syncSrv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}, Observer: series}}))
	svc, err := adminsvc.New(eng)
	if err != nil {
		t.Fatal(err)
	}
	svc.Register(adminsvc.Section{Name: "test-section", Stats: func(context.Context) (any, error) { return map[string]int{"answer": 42}, nil }})
	// The API tests send many wrong tokens from one address; the token
	// attempt limit has its own tests (ratelimit_test.go).
	opts := admin.Options{Token: testToken, TokenAttempts: admin.TokenAttempts{Rate: -1}, Series: series}
	if tuneAdmin != nil {
		tuneAdmin(&opts, eng)
	}
	h, err := admin.New(svc, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{}
	adm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.failAPI.Load() && strings.HasPrefix(r.URL.Path, "/api/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"admin.unavailable","message":"the store is down (test)"}}`))
			return
		}
		h.ServeHTTP(w, r)
	}))
	*s = server{t: t, eng: eng, ring: ring, sch: sch, codec: ssp2.NewRowCodec(sch.Table("tasks").Columns),
		syncURL: syncSrv.URL + "/sync", admin: adm, handler: h, service: svc, clients: map[string]*httpsync.Client{}}
	t.Cleanup(func() {
		h.Close()
		adm.Close()
		syncSrv.Close()
		eng.Close()
		st.Close()
	})
	return s
}

// client returns the sync client clientID of actor in partition.
func (s *server) client(partition, actor, clientID string) *httpsync.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := partition + "\x00" + clientID
	if c := s.clients[key]; c != nil {
		return c
	}
	c := &httpsync.Client{URL: s.syncURL, ClientID: clientID, Header: http.Header{"X-Actor": {actor}, "X-Partition": {partition}}}
	s.clients[key] = c
	return c
}

// push sends one commit upserting (or deleting, when title is "") task id
// and returns its result.
func (s *server) push(partition, actor, clientID, ccid, id, project, title string) *ssp2.PushResult {
	s.t.Helper()
	op := ssp2.Operation{Table: "tasks", RowID: id, Op: ssp2.OpDelete}
	if title != "" {
		row, err := s.codec.AppendSparse(nil, ssp2.Row{id, project, title, nil}, nil, 0)
		if err != nil {
			s.t.Fatal(err)
		}
		op = ssp2.Operation{Table: "tasks", RowID: id, Op: ssp2.OpUpsert, Payload: row}
	}
	res, err := s.client(partition, actor, clientID).Push(context.Background(), &ssp2.PushCommit{ClientCommitID: ccid, Operations: []ssp2.Operation{op}})
	if err != nil || len(res) != 1 {
		s.t.Fatalf("push %s: %v (%d results)", ccid, err, len(res))
	}
	return res[0]
}

// get calls the admin API with token (none when "") and decodes the JSON
// answer into out (when non-nil); it returns the status.
func (s *server) call(method, path, token string, out any) int {
	s.t.Helper()
	req, err := http.NewRequest(method, s.admin.URL+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		s.t.Fatalf("%s %s: content type %q, body %s", method, path, ct, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return res.StatusCode
}

// ok calls with the right token and fails unless the answer is 200.
func (s *server) ok(method, path string, out any) {
	s.t.Helper()
	var raw json.RawMessage
	if st := s.call(method, path, testToken, &raw); st != http.StatusOK {
		s.t.Fatalf("%s %s: status %d: %s", method, path, st, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

// wantError calls with the right token and checks status and code.
func (s *server) wantError(method, path string, status int, code string) admin.ErrorBody {
	s.t.Helper()
	var eb admin.ErrorBody
	if st := s.call(method, path, testToken, &eb); st != status || eb.Error.Code != code || eb.Error.Message == "" {
		s.t.Fatalf("%s %s: status %d %+v, want %d %s with a message", method, path, st, eb, status, code)
	}
	return eb
}

func forEachBackend(t *testing.T, fn func(t *testing.T, s *server)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, newServer(t, b.open(t))) })
	}
}

func seqs(items []adminsvc.CommitView) string {
	var b strings.Builder
	for i, c := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, c.Seq)
	}
	return b.String()
}

func jsonDecode(r io.Reader, out any) error { return json.NewDecoder(r).Decode(out) }
