package engine_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// TestTracingReactionLinksToRequest: a reaction's delivery is a root span
// (synclane.reaction) linked to the span of the request whose commit
// scheduled it, carrying the commit's partition and seq; the handler runs
// under it.
func TestTracingReactionLinksToRequest(t *testing.T) {
	ctx := context.Background()
	s, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(ctx) }()
	handled := make(chan trace.SpanContext, 1)
	eng, err := engine.New(ctx, engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s), Tracing: tp,
		Validators: map[string]engine.RowValidator{"tasks": func(ctx context.Context, w *engine.RowWrite) error {
			return w.React(engine.Reaction{Name: "mail", Payload: []byte(w.RowID)})
		}},
		Reactions: reactions.Options{Handlers: map[string]reactions.Handler{"mail": func(ctx context.Context, r reactions.Stored) error {
			handled <- trace.SpanContextFromContext(ctx)
			return nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	id := engine.Identity{ActorID: "u", Partition: "p"}
	rep, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	epoch := rep.Header().LogEpoch
	payload, err := ssp2.NewRowCodec(s.Table("tasks").Columns).AppendSparse(nil, ssp2.Row{"r1", "P", "title", nil}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	rctx, request := eng.Tracer().Start(ctx, "synclane.sync")
	rep, err = eng.Sync(rctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PushCommit{ClientCommitID: "k1", Operations: []ssp2.Operation{{Table: "tasks", RowID: "r1", Op: ssp2.OpUpsert, Payload: payload}}}}})
	request.End()
	if err != nil || rep.Applied != 1 {
		t.Fatalf("push: %v", err)
	}
	var inHandler trace.SpanContext
	select {
	case inHandler = <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the reaction was not delivered")
	}
	var delivery tracetest.SpanStub
	for deadline := time.Now().Add(5 * time.Second); delivery.Name == ""; {
		for _, sp := range exp.GetSpans() {
			if sp.Name == "synclane.reaction" {
				delivery = sp
			}
		}
		if delivery.Name == "" && time.Now().After(deadline) {
			t.Fatal("no synclane.reaction span")
		}
		time.Sleep(5 * time.Millisecond) // polling the exporter for a condition, with a deadline
	}
	if delivery.Parent.IsValid() || delivery.SpanContext.TraceID() == request.SpanContext().TraceID() {
		t.Errorf("the delivery is not a root span of its own trace (parent %v)", delivery.Parent)
	}
	if len(delivery.Links) != 1 || delivery.Links[0].SpanContext.SpanID() != request.SpanContext().SpanID() {
		t.Errorf("delivery links %v, want one to the request's span %s", delivery.Links, request.SpanContext().SpanID())
	}
	if inHandler.SpanID() != delivery.SpanContext.SpanID() {
		t.Errorf("the handler ran under span %s, want the delivery's %s", inHandler.SpanID(), delivery.SpanContext.SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range delivery.Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["synclane.partition"] != "p" || attrs["synclane.commit_seq"] != "1" || attrs["synclane.reaction.name"] != "mail" {
		t.Errorf("delivery attributes %v", attrs)
	}
}
