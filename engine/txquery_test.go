package engine_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
)

// txQueryRegistry registers the queries the hook tests run in the push
// transaction: projectCount (privileged, one argument), projectIDs
// (scoped: a hook runs it over the whole partition anyway) and broken.
func txQueryRegistry(t *testing.T, c *engine.Config, extra ...operations.Query) {
	t.Helper()
	reg := operations.NewRegistry(c.Schema)
	allow := func(context.Context, operations.Caller, any) (bool, error) { return true, nil }
	qs := append([]operations.Query{
		{ID: "projectCount", SQL: "SELECT count(*) AS n FROM {tasks} WHERE project_id = ?", MaxRows: 1, Authorize: allow,
			Columns: []operations.Column{{Name: "n", Type: ssp2.TypeInteger}},
			Bind:    func(any) ([]any, error) { return []any{"?"}, nil }},
		{ID: "projectIDs", SQL: "SELECT id FROM {tasks} ORDER BY id", MaxRows: 10,
			Columns:  []operations.Column{{Name: "id", Type: ssp2.TypeString}},
			Coverage: []operations.Coverage{{Table: "tasks", Params: map[string]string{"project_id": "project"}}}},
		{ID: "broken", SQL: "SELECT nosuch AS n FROM {tasks}", MaxRows: 1, Authorize: allow,
			Columns: []operations.Column{{Name: "n", Type: ssp2.TypeInteger}}},
	}, extra...)
	for _, q := range qs {
		if err := reg.AddQuery(q); err != nil {
			t.Fatal(err)
		}
	}
	c.Operations.Registry = reg
}

// count reads a projectCount answer.
func count(rows engine.QueryRows, err error) (int64, error) {
	if err != nil {
		return -1, err
	}
	if !reflect.DeepEqual(rows.Columns, []string{"n"}) || len(rows.Rows) != 1 {
		return -1, fmt.Errorf("projectCount answered %+v", rows)
	}
	return rows.Rows[0][0].(int64), nil
}

// Hooks read the candidate state with a registered query: a row
// validator sees the commit's earlier writes (not its own), the commit
// validator the whole commit; a later commit's delete is seen; a
// rejected commit's rows are gone for the next. Failed calls leave the
// push transaction usable.
func TestHookQueryReadsCandidateState(t *testing.T) {
	for _, b := range sqlBackends {
		t.Run(b.name, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string][]int64{} // commit → row validator counts…, commit validator count
			var ids []string
			var callErrs []error
			note := func(ccid string, n int64, err error) error {
				mu.Lock()
				defer mu.Unlock()
				seen[ccid] = append(seen[ccid], n)
				return err
			}
			f := newFixture(t, b.open(t), func(c *engine.Config) {
				txQueryRegistry(t, c)
				c.Validators = map[string]engine.RowValidator{"tasks": func(ctx context.Context, w *engine.RowWrite) error {
					n, err := count(w.Query(ctx, "projectCount", "P"))
					return note(w.ClientCommitID, n, err)
				}}
				c.CommitValidator = func(ctx context.Context, v *engine.CommitView) error {
					// Failed calls first: each is refused and the
					// transaction goes on.
					_, e1 := v.Query(ctx, "nope")
					_, e2 := v.Query(ctx, "projectCount")
					_, e3 := v.Query(ctx, "projectCount", struct{}{})
					_, e4 := v.Query(ctx, "broken")
					rows, err := v.Query(ctx, "projectIDs")
					if err != nil {
						return err
					}
					mu.Lock()
					callErrs = append(callErrs, e1, e2, e3, e4)
					ids = ids[:0]
					for _, r := range rows.Rows {
						ids = append(ids, r[0].(string))
					}
					mu.Unlock()
					n, err := count(v.Query(ctx, "projectCount", "P"))
					if err := note(v.ClientCommitID, n, err); err != nil {
						return err
					}
					if n > 2 {
						return &engine.Rejection{Code: "app.project_full", Message: "a project holds at most two tasks"}
					}
					return nil
				}
			})
			a := f.client("alice", "ca")
			steps := []struct {
				ccid   string
				ops    []ssp2.Operation
				status ssp2.CommitStatus
				counts []int64 // the row validators', then the commit validator's
			}{
				{"c1", []ssp2.Operation{upsert("tasks", "t1", f.row("t1", "P", "one"), nil)}, ssp2.CommitApplied, []int64{0, 1}},
				{"c2", []ssp2.Operation{upsert("tasks", "t2", f.row("t2", "P", "two"), nil), upsert("tasks", "q1", f.row("q1", "Q", "q"), nil),
					upsert("tasks", "t3", f.row("t3", "P", "three"), nil)}, ssp2.CommitRejected, []int64{1, 2, 2, 3}},
				{"c3", []ssp2.Operation{upsert("tasks", "t4", f.row("t4", "P", "four"), nil)}, ssp2.CommitApplied, []int64{1, 2}},
				{"c4", []ssp2.Operation{del("t1")}, ssp2.CommitApplied, []int64{2, 1}},
			}
			for _, s := range steps {
				if pr := a.push(s.ccid, s.ops...); pr.Status != s.status {
					t.Fatalf("%s: %+v, want %v", s.ccid, pr, s.status)
				}
				if got := seen[s.ccid]; !reflect.DeepEqual(got, s.counts) {
					t.Fatalf("%s: counts seen %v, want %v", s.ccid, got, s.counts)
				}
				if s.ccid == "c2" {
					// The scoped query ran over the whole partition, staged rows included.
					if want := []string{"q1", "t1", "t2", "t3"}; !reflect.DeepEqual(ids, want) {
						t.Fatalf("c2: projectIDs = %v, want %v", ids, want)
					}
				}
			}
			wantCodes := []syncerr.Code{syncerr.OperationUnknown, syncerr.OperationInvalidRequest, syncerr.OperationInvalidRequest, syncerr.OperationQueryFailed}
			for i, err := range callErrs[:4] {
				if syncerr.CodeOf(err) != wantCodes[i] {
					t.Fatalf("failed call %d: %v, want %s", i, err, wantCodes[i])
				}
			}
		})
	}
}

