package engine_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// pushPullMode is one way BenchmarkSyncPushPull runs the engine:
// configure edits its Config, around wraps each round (a transport's
// span, say; nil: none).
type pushPullMode struct {
	name      string
	configure func(b *testing.B, cfg *engine.Config)
	around    func(ctx context.Context, eng *engine.Engine) (context.Context, func())
}

// pushPullModes are the modes beyond "off" (trace_bench_test.go adds
// the traced one; this file alone, as in a tree before tracing, runs
// "off" only, so old and new trees compare like for like).
var pushPullModes []pushPullMode

// BenchmarkSyncPushPull is the pushpull round in-process: one client,
// one partition on the memory backend, each round ONE Sync carrying a
// commit with one upsert and a pull of the client's scope at its cursor
// (CPU and allocations of the engine path alone; bench/RESULTS.md,
// "Tracing (issue 32)").
//
//	go test -run='^$' -bench=SyncPushPull -benchmem -count=5 ./engine/
func BenchmarkSyncPushPull(b *testing.B) {
	modes := append([]pushPullMode{{name: "off"}}, pushPullModes...)
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) { benchPushPull(b, m) })
	}
}

func benchPushPull(b *testing.B, m pushPullMode) {
	s, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		b.Fatal(err)
	}
	codec := ssp2.NewRowCodec(s.Table("tasks").Columns)
	cfg := engine.Config{Schema: s, Backend: memory.New().Backend(), Resolver: engine.AllowAll(s)}
	if m.configure != nil {
		m.configure(b, &cfg)
	}
	eng, err := engine.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	id := engine.Identity{ActorID: "u", Partition: "p"}
	rep, err := eng.Sync(context.Background(), id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 1}}})
	if err != nil {
		b.Fatal(err)
	}
	epoch := rep.Header().LogEpoch
	cursor := int64(-1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		ctx, end := context.Background(), func() {}
		if m.around != nil {
			ctx, end = m.around(ctx, eng)
		}
		rid := "r" + strconv.Itoa(i%20)
		payload, _ := codec.AppendSparse(nil, ssp2.Row{rid, "P", "title " + strconv.Itoa(i), nil}, nil, 0)
		rep, err := eng.Sync(ctx, id, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
			&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &epoch},
			&ssp2.PushCommit{ClientCommitID: "k" + strconv.Itoa(i), Operations: []ssp2.Operation{{Table: "tasks", RowID: rid, Op: ssp2.OpUpsert, Payload: payload}}},
			&ssp2.PullHeader{LimitCommits: 100, LimitSnapshotRows: 5000, MaxSnapshotPages: 1, Accept: ssp2.AcceptInlineRows},
			&ssp2.Subscription{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {"P"}}, Cursor: cursor}}})
		if err != nil || rep.Applied != 1 {
			b.Fatalf("round %d: %v", i, err)
		}
		for _, f := range rep.Frames {
			if e, ok := f.(*ssp2.SubEnd); ok {
				cursor = e.NextCursor
			}
		}
		end()
	}
}
