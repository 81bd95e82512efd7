package engine_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// notesSchema: notes scoped by owner.
const notesSchema = `{"version":1,"tables":[{"name":"notes","columns":[
 {"name":"id","type":"string"},{"name":"owner","type":"string"},{"name":"body","type":"string"}],
 "primaryKey":"id","scopes":["owner:{owner}"]}]}`

// Config.Tracing takes the host's OpenTelemetry TracerProvider: the
// engine's spans (the request, its steps on the partition's actor, the
// storage commit, ...) go through it. The SDK and the exporter are the
// host's; here an in-memory exporter stands in for OTLP.
func ExampleConfig_tracing() {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter)) // a real host: sdktrace.WithBatcher(otlpExporter)
	defer tp.Shutdown(context.Background())                         // deferred first, so it runs after eng.Close

	sch, err := schema.Parse([]byte(notesSchema))
	if err != nil {
		log.Fatal(err)
	}
	eng, err := engine.New(context.Background(), engine.Config{
		Schema:   sch,
		Backend:  memory.New().Backend(),
		Resolver: engine.AllowAll(sch),
		Tracing:  tp,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	srv := httptest.NewServer(httpsync.NewHandler(eng, httpsync.Options{Auth: auth.DevAuth{}}))
	client := &httpsync.Client{URL: srv.URL, ClientID: "c1", Header: http.Header{"X-Actor": {"ada"}}}
	if err := client.Handshake(context.Background()); err != nil {
		log.Fatal(err)
	}
	srv.Close() // waits for the handler, so its spans have ended

	var names []string
	for _, s := range exporter.GetSpans() {
		if !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}
	}
	fmt.Println("request span:", slices.Contains(names, "synclane.sync"))
	fmt.Println("actor steps:", slices.Contains(names, "synclane.queue_wait"))
	// Output:
	// request span: true
	// actor steps: true
}
