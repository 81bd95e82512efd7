package httpsync_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// docsSchema: documents scoped by team.
const docsSchema = `{"version":1,"tables":[{"name":"docs","columns":[
 {"name":"id","type":"string"},{"name":"team_id","type":"string"},{"name":"title","type":"string"}],
 "primaryKey":"id","scopes":["team:{team_id}"]}]}`

// The Mux serves every protocol route under a mount (sync, segments,
// blobs, operations, realtime) plus /healthz and /readyz. With the host's
// prometheus.Registerer, synclane's collectors (the HTTP counters, the
// engine's, the body budget's and Collectors, here the realtime hub) join
// the host's own /metrics; the Go and process collectors are the host's
// choice.
func ExampleNewMux() {
	sch, err := schema.Parse([]byte(docsSchema))
	if err != nil {
		log.Fatal(err)
	}
	authn := auth.DevAuth{} // development only: x-actor and x-partition headers
	hub := realtime.New(realtime.Options{Auth: authn})
	eng, err := engine.New(context.Background(), engine.Config{
		Schema:     sch,
		Backend:    memory.New().Backend(),
		Resolver:   engine.AllowAll(sch),
		Extensions: []engine.Extension{hub},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()
	defer hub.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	syncMux := httpsync.NewMux(eng, httpsync.MuxOptions{
		Options:    httpsync.Options{Auth: authn},
		Mount:      "/api",
		Realtime:   hub,
		Registerer: reg,
		Collectors: []prometheus.Collector{hub}, // a realtime.Hub, a connlimit.Listener, a peer.Relay are collectors
	})
	host := http.NewServeMux()
	host.Handle("/api/", syncMux)
	host.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(host)
	defer srv.Close()

	client := &httpsync.Client{URL: srv.URL + "/api/sync", ClientID: "c1", Header: http.Header{"X-Actor": {"ada"}}}
	if err := client.Handshake(context.Background()); err != nil {
		log.Fatal(err)
	}
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, name := range []string{"go_goroutines", "synclane_draining", "synclane_realtime_accepted_total"} {
		fmt.Printf("%s: %v\n", name, regexp.MustCompile(`(?m)^# TYPE `+name+` `).Match(body))
	}
	// Output:
	// go_goroutines: true
	// synclane_draining: true
	// synclane_realtime_accepted_total: true
}