// A command reads with a registered query inside its transaction: the
// committed state under the partition's lock, its own earlier commits
// included.
func TestCommandQuery(t *testing.T) {
	for _, b := range sqlBackends {
		t.Run(b.name, func(t *testing.T) {
			f := newFixture(t, b.open(t), func(c *engine.Config) {
				txQueryRegistry(t, c)
				err := c.Operations.Registry.AddCommand(operations.Command{ID: "addCounted",
					Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
					Run: func(ctx context.Context, inv operations.Invocation) ([]operations.Mutation, error) {
						n, err := count(inv.Query(ctx, "projectCount", "P"))
						if err != nil {
							return nil, err
						}
						id := param(inv.Params, "id")
						return []operations.Mutation{{Table: "tasks", Values: map[string]any{"id": id, "project_id": "P", "title": fmt.Sprintf("n=%d", n)}}}, nil
					}})
				if err != nil {
					t.Fatal(err)
				}
			})
			for i, id := range []string{"k1", "k2", "k3"} {
				res, err := f.op("alice", "p1", command("addCounted", id, opwire.Object{{Key: "id", Value: id}}))
				if err != nil || res.Command.Status != opwire.StatusApplied {
					t.Fatalf("%s: %+v %v", id, res.Command, err)
				}
				if got, want := f.title(id), fmt.Sprintf("n=%d", i); got != want {
					t.Fatalf("%s: title %q, want %q", id, got, want)
				}
			}
		})
	}
}

// title returns task id's stored title ("" when absent).
func (f *fixture) title(id string) string {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.store.Log.BeginPush(ctx, "p1")
	if err != nil {
		f.t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rec, err := tx.GetRow(ctx, f.schema.Table("tasks"), id)
	if err != nil {
		f.t.Fatal(err)
	}
	if rec == nil {
		return ""
	}
	return rec.Values[2].(string)
}

// hasCode reports whether err's chain holds a *syncerr.Error with code.
func hasCode(err error, code syncerr.Code) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if e, ok := err.(*syncerr.Error); ok && e.Code == code {
			return true
		}
	}
	return false
}

// remoteOnlyStore is a custom backend that runs remote queries (it has
// the Queries role) but not inside its push transaction: the in-memory
// store, whose PushTx.Query answers storage.ErrTxQueryUnsupported, with a
// stand-in Querier (the built-in memory store has none, so engine.New
// refuses registered queries on it).
type remoteOnlyStore struct {
	*memory.Store
	// fail, when set, is what every PushTx.Query answers instead.
	fail error
}

func (s remoteOnlyStore) Backend() storage.Backend {
	b := s.Store.Backend()
	b.Queries = noQuerier{}
	b.Log = s
	return b
}

func (s remoteOnlyStore) BeginPush(ctx context.Context, partition string) (storage.PushTx, error) {
	tx, err := s.Store.BeginPush(ctx, partition)
	if err != nil || s.fail == nil {
		return tx, err
	}
	return failingQueryTx{PushTx: tx, fail: s.fail}, nil
}

type failingQueryTx struct {
	storage.PushTx
	fail error
}

func (tx failingQueryTx) Query(context.Context, storage.Query) (storage.QueryResult, error) {
	return storage.QueryResult{}, tx.fail
}

type noQuerier struct{}

func (noQuerier) Query(context.Context, string, int32, storage.Query, func(storage.ServeGate) error) (storage.QueryResult, error) {
	return storage.QueryResult{}, errors.New("not used")
}

