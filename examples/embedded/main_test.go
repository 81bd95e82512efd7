package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/httpsync"
)

func TestEmbeddedHostAuthAndScopes(t *testing.T) {
	eng, err := engine.New(context.Background(), engine.Config{Schema: schema.MustDemo(), Backend: memory.New().Backend(),
		Resolver: engine.ScopeResolverFunc(resolveScopes)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv := httptest.NewServer(newMux(eng, zap.NewNop()))
	defer srv.Close()
	codec := ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)
	push := func(key, id, list string) (*ssp2.PushResult, error) {
		row, _ := codec.AppendSparse(nil, ssp2.Row{id, list, "milk", false, int64(0), int64(0)}, nil, 0)
		c := &httpsync.Client{URL: srv.URL + "/api/sync", ClientID: "c-" + key, Header: http.Header{"X-Api-Key": {key}}}
		rs, err := c.Push(context.Background(), &ssp2.PushCommit{ClientCommitID: id,
			Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: row}}})
		if err != nil {
			return nil, err
		}
		return rs[0], nil
	}
	if pr, err := push("key-ada", "t1", "groceries"); err != nil || pr.Status != ssp2.CommitApplied {
		t.Fatalf("ada into groceries: %+v %v", pr, err)
	}
	if pr, err := push("key-grace", "t2", "groceries"); err != nil || pr.Results[0].Code != "sync.forbidden" {
		t.Fatalf("grace into groceries: %+v %v", pr, err)
	}
	if _, err := push("nope", "t3", "work"); syncerr.CodeOf(err) != syncerr.AuthRequired {
		t.Fatalf("unknown key: %v", err)
	}
	res, err := http.Get(srv.URL + "/hello")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("host route: %v %v", res, err)
	}
	res.Body.Close()
}
