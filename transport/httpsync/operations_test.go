package httpsync_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/internal/promtext"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/bodybudget"
	"github.com/synclane/synclane/transport/httpsync"
)

// newOperationsServer serves the demo schema on SQLite through NewMux
// with one scoped query ("todosByList") and one command ("addTodo").
func newOperationsServer(t *testing.T) (*httptest.Server, *int) {
	t.Helper()
	s := schema.MustDemo()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := operations.NewRegistry(s)
	runs := new(int)
	if err := reg.AddQuery(operations.Query{ID: "todosByList", SQL: "SELECT id, title FROM {todos} ORDER BY id", MaxRows: 10,
		Columns:  []operations.Column{{Name: "id", Type: ssp2.TypeString}, {Name: "title", Type: ssp2.TypeString}},
		Coverage: []operations.Coverage{{Table: "todos", Params: map[string]string{"list_id": "list"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := reg.AddCommand(operations.Command{ID: "addTodo",
		Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
		Run: func(_ context.Context, inv operations.Invocation) ([]operations.Mutation, error) {
			*runs++ // commands of one partition run one at a time on its actor
			o := inv.Params.(opwire.Object)
			id, _ := o.Get("id")
			return []operations.Mutation{{Table: "todos", Values: map[string]any{"id": id, "list_id": "L", "title": "from a command",
				"done": false, "position": int64(1), "updated_at_ms": int64(0)}}}, nil
		}}); err != nil {
		t.Fatal(err)
	}
	grants := engine.ScopeResolverFunc(func(_ context.Context, id engine.Identity) (map[string][]string, error) {
		return map[string][]string{"list_id": {"L"}}, nil
	})
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: st.Backend(), Resolver: grants, Operations: operations.Options{Registry: reg}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(httpsync.NewMux(eng, httpsync.MuxOptions{Options: httpsync.Options{Auth: auth.DevAuth{}}}))
	t.Cleanup(srv.Close)
	return srv, runs
}

func opPost(t *testing.T, url, contentType string, body []byte, actor string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if actor != "" {
		req.Header.Set("X-Actor", actor)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Content-Type"), b
}

func TestOperationsHTTP(t *testing.T) {
	srv, runs := newOperationsServer(t)
	ctx := context.Background()
	c := &httpsync.OperationsClient{URL: srv.URL + "/operations", ClientID: "op", Header: http.Header{"X-Actor": {"ada"}}}
	list := opwire.Object{{Key: "list", Value: "L"}}

	cmd := opwire.Object{{Key: "id", Value: "t1"}}
	a, err := c.Command(ctx, "addTodo", "req-1", cmd)
	if err != nil || a.Status != opwire.StatusApplied || a.CommitSeq != 1 {
		t.Fatalf("command: %+v %v", a, err)
	}
	if a, err = c.Command(ctx, "addTodo", "req-1", cmd); err != nil || a.Status != opwire.StatusCached || a.CommitSeq != 1 || *runs != 1 {
		t.Fatalf("retried command: %+v %v runs=%d", a, err, *runs)
	}
	q, err := c.Query(ctx, "todosByList", list)
	if err != nil || q.MaxCommitSeq != 1 || len(q.Rows) != 1 {
		t.Fatalf("query: %+v %v", q, err)
	}
	if title, _ := q.Rows[0].Get("title"); title != "from a command" {
		t.Fatalf("row %v", q.Rows[0])
	}

	valid, _ := opwire.Encode(opwire.Object{{Key: "revision", Value: 1.0}, {Key: "kind", Value: "query"},
		{Key: "clientId", Value: "op"}, {Key: "operationId", Value: "todosByList"}, {Key: "params", Value: list}})
	cases := []struct {
		name        string
		contentType string
		body        []byte
		actor       string
		status      int
		code        syncerr.Code
		jsonBody    bool // the sync route's JSON error body, not an encoded error
	}{
		{"wrong content type", "application/json", valid, "ada", 415, syncerr.OperationInvalidRequest, false},
		{"no authentication", opwire.ContentType, valid, "", 401, syncerr.AuthRequired, true},
		{"not a tagged value", opwire.ContentType, []byte(`{"revision":1}`), "ada", 400, syncerr.OperationInvalidRequest, false},
		{"truncated", opwire.ContentType, valid[:len(valid)-3], "ada", 400, syncerr.OperationInvalidRequest, false},
		{"body over 1 MiB", opwire.ContentType, append(bytes.Repeat([]byte(" "), bodybudget.MaxOperationBodyBytes), valid...), "ada", 413, syncerr.OperationInvalidRequest, false},
		{"forbidden scope", opwire.ContentType, bytes.Replace(valid, []byte(`"v":"L"`), []byte(`"v":"M"`), 1), "ada", 403, syncerr.OperationForbidden, false},
		{"unknown operation", opwire.ContentType, bytes.Replace(valid, []byte("todosByList"), []byte("nope"), 1), "ada", 404, syncerr.OperationUnknown, false},
	}
	for _, tc := range cases {
		status, ct, body := opPost(t, srv.URL+"/operations", tc.contentType, tc.body, tc.actor)
		var code string
		if tc.jsonBody {
			if !strings.HasPrefix(ct, "application/json") || !bytes.Contains(body, []byte(`"code":"`+string(tc.code)+`"`)) {
				t.Errorf("%s: %s %s", tc.name, ct, body)
			}
			code = string(tc.code)
		} else {
			v, err := opwire.Decode(body)
			if err != nil || ct != opwire.ContentType {
				t.Errorf("%s: response %s %q is not an encoded error: %v", tc.name, ct, body, err)
				continue
			}
			kind, _ := v.(opwire.Object).Get("kind")
			c, _ := v.(opwire.Object).Get("code")
			if kind != "error" {
				t.Errorf("%s: kind %v", tc.name, kind)
			}
			code, _ = c.(string)
		}
		if status != tc.status || code != string(tc.code) {
			t.Errorf("%s: HTTP %d %s, want %d %s", tc.name, status, code, tc.status, tc.code)
		}
	}
	// The server keeps serving after every refusal.
	if q, err := c.Query(ctx, "todosByList", list); err != nil || len(q.Rows) != 1 {
		t.Fatalf("after refusals: %+v %v", q, err)
	}
	// The request counter sees the route.
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	m, _ := io.ReadAll(res.Body)
	if !bytes.Contains(m, []byte(`route="operations"`)) {
		t.Fatalf("metrics lack the operations route")
	}
	// The engine's operation counters: refusals before the engine (content
	// type, authentication, decoding) are not in them.
	for _, want := range []string{
		`synclane_operations_executed_total{kind="query"} 2`,
		`synclane_operations_executed_total{kind="command"} 2`,
		`synclane_operations_refused_total{kind="query",code="operation.forbidden"} 1`,
		`synclane_operations_refused_total{kind="query",code="operation.unknown"} 1`,
	} {
		if !promtext.Has(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	samples, err := promtext.Samples(m)
	if err != nil {
		t.Fatal(err)
	}
	for k := range samples {
		if strings.HasPrefix(k, "synclane_operations_refused_total{") && strings.Contains(k, `kind="command"`) {
			t.Errorf("a command refusal was counted (%s); none happened", k)
		}
	}
}
