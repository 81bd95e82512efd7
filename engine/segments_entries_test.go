package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/memory"
)

// refPull pulls s by reference only and returns its one SEGMENT_REF.
func refPull(t *testing.T, c *client, s *ssp2.Subscription) *ssp2.SegmentRef {
	t.Helper()
	rep, err := c.sync(&ssp2.PullHeader{Accept: ssp2.AcceptRefRows}, s)
	if err != nil {
		t.Fatal(err)
	}
	var refs []*ssp2.SegmentRef
	for _, f := range rep.Frames {
		if r, ok := f.(*ssp2.SegmentRef); ok {
			refs = append(refs, r)
		}
	}
	if len(refs) != 1 {
		t.Fatalf("want 1 SEGMENT_REF, got %d", len(refs))
	}
	return refs[0]
}

// TestHotSegmentServesALaterEntryOfItsBytes: two scope maps with the same
// rows get the same segment id (one entry per scope digest). Once the
// first entry's segment is kept in memory, the second entry's owner must
// still be served, not refused as if its scopes did not match.
func TestHotSegmentServesALaterEntryOfItsBytes(t *testing.T) {
	f := newFixture(t, memory.New(), func(c *engine.Config) { c.Segments.HotBytes = 0 }) // default budget
	a := f.client("ada", "c-ada")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "p1", "hello"), nil))
	ref1 := refPull(t, a, sub("s1", -1, "p1"))
	for i := range 2 { // the second download keeps it in memory
		seg, err := f.eng.Segments().Get(context.Background(), a.id, ref1.SegmentID, map[string][]string{"project_id": {"p1"}})
		if err != nil {
			t.Fatalf("download %d: %v", i, err)
		}
		seg.Close()
	}
	b := f.client("bob", "c-bob")
	ref2 := refPull(t, b, sub("s2", -1, "p1", "p9")) // p9 has no rows: same bytes, another digest
	if ref2.SegmentID != ref1.SegmentID {
		t.Fatalf("segment ids differ (%s, %s): the test needs the same bytes under two digests", ref1.SegmentID, ref2.SegmentID)
	}
	seg, err := f.eng.Segments().Get(context.Background(), b.id, ref2.SegmentID, map[string][]string{"project_id": {"p1", "p9"}})
	if err != nil {
		t.Fatalf("the download of the segment just referenced to this caller was refused: %v", err)
	}
	seg.Close()
	// A caller whose scopes match no entry is still refused.
	if _, err := f.eng.Segments().Get(context.Background(), b.id, ref2.SegmentID, map[string][]string{"project_id": {"p2"}}); syncerr.CodeOf(err) != syncerr.Forbidden {
		t.Fatalf("download under other scopes: %v, want sync.forbidden", err)
	}
}

// TestSegmentDownloadScopeHeaderIsBounded: the requested scope map of a
// download is held to the pull's limits (values in all, identifier size)
// and refused 400 sync.invalid_request beyond them.
func TestSegmentDownloadScopeHeaderIsBounded(t *testing.T) {
	f := newFixture(t, memory.New())
	a := f.client("ada", "c-ada")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "p1", "hello"), nil))
	ref := refPull(t, a, sub("s1", -1, "p1"))
	many := make([]string, 10_001)
	for i := range many {
		many[i] = fmt.Sprintf("v%d", i)
	}
	for name, req := range map[string]map[string][]string{
		"10,001 values": {"project_id": many},
		"a long value":  {"project_id": {string(make([]byte, 600))}},
	} {
		if _, err := f.eng.Segments().Get(context.Background(), a.id, ref.SegmentID, req); syncerr.CodeOf(err) != syncerr.InvalidRequest {
			t.Errorf("%s: %v, want sync.invalid_request", name, err)
		}
	}
}
