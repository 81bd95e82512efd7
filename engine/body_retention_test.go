package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"weak"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
)

// A served push's request body is not kept alive once its answer is out:
// a pushed row aliases the body it was decoded from, so a partition that
// held on to its commit records (the staged commits of the last group, or
// rows in the in-memory log tail) kept whole request bodies — a 40 KB row
// in the tail held a 20 MB push — beyond the in-flight body budget.
func TestServedPushBodiesAreNotRetained(t *testing.T) {
	f := newFixture(t, memory.New())
	c := f.client("alice", "ca")
	serve := func(tag string) weak.Pointer[byte] {
		frames := []ssp2.Frame{&ssp2.ReqHeader{ClientID: c.cid, SchemaVersion: 1, LogEpoch: c.epoch}}
		for i := range 50 {
			id := fmt.Sprintf("%s-%d", tag, i)
			frames = append(frames, &ssp2.PushCommit{ClientCommitID: id,
				Operations: []ssp2.Operation{upsert("tasks", id, f.row(id, "P", strings.Repeat("x", 4000)), nil)}})
		}
		body, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: frames})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := ssp2.DecodeRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := f.eng.Sync(context.Background(), c.id, msg)
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range rep.Frames {
			if pr, ok := fr.(*ssp2.PushResult); ok && pr.Status != ssp2.CommitApplied {
				t.Fatalf("push %s: %+v", tag, pr)
			}
		}
		return weak.Make(&body[0])
	}
	first := serve("a")
	second := serve("b")
	for range 3 {
		runtime.GC()
	}
	for name, w := range map[string]weak.Pointer[byte]{"the first push": first, "the last push": second} {
		if w.Value() != nil {
			t.Errorf("%s's request body is still reachable after its answer", name)
		}
	}
}
