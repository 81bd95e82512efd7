package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
)

// TestOperationCallbackPanicsAreRefusals: an Authorize or Bind callback
// that panics refuses its operation (operation.forbidden, or
// operation.invalid_request for Bind) instead of unwinding out of
// operations.Service.Run into the caller's goroutine (a live watch runs on its
// own), and a panicking scope resolver fails closed.
func TestOperationCallbackPanicsAreRefusals(t *testing.T) {
	build := func(s *schema.Schema) *operations.Registry {
		reg := operations.NewRegistry(s)
		boom := func(context.Context, operations.Caller, any) (bool, error) { panic("policy bug") }
		allow := func(context.Context, operations.Caller, any) (bool, error) { return true, nil }
		for _, q := range []operations.Query{
			{ID: "authPanics", SQL: "SELECT id FROM {tasks}", MaxRows: 1, Columns: []operations.Column{{Name: "id", Type: ssp2.TypeString}}, Authorize: boom},
			{ID: "bindPanics", SQL: "SELECT id FROM {tasks} WHERE title <> ?", MaxRows: 1, Columns: []operations.Column{{Name: "id", Type: ssp2.TypeString}},
				Authorize: allow, Bind: func(any) ([]any, error) { panic("bind bug") }},
		} {
			if err := reg.AddQuery(q); err != nil {
				t.Fatal(err)
			}
		}
		if err := reg.AddCommand(operations.Command{ID: "cmdAuthPanics", Authorize: boom,
			Run: func(context.Context, operations.Invocation) ([]operations.Mutation, error) { return nil, nil }}); err != nil {
			t.Fatal(err)
		}
		return reg
	}
	// SQLite: registered queries need a backend with the Queries role.
	f := newFixture(t, sqlBackends[0].open(t), func(c *engine.Config) { c.Operations.Registry = build(c.Schema) })
	for _, tc := range []struct {
		req  *opwire.Request
		want syncerr.Code
	}{
		{&opwire.Request{Kind: opwire.KindQuery, ClientID: "w", OperationID: "authPanics"}, syncerr.OperationForbidden},
		{&opwire.Request{Kind: opwire.KindQuery, ClientID: "w", OperationID: "bindPanics"}, syncerr.OperationInvalidRequest},
		{&opwire.Request{Kind: opwire.KindCommand, ClientID: "w", OperationID: "cmdAuthPanics", RequestID: "r1"}, syncerr.OperationForbidden},
	} {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: the panic escaped Operations().Run: %v", tc.req.OperationID, r)
				}
			}()
			_, err = f.eng.Operations().Run(context.Background(), engine.Identity{ActorID: "a", Partition: "p1"}, tc.req)
		}()
		if got := syncerr.CodeOf(err); got != tc.want {
			t.Errorf("%s: %v (code %s), want %s", tc.req.OperationID, err, got, tc.want)
		}
	}

	// A resolver that panics fails closed like a failing one: the write is
	// refused sync.forbidden, the engine keeps serving.
	g := newFixture(t, memory.New(), func(c *engine.Config) {
		c.Resolver = engine.ScopeResolverFunc(func(context.Context, engine.Identity) (map[string][]string, error) { panic("resolver bug") })
	})
	c := g.client("ada", "c1") // the handshake resolves nothing
	for i := range 2 {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("a panicking resolver's panic escaped Engine.Sync: %v", r)
				}
			}()
			if pr := c.push(fmt.Sprintf("k%d", i), upsert("tasks", "t1", g.row("t1", "P", "x"), nil)); pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "sync.forbidden" {
				t.Fatalf("write under a panicking resolver: %+v", pr)
			}
		}()
	}
}
