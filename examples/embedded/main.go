// Command embedded shows synclane embedded in a host's own net/http server:
// the host authenticates requests its own way (here an API key header that
// maps to a user and a workspace), decides which lists each user may see
// (its scope resolver), and mounts the sync handler next to its own routes.
//
//	go run ./examples/embedded
//	curl -s localhost:8080/hello
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
	"github.com/synclane/synclane/engine/segments"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/segstore/sqliteimage"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// apiKeys is the host's user directory: API key → (user, workspace).
var apiKeys = map[string]engine.Identity{
	"key-ada":   {ActorID: "ada", Partition: "workspace-1"},
	"key-grace": {ActorID: "grace", Partition: "workspace-1"},
}

// lists says which todo lists each user may read and write.
var lists = map[string][]string{
	"ada":   {"groceries", "work"},
	"grace": {"work"},
}

// authenticate is the host's Authenticator: the workspace is the partition.
func authenticate(r *http.Request) (engine.Identity, error) {
	id, ok := apiKeys[r.Header.Get("X-Api-Key")]
	if !ok {
		return engine.Identity{}, syncerr.New(syncerr.AuthRequired, "unknown or missing X-Api-Key")
	}
	return id, nil
}

// resolveScopes is the host's ScopeResolver: list_id values per user.
func resolveScopes(_ context.Context, id engine.Identity) (map[string][]string, error) {
	l, ok := lists[id.ActorID]
	if !ok {
		return nil, errors.New("no such user")
	}
	return map[string][]string{"list_id": l}, nil
}

// newMux is the host's router: its own routes plus synclane at /api/sync.
func newMux(eng *engine.Engine, logger *zap.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("the host's own routes live next to sync\n"))
	})
	mux.Handle("POST /api/sync", httpsync.NewHandler(eng, httpsync.Options{
		Auth:   auth.AuthenticatorFunc(authenticate),
		Logger: logger,
		// A client that stops reading its answer is cut off after 60s
		// without progress.
		WriteTimeout: 60 * time.Second,
	}))
	return mux
}

func main() {
	logger, _ := zap.NewProduction()
	defer logger.Sync() //nolint:errcheck
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "synclane-embedded-")
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), sqlite.Options{Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	eng, err := engine.New(ctx, engine.Config{
		Schema:   schema.MustDemo(),
		Backend:  store.Backend(),
		Resolver: engine.ScopeResolverFunc(resolveScopes),
		Logger:   logger,
		// SQLite images (SPEC §5.3) for clients accepting them; without
		// a builder such clients get rows segments.
		Segments: segments.Options{Images: sqliteimage.Builder{}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	// Timeouts keep slow or stuck clients from holding connections: a
	// whole request within 30s, answers within 60s (the sync handler renews
	// its own deadline as bytes flow), idle keep-alives closed after 2m.
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: newMux(eng, logger), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("embedded synclane on http://127.0.0.1:8080/api/sync")
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
