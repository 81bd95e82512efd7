package partition

import (
	"context"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// TestTracingGroupCommitSpans: two pushes served in one storage
// transaction share one gate-open, commit and gate-verify span, each the
// child of the first request's span with a link to the second's; each
// request's queue wait and apply spans are under its own span. An
// untraced request (no recording span) gets no spans and no link.
func TestTracingGroupCommitSpans(t *testing.T) {
	ctx := context.Background()
	s := testSchema(t)
	st := memory.New()
	if err := st.EnsureSchema(ctx, s); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(ctx) }()
	tr := tp.Tracer("test")
	pc := NewConfig(s, st.Backend(), Gate{Running: s.Version})
	pc.Tracer = tr
	p := New("p", pc)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p.load(ctx) // as the first job would: the clients send the epoch
	epoch := p.token.LogEpoch
	job := func(jctx context.Context, cid string) *SyncJob {
		payload, err := pc.Codecs["tasks"].Append(nil, ssp2.Row{cid + "-r", "P", "T", "t"})
		if err != nil {
			t.Fatal(err)
		}
		req := &ssp2.Request{WireVersion: ssp2.WireV2, Header: &ssp2.ReqHeader{ClientID: cid, SchemaVersion: 1, LogEpoch: &epoch},
			Commits: []*ssp2.PushCommit{{ClientCommitID: "k", Operations: []ssp2.Operation{{Table: "tasks", RowID: cid + "-r", Op: ssp2.OpUpsert, Payload: payload}}}}}
		return NewSyncJob(jctx, "u", req, Allowed{"project_id": {"*"}, "team_id": {"*"}}, true)
	}
	ctx1, s1 := tr.Start(ctx, "request 1")
	ctx2, s2 := tr.Start(ctx, "request 2")
	jobs := []*SyncJob{job(ctx1, "c1"), job(ctx2, "c2"), job(ctx, "c3")}
	p.Handle(ctx, []Job{jobs[0], jobs[1], jobs[2]})
	for i, j := range jobs {
		if rep, err := j.Wait(ctx); err != nil || rep.Applied != 1 {
			t.Fatalf("push %d: %v, %+v", i+1, err, rep)
		}
	}
	s1.End()
	s2.End()

	spans := exp.GetSpans()
	under := func(parent trace.Span) []string {
		var out []string
		for _, sp := range spans {
			if sp.Parent.SpanID() == parent.SpanContext().SpanID() {
				out = append(out, sp.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	if got, want := under(s1), []string{"synclane.apply", "synclane.commit", "synclane.gate_open", "synclane.gate_verify", "synclane.queue_wait"}; !slices.Equal(got, want) {
		t.Errorf("under the first request: %v, want %v", got, want)
	}
	if got, want := under(s2), []string{"synclane.apply", "synclane.queue_wait"}; !slices.Equal(got, want) {
		t.Errorf("under the second request: %v, want %v", got, want)
	}
	shared := 0
	for _, sp := range spans {
		switch sp.Name {
		case "synclane.gate_open", "synclane.commit", "synclane.gate_verify":
			shared++
			if len(sp.Links) != 1 || sp.Links[0].SpanContext.SpanID() != s2.SpanContext().SpanID() {
				t.Errorf("%s links %v, want one link to the second request's span", sp.Name, sp.Links)
			}
			if got := attr(sp, "synclane.group.requests"); got != "3" {
				t.Errorf("%s synclane.group.requests = %q, want 3", sp.Name, got)
			}
		}
	}
	if shared != 3 {
		t.Errorf("%d shared group spans, want 3 (one each)", shared)
	}
	if n := len(spans); n != 2+5+2 {
		t.Errorf("%d spans (%v), want 9: the two requests', 5 of the first's steps and the group's, 2 of the second's", n, spans)
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
