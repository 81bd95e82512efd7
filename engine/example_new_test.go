package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/sqlite"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// todoSchema is the application's schema (schema.Parse): one table whose
// rows are scoped by the list they belong to.
const todoSchema = `{"version":1,"tables":[{"name":"todos","columns":[
 {"name":"id","type":"string"},{"name":"list_id","type":"string"},{"name":"title","type":"string"}],
 "primaryKey":"id","scopes":["list:{list_id}"]}]}`

// apiKeys is the host's user directory: API key → user and partition (one
// partition per tenant).
var apiKeys = map[string]engine.Identity{
	"key-ada":   {ActorID: "ada", Partition: "acme"},
	"key-grace": {ActorID: "grace", Partition: "acme"},
}

// authenticate is the host's auth.Authenticator: it names the actor and the
// partition of a request, or refuses it with sync.auth_required (401).
func authenticate(r *http.Request) (engine.Identity, error) {
	id, ok := apiKeys[r.Header.Get("X-Api-Key")]
	if !ok {
		return engine.Identity{}, syncerr.New(syncerr.AuthRequired, "unknown or missing X-Api-Key")
	}
	return id, nil
}

// listsOf is the host's engine.ScopeResolver: the list_id values each user
// may read and write, asked once per request.
func listsOf(_ context.Context, id engine.Identity) (map[string][]string, error) {
	switch id.ActorID {
	case "ada":
		return map[string][]string{"list_id": {"groceries", "work"}}, nil
	case "grace":
		return map[string][]string{"list_id": {"work"}}, nil
	}
	return nil, errors.New("no such user") // revokes and denies (sync.forbidden)
}

// A minimal embedded server: the engine on a SQLite file, the sync, segment
// and realtime routes mounted on the host's own mux next to its own routes,
// the host's authentication and scopes. Realtime is a hub listed in
// Config.Extensions: New installs its hooks and starts it, in that order.
func ExampleNew() {
	ctx := context.Background()
	sch, err := schema.Parse([]byte(todoSchema))
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "synclane-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "app.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	hub := realtime.New(realtime.Options{Auth: auth.AuthenticatorFunc(authenticate)})
	eng, err := engine.New(ctx, engine.Config{
		Schema:     sch,                               // schema.Parse(jsonBytes)
		Backend:    store.Backend(),                   // sqlite / postgres / memory: the store's roles
		Resolver:   engine.ScopeResolverFunc(listsOf), // actor -> allowed scope values
		Extensions: []engine.Extension{hub},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	defer hub.Close() // deferred last, so it runs first: the hub closes before the engine

	opts := httpsync.Options{Auth: auth.AuthenticatorFunc(authenticate)} // request -> actor, partition
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "the host's own route")
	})
	mux.Handle("POST /api/sync", httpsync.NewHandler(eng, opts))
	mux.Handle("GET /api/segments/{id}", httpsync.NewSegmentHandler(eng, opts))
	mux.Handle("GET /api/realtime", hub)
	srv := httptest.NewServer(mux) // a real host: http.Server{Handler: mux, ...}.ListenAndServe()
	defer srv.Close()

	// A client of the server: grace's phone pushes a todo into her list and
	// one into a list she may not write.
	key := http.Header{"X-Api-Key": {"key-grace"}}
	client := &httpsync.Client{URL: srv.URL + "/api/sync", ClientID: "grace-phone", Header: key}
	codec := ssp2.NewRowCodec(sch.Table("todos").Columns)
	for _, row := range []ssp2.Row{{"t1", "work", "ship it"}, {"t2", "groceries", "milk"}} {
		payload, err := codec.AppendSparse(nil, row, nil, 0) // nil presence: the whole row
		if err != nil {
			log.Fatal(err)
		}
		results, err := client.Push(ctx, &ssp2.PushCommit{ClientCommitID: "c-" + row[0].(string),
			Operations: []ssp2.Operation{{Table: "todos", RowID: row[0].(string), Op: ssp2.OpUpsert, Payload: payload}}})
		if err != nil {
			log.Fatal(err)
		}
		if r := results[0]; r.Status == ssp2.CommitApplied {
			fmt.Printf("%s into %s: applied at seq %d\n", row[0], row[1], *r.CommitSeq)
		} else {
			fmt.Printf("%s into %s: %s\n", row[0], row[1], r.Results[0].Code)
		}
	}
	sock, err := realtime.Dial(ctx, srv.URL+"/api/realtime", "grace-phone", realtime.DialOptions{Header: key})
	if err != nil {
		log.Fatal(err)
	}
	defer sock.Close()
	fmt.Println("realtime socket open")
	_, err = (&httpsync.Client{URL: srv.URL + "/api/sync", ClientID: "x"}).Push(ctx)
	fmt.Println("without a key:", syncerr.CodeOf(err))
	// Output:
	// t1 into work: applied at seq 1
	// t2 into groceries: sync.forbidden
	// realtime socket open
	// without a key: sync.auth_required
}