// A backend without transaction queries fails a hook's query with
// sync.storage.transaction_query_unsupported (returned as is, it rejects
// the commit with sync.constraint_violation), and a command's too.
func TestTxQueryUnsupported(t *testing.T) {
	var hookErr error
	f := newFixture(t, remoteOnlyStore{Store: memory.New()}, func(c *engine.Config) {
		txQueryRegistry(t, c)
		c.CommitValidator = func(ctx context.Context, v *engine.CommitView) error {
			_, hookErr = v.Query(ctx, "projectCount", "P")
			return hookErr
		}
		err := c.Operations.Registry.AddCommand(operations.Command{ID: "reads",
			Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
			Run: func(ctx context.Context, inv operations.Invocation) ([]operations.Mutation, error) {
				_, err := inv.Query(ctx, "projectCount", "P")
				return nil, err
			}})
		if err != nil {
			t.Fatal(err)
		}
	})
	pr := f.client("alice", "ca").push("c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
	if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != string(syncerr.ConstraintViolation) || pr.Results[0].Message != "whole-commit validator failed" {
		t.Fatalf("push: %+v", pr.Results)
	}
	if syncerr.CodeOf(hookErr) != syncerr.TransactionQueryUnsupported || syncerr.As(hookErr).Message != syncerr.MsgTransactionQueryUnsupported {
		t.Fatalf("hook's query: %v, want %s", hookErr, syncerr.TransactionQueryUnsupported)
	}
	_, err := f.op("alice", "p1", command("reads", "r1", nil))
	if err == nil || syncerr.CodeOf(err) != syncerr.OperationExecutionFailed || !hasCode(err, syncerr.TransactionQueryUnsupported) {
		t.Fatalf("command: %v, want operation.execution_failed caused by %s", err, syncerr.TransactionQueryUnsupported)
	}
}

// On PostgreSQL a registered SELECT can reach a write through a function;
// inside the push transaction it is refused (operation.query_failed),
// nothing it touched changes, and the commit goes on.
func TestHookQueryCannotWrite(t *testing.T) {
	name := pgtest.NewSchema(t)
	st := pgtest.OpenSchema(t, name, postgres.Options{MaxConns: 4})
	var queryErr error
	f := newFixture(t, st, func(c *engine.Config) {
		wipe := pgx.Identifier{name, "q_wipe"}.Sanitize()
		conn, err := pgx.Connect(t.Context(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(context.Background()) }()
		// The engine creates the tasks table; the function is resolved
		// when it runs.
		fn := "CREATE FUNCTION " + wipe + "() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN DELETE FROM " +
			pgx.Identifier{name, "tasks"}.Sanitize() + "; RETURN 1; END $$"
		if _, err := conn.Exec(t.Context(), fn); err != nil {
			t.Fatal(err)
		}
		txQueryRegistry(t, c, operations.Query{ID: "wipe", SQL: "SELECT max(" + wipe + "()) AS n FROM {tasks}", MaxRows: 1,
			Columns:   []operations.Column{{Name: "n", Type: ssp2.TypeInteger}},
			Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil }})
		c.CommitValidator = func(ctx context.Context, v *engine.CommitView) error {
			_, queryErr = v.Query(ctx, "wipe")
			return nil
		}
	})
	a := f.client("alice", "ca")
	for _, id := range []string{"t1", "t2"} {
		if pr := a.push("c-"+id, upsert("tasks", id, f.row(id, "P", id), nil)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("%s: %+v", id, pr)
		}
		if syncerr.CodeOf(queryErr) != syncerr.OperationQueryFailed {
			t.Fatalf("%s: wipe answered %v, want %s", id, queryErr, syncerr.OperationQueryFailed)
		}
	}
	for _, id := range []string{"t1", "t2"} {
		if f.title(id) != id {
			t.Fatalf("%s is gone: the refused query wrote", id)
		}
	}
}

// A storage failure of a hook's or a command's query fails the commit as
// a storage failure (retryable, nothing stored), whatever the host does
// with the error.
func TestTxQueryStorageFailure(t *testing.T) {
	down := errors.New("storage: connection lost")
	f := newFixture(t, remoteOnlyStore{Store: memory.New(), fail: down}, func(c *engine.Config) {
		txQueryRegistry(t, c)
		c.CommitValidator = func(ctx context.Context, v *engine.CommitView) error {
			_, _ = v.Query(ctx, "projectCount", "P") // the failure is ignored
			return nil
		}
		err := c.Operations.Registry.AddCommand(operations.Command{ID: "reads",
			Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
			Run: func(ctx context.Context, inv operations.Invocation) ([]operations.Mutation, error) {
				_, err := inv.Query(ctx, "projectCount", "P")
				return nil, err
			}})
		if err != nil {
			t.Fatal(err)
		}
	})
	_, err := f.client("alice", "ca").sync(&ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{upsert("tasks", "t1", f.row("t1", "P", "x"), nil)}})
	if err == nil || syncerr.CodeOf(err) != syncerr.InternalError || !errors.Is(err, down) {
		t.Fatalf("push: %v, want %s caused by the storage failure", err, syncerr.InternalError)
	}
	if f.title("t1") != "" {
		t.Fatal("t1 was stored by a commit whose validator met a storage failure")
	}
	_, err = f.op("alice", "p1", command("reads", "r1", nil))
	if err == nil || syncerr.CodeOf(err) != syncerr.InternalError || !errors.Is(err, down) {
		t.Fatalf("command: %v, want %s caused by the storage failure", err, syncerr.InternalError)
	}
}
