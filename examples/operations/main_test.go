package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/httpsync"
)

func TestOperationsExample(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "app.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	eng, err := newEngine(ctx, store, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv := httptest.NewServer(newMux(eng, zap.NewNop()))
	defer srv.Close()

	// Ada syncs two todos the ordinary way.
	codec := ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)
	sc := &httpsync.Client{URL: srv.URL + "/api/sync", ClientID: "ada-phone", Header: http.Header{"X-Api-Key": {"key-ada"}}}
	for i, id := range []string{"milk", "eggs"} {
		row, _ := codec.AppendSparse(nil, ssp2.Row{id, "groceries", id, false, int64(i), int64(0)}, nil, 0)
		if _, err := sc.Push(ctx, &ssp2.PushCommit{ClientCommitID: id,
			Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: row}}}); err != nil {
			t.Fatal(err)
		}
	}
	client := func(key, cid string) *httpsync.OperationsClient {
		return &httpsync.OperationsClient{URL: srv.URL + "/api/operations", ClientID: cid, Header: http.Header{"X-Api-Key": {key}}}
	}
	ada, grace, bot := client("key-ada", "ada-script"), client("key-grace", "grace-script"), client("key-ops", "bot")
	groceries := opwire.Object{{Key: "list", Value: "groceries"}}

	q, err := ada.Query(ctx, "openTodos", groceries)
	if err != nil || len(q.Rows) != 2 || q.MaxCommitSeq != 2 {
		t.Fatalf("ada's open todos: %+v %v", q, err)
	}
	if _, err := grace.Query(ctx, "openTodos", groceries); syncerr.CodeOf(err) != syncerr.OperationForbidden {
		t.Fatalf("grace may not read groceries: %v", err)
	}
	if _, err := ada.Query(ctx, "listStats", nil); syncerr.CodeOf(err) != syncerr.OperationForbidden {
		t.Fatalf("listStats is for the bot: %v", err)
	}

	done := opwire.Object{{Key: "id", Value: "milk"}}
	// Command reads see only the caller's scopes: to grace the groceries
	// todo does not exist.
	if _, err := grace.Command(ctx, "completeTodo", "req-1", done); syncerr.CodeOf(err) != syncerr.OperationInvalidRequest {
		t.Fatalf("grace completing a groceries todo: %v", err)
	}
	a, err := ada.Command(ctx, "completeTodo", "req-1", done)
	if err != nil || a.Status != opwire.StatusApplied || a.CommitSeq != 3 {
		t.Fatalf("ada completes milk: %+v %v", a, err)
	}
	if again, err := ada.Command(ctx, "completeTodo", "req-1", done); err != nil || again.Status != opwire.StatusCached || again.CommitSeq != 3 {
		t.Fatalf("retry: %+v %v", again, err)
	}
	stats, err := bot.Query(ctx, "listStats", nil)
	if err != nil || len(stats.Rows) != 1 {
		t.Fatalf("stats: %+v %v", stats, err)
	}
	if total, _ := stats.Rows[0].Get("total"); total != int64(2) {
		t.Fatalf("total %v", total)
	}
	if d, _ := stats.Rows[0].Get("done"); d != int64(1) {
		t.Fatalf("done %v", d)
	}
	if q, err = ada.Query(ctx, "openTodos", groceries); err != nil || len(q.Rows) != 1 || q.MaxCommitSeq != 3 {
		t.Fatalf("after the command: %+v %v", q, err)
	}
}
