package cors_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/cors"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// pagesSchema: pages scoped by site.
const pagesSchema = `{"version":1,"tables":[{"name":"pages","columns":[
 {"name":"id","type":"string"},{"name":"site_id","type":"string"},{"name":"html","type":"string"}],
 "primaryKey":"id","scopes":["site:{site_id}"]}]}`

// A browser page on another origin reaches handlers mounted on the host's
// own mux through a Policy: Wrap answers preflights and adds the CORS
// headers for allowed origins. Route OPTIONS to the wrapped handler too (a
// "GET /path" pattern does not match a preflight); list the headers the
// host's authenticator reads in ExtraHeaders. (httpsync.MuxOptions.CORS
// does all of this for a Mux.)
func ExamplePolicy_Wrap() {
	sch, err := schema.Parse([]byte(pagesSchema))
	if err != nil {
		log.Fatal(err)
	}
	authn := auth.DevAuth{}
	hub := realtime.New(realtime.Options{Auth: authn})
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(),
		Resolver: engine.AllowAll(sch), Extensions: []engine.Extension{hub}})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	defer hub.Close()

	policy, err := cors.New(cors.Options{
		Origins:      []string{"https://app.example.com"}, // MaxAge 0: cors.DefaultMaxAge
		ExtraHeaders: []string{"X-Actor", "X-Partition"},  // what DevAuth reads
	})
	if err != nil {
		log.Fatal(err)
	}
	opts := httpsync.Options{Auth: authn}
	mux := http.NewServeMux()
	mux.Handle("/api/sync", policy.Wrap(httpsync.NewHandler(eng, opts))) // every method: preflights included
	seg := policy.Wrap(httpsync.NewSegmentHandler(eng, opts))
	mux.Handle("GET /api/segments/{id}", seg)
	mux.Handle("OPTIONS /api/segments/{id}", seg)
	mux.Handle("GET /api/realtime", policy.Wrap(hub)) // upgrades from other origins: 403
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, origin := range []string{"https://app.example.com", "https://evil.example"} {
		req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/api/sync", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type, x-actor")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Printf("preflight from %s: allow-origin %q\n", origin, res.Header.Get("Access-Control-Allow-Origin"))
	}
	// Output:
	// preflight from https://app.example.com: allow-origin "https://app.example.com"
	// preflight from https://evil.example: allow-origin ""
}
