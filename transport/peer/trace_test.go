package peer

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// TestForwardedSyncCarriesTraceparent: a forwarded sync call carries the
// caller's span context as a W3C traceparent, and the owner's sync span
// (with the actor's steps under it) continues the caller's trace.
func TestForwardedSyncCarriesTraceparent(t *testing.T) {
	secret, _ := NewSecret([]byte("cluster secret"))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	sch := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: sch, Backend: memory.New().Backend(), Resolver: engine.AllowAll(sch), Tracing: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(NewHandler(eng, HandlerOptions{Secret: secret}))
	t.Cleanup(srv.Close)

	c, err := NewClient(ClientOptions{Self: "http://caller", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The forwarding member's span (its own provider: only its context
	// crosses the wire).
	callerTP := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = callerTP.Shutdown(context.Background()) })
	ctx, caller := callerTP.Tracer("test").Start(context.Background(), "synclane.forward")
	defer caller.End()
	id := engine.Identity{ActorID: "u1", Partition: "p1", Grants: map[string][]string{"list_id": {"L"}}}
	_ = decodeResponse(t, must(c.Sync(ctx, srv.URL, id, request(t, "c1", "", &ssp2.PullHeader{Accept: 1}))))

	var sync tracetest.SpanStub
	for deadline := time.Now().Add(5 * time.Second); ; {
		for _, s := range exp.GetSpans() {
			if s.Name == "synclane.sync" {
				sync = s
			}
		}
		if sync.Name != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the owner recorded no synclane.sync span")
		}
		time.Sleep(5 * time.Millisecond) // polling the exporter for a condition, with a deadline
	}
	want := caller.SpanContext()
	if sync.SpanContext.TraceID() != want.TraceID() || sync.Parent.SpanID() != want.SpanID() || !sync.Parent.IsRemote() {
		t.Fatalf("owner's sync span: trace %s parent %s (remote %v); want trace %s parent %s",
			sync.SpanContext.TraceID(), sync.Parent.SpanID(), sync.Parent.IsRemote(), want.TraceID(), want.SpanID())
	}
	if sync.SpanKind != trace.SpanKindServer {
		t.Errorf("owner's sync span kind %v, want server", sync.SpanKind)
	}
	steps := 0
	for _, s := range exp.GetSpans() {
		if s.Parent.SpanID() == sync.SpanContext.SpanID() {
			steps++
		}
	}
	if steps == 0 {
		t.Error("the owner's actor steps are not under its sync span")
	}
}
