package httpsync_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
)

// tracedServer serves a memory-backed engine whose spans go to the
// returned in-memory exporter.
func tracedServer(t *testing.T) (*httptest.Server, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := schema.MustDemo()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s), Tracing: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv := httptest.NewServer(httpsync.NewHandler(eng, httpsync.Options{Auth: auth.DevAuth{}}))
	t.Cleanup(srv.Close)
	return srv, exp
}

// syncSpan waits (the handler ends its span after the answer's last
// byte) for the sync span of kind kind and returns it with its trace's
// other spans.
func syncSpan(t *testing.T, exp *tracetest.InMemoryExporter, kind string) (tracetest.SpanStub, []tracetest.SpanStub) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		spans := exp.GetSpans()
		for _, s := range spans {
			if s.Name == "synclane.sync" && attr(s, "synclane.request.kind") == kind {
				var trace []tracetest.SpanStub
				for _, o := range spans {
					if o.SpanContext.TraceID() == s.SpanContext.TraceID() && o.SpanContext.SpanID() != s.SpanContext.SpanID() {
						trace = append(trace, o)
					}
				}
				return s, trace
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no synclane.sync span of kind %q among %v", kind, names(spans))
		}
		time.Sleep(5 * time.Millisecond) // polling the exporter for a condition, with a deadline
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func names(spans []tracetest.SpanStub) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

// childrenOf returns the names of the spans whose parent is p, sorted.
func childrenOf(p tracetest.SpanStub, spans []tracetest.SpanStub) []string {
	var out []string
	for _, s := range spans {
		if s.Parent.SpanID() == p.SpanContext.SpanID() {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return out
}

func find(t *testing.T, spans []tracetest.SpanStub, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no span %s among %v", name, names(spans))
	return tracetest.SpanStub{}
}

// TestTracingSpanTree: a push and a pull each get a server span
// synclane.sync with its request's attributes, and the steps on the
// partition's actor are its children (a bootstrap's segment build under
// the reply build).
func TestTracingSpanTree(t *testing.T) {
	srv, exp := tracedServer(t)
	c := &httpsync.Client{URL: srv.URL, ClientID: "c1", Header: http.Header{"X-Actor": {"ada"}}}
	ctx := context.Background()
	if pr := push1(t, c, commit("k1", upsert(t, "t1", "L", "one", nil), upsert(t, "t2", "L", "two", nil))); pr.Status != ssp2.CommitApplied {
		t.Fatalf("push: %+v", pr)
	}
	root, spans := syncSpan(t, exp, "push")
	if root.SpanKind != trace.SpanKindServer || root.Parent.IsValid() {
		t.Errorf("push sync span: kind %v, parent %v; want a server root", root.SpanKind, root.Parent)
	}
	for k, want := range map[string]string{"synclane.partition": "default", "synclane.push.commits": "1", "synclane.push.operations": "2",
		"http.response.status_code": "200"} {
		if got := attr(root, k); got != want {
			t.Errorf("push sync span %s = %q, want %q", k, got, want)
		}
	}
	if got, want := childrenOf(root, spans), []string{"synclane.apply", "synclane.commit", "synclane.gate_open", "synclane.gate_verify", "synclane.queue_wait"}; !slices.Equal(got, want) {
		t.Errorf("push span children = %v, want %v", got, want)
	}
	if a := find(t, spans, "synclane.apply"); attr(a, "synclane.push.applied") != "1" {
		t.Errorf("apply span attributes %v", a.Attributes)
	}
	if cm := find(t, spans, "synclane.commit"); attr(cm, "synclane.group.requests") != "1" {
		t.Errorf("commit span attributes %v", cm.Attributes)
	}

	exp.Reset()
	if _, err := c.Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {"L"}}, Cursor: -1}); err != nil {
		t.Fatal(err)
	}
	root, spans = syncSpan(t, exp, "pull")
	if got, want := childrenOf(root, spans), []string{"synclane.gate_open", "synclane.gate_verify", "synclane.queue_wait", "synclane.reply_build"}; !slices.Equal(got, want) {
		t.Errorf("pull span children = %v, want %v", got, want)
	}
	build := find(t, spans, "synclane.reply_build")
	if got := childrenOf(build, spans); !slices.Equal(got, []string{"synclane.segment_build"}) {
		t.Errorf("reply build children = %v, want the segment build", got)
	}
	if sb := find(t, spans, "synclane.segment_build"); attr(sb, "synclane.rows") != "2" || attr(sb, "synclane.table") != "todos" {
		t.Errorf("segment build attributes %v", sb.Attributes)
	}
}

// TestTracingTraceparentIsParent: a request's W3C traceparent becomes
// the parent of its sync span.
func TestTracingTraceparentIsParent(t *testing.T) {
	srv, exp := tracedServer(t)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	c := &httpsync.Client{URL: srv.URL, ClientID: "c1", Header: http.Header{"X-Actor": {"ada"},
		"Traceparent": {"00-" + traceID + "-" + parentID + "-01"}}}
	if pr := push1(t, c, commit("k1", upsert(t, "t1", "L", "one", nil))); pr.Status != ssp2.CommitApplied {
		t.Fatalf("push: %+v", pr)
	}
	root, spans := syncSpan(t, exp, "push")
	if got := root.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("trace id %s, want the caller's %s", got, traceID)
	}
	if got := root.Parent.SpanID().String(); got != parentID || !root.Parent.IsRemote() {
		t.Errorf("parent %s (remote %v), want the caller's span %s", got, root.Parent.IsRemote(), parentID)
	}
	if len(childrenOf(root, spans)) == 0 {
		t.Error("the actor's steps are not in the caller's trace")
	}
}
