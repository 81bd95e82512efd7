// Command operations shows remote operations (REMOTE.md revision 1) in an
// embedded synclane: a scoped registered query, a privileged one, and a
// command, served at POST /api/operations next to POST /api/sync.
//
//	go run ./examples/operations
//
// A process without a client database (a worker, a script, another
// service) reads authoritative rows with a query and changes them with a
// command; the command's commit reaches every synced client like a push.
package main

import (
	"context"
	"errors"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// apiKeys maps API keys to (user, workspace); the workspace is the
// partition.
var apiKeys = map[string]engine.Identity{
	"key-ada":   {ActorID: "ada", Partition: "workspace-1"},
	"key-grace": {ActorID: "grace", Partition: "workspace-1"},
	"key-ops":   {ActorID: "ops-bot", Partition: "workspace-1"},
}

// lists says which todo lists each user may read and write.
var lists = map[string][]string{
	"ada":     {"groceries", "work"},
	"grace":   {"work"},
	"ops-bot": {"*"},
}

func authenticate(r *http.Request) (engine.Identity, error) {
	id, ok := apiKeys[r.Header.Get("X-Api-Key")]
	if !ok {
		return engine.Identity{}, syncerr.New(syncerr.AuthRequired, "unknown or missing X-Api-Key")
	}
	return id, nil
}

func resolveScopes(_ context.Context, id engine.Identity) (map[string][]string, error) {
	l, ok := lists[id.ActorID]
	if !ok {
		return nil, errors.New("no such user")
	}
	return map[string][]string{"list_id": l}, nil
}

// param reads a string from a request's params object.
func param(params any, key string) string {
	o, _ := params.(opwire.Object)
	v, _ := o.Get(key)
	s, _ := v.(string)
	return s
}

// registry registers the host's operations for s.
func registry(s *schema.Schema) (*operations.Registry, error) {
	reg := operations.NewRegistry(s)
	// Scoped: the caller names the list in params.list; the engine checks
	// it against the caller's resolved scopes and restricts {todos} to it.
	if err := reg.AddQuery(operations.Query{
		ID:  "openTodos",
		SQL: "SELECT t.id, t.title, t.position FROM {todos AS t} WHERE t.done = ? ORDER BY t.position, t.id",
		Columns: []operations.Column{
			{Name: "id", Type: ssp2.TypeString}, {Name: "title", Type: ssp2.TypeString}, {Name: "position", Type: ssp2.TypeInteger},
		},
		MaxRows:  500,
		Bind:     func(any) ([]any, error) { return []any{false}, nil },
		Coverage: []operations.Coverage{{Table: "todos", Params: map[string]string{"list_id": "list"}}},
	}); err != nil {
		return nil, err
	}
	// Privileged: workspace-wide statistics for the ops bot only.
	if err := reg.AddQuery(operations.Query{
		ID:  "listStats",
		SQL: "SELECT list_id, count(*) AS total, sum(CASE WHEN done THEN 1 ELSE 0 END) AS done FROM {todos} GROUP BY list_id ORDER BY list_id",
		Columns: []operations.Column{
			{Name: "list_id", Type: ssp2.TypeString}, {Name: "total", Type: ssp2.TypeInteger}, {Name: "done", Type: ssp2.TypeInteger},
		},
		MaxRows:   1000,
		Authorize: func(_ context.Context, c operations.Caller, _ any) (bool, error) { return c.ActorID == "ops-bot", nil },
	}); err != nil {
		return nil, err
	}
	// A command: complete one todo. It reads the stored row inside the
	// push transaction and returns the full new row; the write path checks
	// the caller's scopes, so grace cannot complete a groceries todo.
	if err := reg.AddCommand(operations.Command{
		ID:        "completeTodo",
		Authorize: func(context.Context, operations.Caller, any) (bool, error) { return true, nil },
		Run: func(ctx context.Context, inv operations.Invocation) ([]operations.Mutation, error) {
			row, err := inv.Rows.GetRow(ctx, "todos", param(inv.Params, "id"))
			if err != nil {
				return nil, err
			}
			if row == nil {
				return nil, syncerr.New(syncerr.OperationInvalidRequest, "no such todo")
			}
			row["done"] = true
			row["updated_at_ms"] = time.Now().UnixMilli()
			return []operations.Mutation{{Table: "todos", Values: row}}, nil
		},
	}); err != nil {
		return nil, err
	}
	return reg, nil
}

// newMux mounts sync and operations behind the host's authentication.
func newMux(eng *engine.Engine, logger *zap.Logger) *http.ServeMux {
	opts := httpsync.Options{Auth: auth.AuthenticatorFunc(authenticate), Logger: logger}
	mux := http.NewServeMux()
	mux.Handle("POST /api/sync", httpsync.NewHandler(eng, opts))
	mux.Handle("POST /api/operations", httpsync.NewOperationsHandler(eng, opts))
	return mux
}

func newEngine(ctx context.Context, store *sqlite.Store, logger *zap.Logger) (*engine.Engine, error) {
	s := schema.MustDemo()
	reg, err := registry(s)
	if err != nil {
		return nil, err
	}
	return engine.New(ctx, engine.Config{Schema: s, Backend: store.Backend(), Resolver: engine.ScopeResolverFunc(resolveScopes),
		Logger: logger, Operations: operations.Options{Registry: reg}, Segments: segments.Options{Images: sqliteimage.Builder{}}})
}

func main() {
	logger, _ := zap.NewProduction()
	defer logger.Sync() //nolint:errcheck
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "synclane-operations-")
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), sqlite.Options{Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	eng, err := newEngine(ctx, store, logger)
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: newMux(eng, logger), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("synclane with remote operations on http://127.0.0.1:8080/api/operations")
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
